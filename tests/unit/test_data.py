"""Tokenizers, token shards, the embedded corpus, build_dataset and the sample stream."""

from __future__ import annotations

import json
import multiprocessing as mp
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from trainer.data import SampleStream, TokenSource, build_dataset, build_tokenizer
from trainer.data.embedded import build_embedded
from trainer.data.shards import open_shard, write_shard
from trainer.data.stream import window_permutation
from trainer.data.tokenizer import ByteTokenizer, HFTokenizer

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "def main():\n    return 42  # the answer",
    "Pack my box with five dozen liquor jugs; caf\u00e9 na\u00efve \u00fcber \u4e2d\u6587.",
    "Sphinx of black quartz, judge my vow!",
]


def random_text(rng: np.random.Generator, n: int) -> str:
    alphabet = list("abcdefghij klmnop\nQRSTUV.,;:!?") + ["\u00e9", "\u00df", "\u4e2d", "\U0001f600"]
    return "".join(rng.choice(alphabet, size=n))


def make_hf_tokenizer(folder: Path, specials=("<s>", "</s>")) -> Path:
    """A tiny byte-level BPE trained on a few sentences, saved as tokenizer.json."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=list(specials), initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(SENTENCES * 3, trainer)
    path = folder / "tokenizer.json"
    tok.save(str(path))
    return path


# ----------------------------------------------------------------------------- tokenizers


def test_byte_tokenizer_round_trip_and_documents():
    rng = np.random.default_rng(0)
    tok = build_tokenizer("bytes")
    assert (tok.vocab_size, tok.bos_id, tok.eos_id, tok.fingerprint) == (258, 256, 257, "bytes-v1")
    docs = [random_text(rng, int(n)) for n in rng.integers(0, 200, size=6)]
    for d in docs:
        ids = tok.encode(d)
        assert max(ids, default=0) < 256 and tok.decode(ids) == d
    packed = tok.encode_documents(docs)
    expected = [i for d in docs for i in tok.encode(d) + [tok.eos_id]]
    assert packed.tolist() == expected
    assert tok.decode(packed.tolist()) == "".join(docs)  # specials are dropped when decoding


def test_hf_tokenizer(tmp_path):
    path = make_hf_tokenizer(tmp_path)
    tok = build_tokenizer(str(path))
    assert isinstance(tok, HFTokenizer)
    assert tok.eos_id == tok._tok.token_to_id("</s>") and tok.bos_id == tok._tok.token_to_id("<s>")
    assert tok.fingerprint.startswith("sha256:") and tok.fingerprint == HFTokenizer(path).fingerprint
    rng = np.random.default_rng(1)
    docs = SENTENCES + [random_text(rng, 150)]
    for d in docs:
        ids = tok.encode(d)
        assert tok.eos_id not in ids and tok.bos_id not in ids
        assert tok.decode(ids) == d
    assert len(tok.encode(SENTENCES[0])) < len(SENTENCES[0])  # merges were learned
    packed = tok.encode_documents(docs)
    assert packed.tolist() == [i for d in docs for i in tok.encode(d) + [tok.eos_id]]
    # The folder holding tokenizer.json is accepted too.
    assert build_tokenizer(str(tmp_path)).fingerprint == tok.fingerprint


def test_hf_tokenizer_specials_from_config_and_errors(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    path = make_hf_tokenizer(a, specials=("<|endoftext|>", "<mine>"))
    tok = HFTokenizer(path)  # GPT-2 style: no BOS token, so BOS is the EOS token
    assert tok.eos_id == tok.bos_id == tok._tok.token_to_id("<|endoftext|>")
    (a / "tokenizer_config.json").write_text(json.dumps({"eos_token": {"content": "<mine>"}}))
    assert HFTokenizer(path).eos_id == tok._tok.token_to_id("<mine>")
    (a / "tokenizer_config.json").write_text(json.dumps({"eos_token": 5, "bos_token": None}))
    with pytest.raises(ValueError, match=r"tokenizer_config\.json: eos_token 5 is not a token: write its text"):
        HFTokenizer(path)  # an id where the text belongs; was "no tokenizer_config.json names one"
    (a / "tokenizer_config.json").write_text("[]")
    with pytest.raises(ValueError, match=r"tokenizer_config\.json \(beside .*\) is not a JSON object"):
        HFTokenizer(path)

    no_eos = make_hf_tokenizer(b, specials=("<pad>",))
    with pytest.raises(ValueError, match="cannot determine the EOS token of .*tokenizer.json"):
        HFTokenizer(no_eos)
    missing = tmp_path / "nope" / "tokenizer.json"
    with pytest.raises(ValueError, match=str(missing)):
        build_tokenizer(str(missing))


# ----------------------------------------------------------------------------- shards


def test_shard_round_trip_uint16_and_uint32(tmp_path):
    rng = np.random.default_rng(2)
    small = ByteTokenizer()
    big = SimpleNamespace(vocab_size=70_000, eos_id=69_999, fingerprint="test-big")
    for tok, dtype in ((small, np.uint16), (big, np.uint32)):
        tokens = rng.integers(0, tok.vocab_size, size=1001)
        header = write_shard(tmp_path / f"{dtype.__name__}.bin", tokens, tok)
        arr, read = open_shard(tmp_path / f"{dtype.__name__}.bin", tok.fingerprint)
        assert arr.dtype == dtype and np.array_equal(arr, tokens) and read == header
        assert read["count"] == 1001 and read["eos_id"] == tok.eos_id and read["vocab_size"] == tok.vocab_size
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 258\)"):
        write_shard(tmp_path / "bad.bin", np.array([5, 300]), small)
    assert not (tmp_path / "bad.bin").exists() and not (tmp_path / "bad.json").exists()


def test_shard_validation_errors(tmp_path):
    tok = ByteTokenizer()
    tokens = np.random.default_rng(3).integers(0, 258, size=500)
    write_shard(tmp_path / "a.bin", tokens, tok)
    msg = r"shard .*a\.bin was made by tokenizer 'bytes-v1' but this run's tokenizer is 'sha256:00'"
    with pytest.raises(ValueError, match=msg):
        open_shard(tmp_path / "a.bin", "sha256:00")
    with pytest.raises(ValueError, match=r"a\.bin was made by tokenizer 'bytes-v1'.*'other'"):
        TokenSource(tmp_path, "other")
    with open(tmp_path / "a.bin", "r+b") as f:
        f.truncate(999)
    with pytest.raises(ValueError, match=r"shard .*a\.bin is 999 bytes but its header says 500 uint16 tokens"):
        open_shard(tmp_path / "a.bin")
    with pytest.raises(ValueError, match=r"a\.bin is 999 bytes"):
        TokenSource(tmp_path)
    (tmp_path / "a.bin").unlink()
    (tmp_path / "a.bin").mkdir()
    with pytest.raises(ValueError, match=r"shard .*a\.bin is a folder, not a file of tokens"):
        open_shard(tmp_path / "a.bin")


def test_token_source_reads_across_shards(tmp_path, monkeypatch):
    monkeypatch.setattr("trainer.data.shards.MAX_OPEN_SHARDS", 2)  # exercise closing least-used maps
    rng = np.random.default_rng(4)
    tok = ByteTokenizer()
    pieces = [rng.integers(0, 258, size=int(n)) for n in (37, 1, 250, 0, 64, 129)]
    for k, p in enumerate(pieces):
        write_shard(tmp_path / f"s{k:02d}.bin", p, tok)
    (tmp_path / "zz.bin").write_bytes(b"\x00\x01")  # no header: an interrupted write, ignored with a warning
    with pytest.warns(UserWarning, match="ignoring 1 .bin file"):
        src = TokenSource(tmp_path, tok.fingerprint)
    full = np.concatenate(pieces)
    assert len(src) == len(full) and src.eos_id == 257
    assert np.array_equal(src[30:300], full[30:300]) and np.array_equal(src[:], full)
    starts = rng.integers(0, len(full) - 70, size=200)
    got = src.gather(starts, 70)
    assert np.array_equal(got, full[starts[:, None] + np.arange(70)])
    assert len(src._open) <= 2
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="dataset folder .*empty holds no token shards"):
        TokenSource(tmp_path / "empty")


def test_token_source_names_the_shard_of_an_id_past_the_vocabulary(tmp_path):
    tok = ByteTokenizer()  # vocab 258, uint16 ids
    write_shard(tmp_path / "s00.bin", np.arange(100) % 258, tok)
    write_shard(tmp_path / "s01.bin", np.arange(100) % 258, tok)
    with open(tmp_path / "s01.bin", "r+b") as f:  # one flipped high bit: token 7 of s01 becomes 32,775
        f.seek(2 * 7 + 1)
        f.write(bytes([0x80]))
    src = TokenSource(tmp_path, tok.fingerprint)
    assert np.array_equal(src.gather(np.array([0, 50]), 50), [np.arange(50), np.arange(50, 100)])
    msg = r"shard .*s01\.bin holds token id 32775 at index 7, but its header's vocab_size is 258"
    with pytest.raises(ValueError, match=msg):
        src.gather(np.array([0, 90]), 20)  # the second window straddles into s01
    with pytest.raises(ValueError, match=msg):
        src[100:110]


def _edit_header(path: Path, **values) -> None:
    header = json.loads(path.read_text())
    header.update(values)
    path.write_text(json.dumps(header))


@pytest.mark.parametrize("key, value, valid", [
    ("vocab_size", "258", r"must be a positive integer"),
    ("vocab_size", None, r"must be a positive integer"),
    ("eos_id", "257", r"must be an integer token id in \[0, vocab_size = 258\)"),
    ("eos_id", 258, r"must be an integer token id in \[0, vocab_size = 258\)"),
    ("count", True, r"must be a non-negative integer"),
    ("tokenizer_fingerprint", 5, r"must be a string"),
])
def test_shard_header_fields_of_the_wrong_type_are_refused_naming_the_file(tmp_path, key, value, valid):
    # Such a header used to pass: a string vocab_size failed at the first step as a TypeError
    # inside gather(), and a string eos_id silently turned data.document_mask off.
    tok = ByteTokenizer()
    write_shard(tmp_path / "a.bin", np.arange(100) % 258, tok)
    _edit_header(tmp_path / "a.json", **{key: value})
    msg = rf"shard header .*a\.json: {key} {re.escape(json.dumps(value))} {valid}"
    with pytest.raises(ValueError, match=msg):
        open_shard(tmp_path / "a.bin")
    with pytest.raises(ValueError, match=msg):
        TokenSource(tmp_path)


@pytest.mark.parametrize("key, value", [("eos_id", 5), ("vocab_size", 300)])
def test_token_source_refuses_shards_whose_headers_disagree(tmp_path, key, value):
    # The first header's eos_id and vocab_size stand for the folder: another shard's must match.
    tok = ByteTokenizer()
    write_shard(tmp_path / "a.bin", np.arange(100) % 258, tok)
    write_shard(tmp_path / "b.bin", np.arange(100) % 258, tok)
    _edit_header(tmp_path / "b.json", **{key: value})
    msg = (rf"dataset folder .*: shard header b\.json has {key} {value} but a\.json has "
           rf"{getattr(tok, key)}; .* re-make them with scripts/prepare_data\.py")
    with pytest.raises(ValueError, match=msg):
        TokenSource(tmp_path)


def test_token_source_rejects_mixed_tokenizers(tmp_path):
    write_shard(tmp_path / "a.bin", np.arange(10), ByteTokenizer())
    other = SimpleNamespace(vocab_size=258, eos_id=257, fingerprint="bytes-v0")
    write_shard(tmp_path / "b.bin", np.arange(10), other)
    with pytest.raises(ValueError, match="mixes tokenizers: a.bin has 'bytes-v1', b.bin has 'bytes-v0'"):
        TokenSource(tmp_path)


# ----------------------------------------------------------------------------- embedded corpus


def test_embedded_corpus_deterministic_real_text_and_concurrent(tmp_path):
    tok = ByteTokenizer()
    a = build_embedded(tmp_path / "a", tok, max_bytes=400_000, shard_tokens=50_000)
    b = build_embedded(tmp_path / "b", tok, max_bytes=400_000, shard_tokens=50_000)
    assert a.name == b.name and b.name.startswith("stdlib-py")
    shards_a, shards_b = sorted(a.glob("*.bin")), sorted(b.glob("*.bin"))
    assert len(shards_a) >= 4 and [p.name for p in shards_a] == [p.name for p in shards_b]
    for pa, pb in zip(shards_a, shards_b):
        assert pa.read_bytes() == pb.read_bytes()
        assert pa.with_suffix(".json").read_bytes() == pb.with_suffix(".json").read_bytes()
    info = json.loads((a / "COMPLETE.json").read_text())
    assert 300_000 < info["bytes"] <= 400_000 and info["tokens"] == info["bytes"] + info["files"]
    src = TokenSource(a, tok.fingerprint)
    text = tok.decode(src[:].tolist())
    assert text.count("def ") > 50 and text.count("import ") > 20 and text.count("return") > 50
    assert int((src[:] == tok.eos_id).sum()) == info["files"]

    # Three processes racing on an empty cache agree on one complete folder and leave no temp.
    cache = tmp_path / "race"
    with mp.get_context("spawn").Pool(3) as pool:  # the target is trainer's own: workers skip torch
        args = (str(cache), ByteTokenizer(), 0, 400_000, 50_000)
        paths = [str(p) for p in pool.starmap(build_embedded, [args] * 3)]
    assert len(set(paths)) == 1 and Path(paths[0]).name == a.name
    assert sorted(p.name for p in (cache / "embedded").iterdir() if not p.name.endswith(".lock")) == [a.name]
    for pa in shards_a:
        assert (Path(paths[0]) / pa.name).read_bytes() == pa.read_bytes()


def test_build_dataset(tmp_path):
    tok = ByteTokenizer()
    src = build_dataset(SimpleNamespace(dataset="embedded", cache_dir=str(tmp_path / "cache")), tok)
    assert len(src) > 1_000_000 and src.fingerprint == tok.fingerprint
    with pytest.raises(ValueError, match=r"data.dataset: '.*nowhere': no folder at .*nowhere; data.dataset is "
                                         r"\"embedded\" or a folder of token shards, made with python "
                                         r"scripts/prepare_data.py --input FILES --output .*nowhere --tokenizer bytes"):
        build_dataset(SimpleNamespace(dataset=str(tmp_path / "nowhere"), cache_dir=""), tok)
    # The corpus file itself: its shards go to a new folder beside it, with the run's tokenizer.
    (tmp_path / "c.jsonl").write_text("")
    hf = HFTokenizer(make_hf_tokenizer(tmp_path))
    with pytest.raises(ValueError, match=r"--input .*c\.jsonl --output .*c_shards --tokenizer .*tokenizer\.json, "
                                         r"then train with --data.dataset=.*c_shards$"):
        build_dataset(SimpleNamespace(dataset=str(tmp_path / "c.jsonl"), cache_dir=""), hf)
    (tmp_path / "shards").mkdir()
    write_shard(tmp_path / "shards" / "x.bin", np.arange(99), tok)
    assert len(build_dataset(SimpleNamespace(dataset=str(tmp_path / "shards"), cache_dir=""), tok)) == 99
    msg = r"x\.bin was made by tokenizer 'bytes-v1' but this run's tokenizer is 'sha256:"
    with pytest.raises(ValueError, match=msg):
        build_dataset(SimpleNamespace(dataset=str(tmp_path / "shards"), cache_dir=""), hf)


# ----------------------------------------------------------------------------- sample stream


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> TokenSource:
    """Random tokens with frequent EOS over three shards: 5,000 tokens."""
    folder = tmp_path_factory.mktemp("stream")
    rng = np.random.default_rng(5)
    tok = ByteTokenizer()
    for k, n in enumerate((1700, 2300, 1000)):
        t = rng.integers(0, 256, size=n)
        t[rng.random(n) < 0.03] = tok.eos_id
        write_shard(folder / f"s{k}.bin", t, tok)
    return TokenSource(folder, tok.fingerprint)


def test_window_permutation_is_a_seeded_bijection():
    for n in (1, 2, 3, 10, 257, 1000):
        p0 = window_permutation(np.arange(n), n, seed=7, epoch=0)
        assert sorted(p0.tolist()) == list(range(n))
    p = [window_permutation(np.arange(500), 500, seed=s, epoch=e) for s, e in ((7, 0), (7, 1), (8, 0))]
    assert not np.array_equal(p[0], p[1]) and not np.array_equal(p[0], p[2])
    assert np.array_equal(p[0], window_permutation(np.arange(500), 500, seed=7, epoch=0))


def _collect(source, dp, steps, B=3, seq_len=16, seed=11, start=0):
    """Run every rank of a dp-way stream for `steps` batches -> {global index: (tokens, labels, doc_ids)}."""
    out = {}
    for r in range(dp):
        s = SampleStream(source, seq_len, seed, r, dp, B)
        s.load_state_dict({"next_index": start})
        for _ in range(steps):
            batch = s.next_batch()
            for row, i in enumerate(batch["indices"].tolist()):
                assert i not in out
                out[i] = tuple(batch[k][row].numpy() for k in ("tokens", "labels", "doc_ids"))
        assert s.state_dict() == {"next_index": start + steps * B * dp}
    return out


def test_stream_is_world_size_independent(source):
    seq_len, n = 16, (len(source) - 1) // 16
    ref = _collect(source, dp=1, steps=120)  # 360 samples: past one epoch (312 windows)
    assert sorted(ref) == list(range(360))
    for dp in (2, 4):
        got = _collect(source, dp=dp, steps=120 // dp)
        assert sorted(got) == sorted(ref)
        for i in ref:
            for x, y in zip(ref[i], got[i]):
                assert np.array_equal(x, y)
    # Epoch 0 visits every window once; the window of sample i is its tokens in the source.
    full = source[:]
    s = SampleStream(source, seq_len, 11, 0, 1, 1)
    wins = s.windows(np.arange(n))
    assert sorted(wins.tolist()) == list(range(n))
    for i in (0, 5, n - 1, n, 359):
        w = s.windows(np.array([i]))[0]
        assert np.array_equal(ref[i][0], full[w * seq_len : w * seq_len + seq_len])


def test_stream_batch_contents(source):
    s = SampleStream(source, 32, seed=3, dp_rank=1, dp_size=2, local_batch_size=4)
    batch = s.next_batch()
    assert batch["tokens"].shape == (4, 32) and batch["tokens"].dtype == torch.int64
    assert batch["labels"].dtype == torch.int64 and batch["doc_ids"].dtype == torch.int32
    assert batch["indices"].tolist() == [1, 3, 5, 7]
    full = source[:].astype(np.int64)
    for row, w in enumerate(s.windows(batch["indices"].numpy())):
        window = full[w * 32 : w * 32 + 33]
        assert batch["tokens"][row].tolist() == window[:-1].tolist()
        assert batch["labels"][row].tolist() == window[1:].tolist()
        # doc id: number of EOS strictly before the position (EOS belongs to the doc it ends).
        expected, d = [], 0
        for t in window[:-1]:
            expected.append(d)
            d += int(t == 257)
        assert batch["doc_ids"][row].tolist() == expected
    assert any(batch["doc_ids"][:, -1] > 0)  # the fixture's EOS rate makes boundaries certain


def test_stream_resume_bitwise_and_on_other_dp(source):
    full_run = _collect(source, dp=2, steps=10)
    first = _collect(source, dp=2, steps=4)
    resumed = _collect(source, dp=2, steps=6, start=4 * 3 * 2)
    assert sorted(first) + sorted(resumed) == sorted(full_run)
    for i, v in {**first, **resumed}.items():
        assert all(np.array_equal(x, y) for x, y in zip(v, full_run[i]))
    # Save mid-run on dp=2 (next_index 6), resume on dp=4 and dp=3: no repeat, no gap.
    s = SampleStream(source, 16, 11, 0, 2, 3)
    s.next_batch()
    state = s.state_dict()
    assert state == {"next_index": 6}
    for dp in (4, 3):
        seen = list(range(6))
        for r in range(dp):
            t = SampleStream(source, 16, 11, r, dp, 3)
            t.load_state_dict(state)
            seen += t.next_batch()["indices"].tolist() + t.next_batch()["indices"].tolist()
        assert sorted(seen) == list(range(6 + 2 * 3 * dp))


def test_stream_errors(source):
    with pytest.raises(ValueError, match=r"dataset .* has 5000 tokens, fewer than one sample of seq_len \+ 1 = 5001"):
        SampleStream(source, 5000, 0, 0, 1, 1)
    assert SampleStream(source, 4999, 0, 0, 1, 1).n_windows == 1
    with pytest.raises(ValueError, match="dp_rank must lie in"):
        SampleStream(source, 16, 0, 2, 2, 1)
    s = SampleStream(source, 16, 0, 0, 1, 1)
    with pytest.raises(ValueError, match="next_index"):
        s.load_state_dict({"index": 3})
    s.load_state_dict({"next_index": torch.tensor(9)})
    assert s.state_dict() == {"next_index": 9}


# ----------------------------------------------------------------------------- stream identity


def test_dataset_fingerprint_follows_the_shards_not_the_folder(tmp_path, source):
    """What a checkpoint records as the dataset: the same shards anywhere give the same value;
    another shard set (one shard more, one shorter, another tokenizer) gives another."""
    import shutil

    from trainer.data.identity import stream_identity

    copy = tmp_path / "moved"
    shutil.copytree(source.folder, copy)
    assert TokenSource(copy).content_fingerprint == source.content_fingerprint
    assert source.content_fingerprint.startswith("sha256:")
    tok = ByteTokenizer()
    write_shard(copy / "s3.bin", np.arange(50), tok)  # one more shard
    grown = TokenSource(copy).content_fingerprint
    write_shard(copy / "s3.bin", np.arange(49), tok)  # the same shard, regenerated shorter
    shorter = TokenSource(copy).content_fingerprint
    assert len({source.content_fingerprint, grown, shorter}) == 3
    ident = stream_identity(source, seq_len=16, global_batch_size=8, seed=3)
    assert ident == {"stream_version": 1, "dataset": source.content_fingerprint,
                     "dataset_name": str(source.folder), "dataset_tokens": 5000,
                     "tokenizer": "bytes-v1", "seq_len": 16, "global_batch_size": 8, "seed": 3}
    with pytest.raises(ValueError, match="global_batch_size must be resolved"):
        stream_identity(source, 16, -1, 3)


def test_identity_differences_skip_keys_one_side_lacks():
    from trainer.data.identity import describe, differences, dumps, loads

    saved = {"stream_version": 1, "dataset": "sha256:a", "seq_len": 16, "seed": 0}
    current = {**saved, "seq_len": 32, "seed": 0, "some_future_key": 1}
    assert differences(saved, current) == ["seq_len"]
    assert differences({k: v for k, v in saved.items() if k != "seq_len"}, current) == []
    assert describe(saved, current, ["seq_len"]) == ["training.seq_len (seq_len): saved 16, current 32"]
    assert loads(dumps(current), "x") == current
    with pytest.raises(ValueError, match="step-3: the recorded data-stream identity is not valid JSON"):
        loads("{oops", "step-3")


# ----------------------------------------------------------------------------- completion marker


def test_token_source_checks_the_completion_marker(tmp_path):
    from trainer.data.shards import write_complete_marker

    tok = ByteTokenizer()
    sizes = {"s0.bin": 30, "s1.bin": 0, "s2.bin": 45}
    for name, n in sizes.items():
        write_shard(tmp_path / name, np.arange(n) % 256, tok)
    write_complete_marker(tmp_path, {"shards": 3, "tokens": 75, "tokenizer": tok.fingerprint,
                                     "shard_list": [[k, v] for k, v in sizes.items()]})
    assert len(TokenSource(tmp_path, tok.fingerprint)) == 75
    write_shard(tmp_path / "s2.bin", np.arange(44), tok)  # regenerated with another length
    with pytest.raises(ValueError, match=r"folder .* does not match its COMPLETE\.json .*s2\.bin has 44 tokens, "
                                         r"listed with 45"):
        TokenSource(tmp_path)
    (tmp_path / "s2.json").unlink()  # a half-written shard
    with pytest.warns(UserWarning), pytest.raises(
            ValueError, match=r"1 listed shard\(s\) missing or without a header: \['s2\.bin'\]"):
        TokenSource(tmp_path)
    write_shard(tmp_path / "s2.bin", np.arange(45), tok)
    write_shard(tmp_path / "s3.bin", np.arange(5), tok)
    with pytest.raises(ValueError, match=r"1 shard\(s\) not listed: \['s3\.bin'\]"):
        TokenSource(tmp_path)
    # A marker with a count only (the embedded corpus writes one) is checked too.
    write_complete_marker(tmp_path, {"shards": 3, "tokens": 75})
    with pytest.raises(ValueError, match=r"4 shard\(s\) present, 3 listed"):
        TokenSource(tmp_path)


@pytest.mark.parametrize("shard_list, entry", [
    ([["s0.bin"]], '["s0.bin"]'),
    ([["s0.bin", "30"]], '["s0.bin", "30"]'),
    ([["s0.bin", -1]], '["s0.bin", -1]'),
    ([[30, "s0.bin"]], '[30, "s0.bin"]'),
    ({"s0.bin": 30}, '{"s0.bin": 30}'),
])
def test_a_malformed_shard_list_in_the_marker_is_refused_naming_the_entry(tmp_path, shard_list, entry):
    # Was "not enough values to unpack (expected 2, got 1)" or "invalid literal for int()".
    from trainer.data.shards import write_complete_marker

    tok = ByteTokenizer()
    write_shard(tmp_path / "s0.bin", np.arange(30), tok)
    write_complete_marker(tmp_path, {"shards": 1, "tokens": 30, "shard_list": shard_list})
    msg = (rf"completion marker .*COMPLETE\.json: shard_list entry {re.escape(entry)} is not a "
           r"\[\"NAME\.bin\", token count\] pair .*rerun the tool that made the folder")
    with pytest.raises(ValueError, match=msg):
        TokenSource(tmp_path, tok.fingerprint)



@pytest.mark.parametrize("key, value, valid", [
    ("shards", "1", "a shard count"), ("tokens", 30.5, "a token count"), ("tokens", -1, "a token count"),
    ("tokenizer", 7, "a tokenizer fingerprint string"),
])
def test_a_marker_field_of_the_wrong_type_is_refused_not_skipped(tmp_path, key, value, valid):
    # check_complete compared only ints (and a str tokenizer), so another type skipped its check.
    from trainer.data.shards import write_complete_marker

    tok = ByteTokenizer()
    write_shard(tmp_path / "s0.bin", np.arange(30), tok)
    write_complete_marker(tmp_path, {"shards": 1, "tokens": 30, "tokenizer": tok.fingerprint, key: value})
    msg = rf"completion marker .*COMPLETE\.json: {key} {re.escape(json.dumps(value))} is not {valid}; "
    with pytest.raises(ValueError, match=msg):
        TokenSource(tmp_path, tok.fingerprint)


def test_a_shard_header_of_another_version_says_which_one_the_reader_knows(tmp_path):
    tok = ByteTokenizer()
    write_shard(tmp_path / "a.bin", np.arange(10), tok)
    _edit_header(tmp_path / "a.json", version="1")
    with pytest.raises(ValueError, match=r"a\.json: version \"1\", this reader knows 1 \(the integer\)"):
        TokenSource(tmp_path)


def test_token_source_refuses_prepare_data_shards_without_marker(tmp_path):
    tok = ByteTokenizer()
    source = {"unit": {"kind": "txt", "files": [["a.txt", 3]]}, "part": 0, "parts": 1}
    write_shard(tmp_path / "shard-000000-0000.bin", np.arange(10), tok, source=source)
    msg = (r"dataset folder .* has no COMPLETE\.json: scripts/prepare_data\.py did not finish there .*"
           r"--mark-complete --output ")
    with pytest.raises(ValueError, match=msg):
        TokenSource(tmp_path, tok.fingerprint)
    with pytest.raises(ValueError, match="did not finish"):
        build_dataset(SimpleNamespace(dataset=str(tmp_path), cache_dir=""), tok)


def test_a_tokenizer_file_is_parsed_once_per_launch_and_again_when_rewritten(tmp_path):
    """validate_config and the Trainer both build data.tokenizer: the second gets the first's parse."""
    import os

    from tokenizers import Tokenizer as HFTok
    from tokenizers import models

    from trainer.data.tokenizer import build_tokenizer

    path = tmp_path / "tokenizer.json"
    tok = HFTok(models.WordLevel({"a": 0, "b": 1}, unk_token="a"))
    tok.add_special_tokens(["<|end_of_text|>"])
    tok.save(str(path))
    first = build_tokenizer(str(path))
    assert build_tokenizer(str(path)) is first
    tok.add_special_tokens(["<|extra|>"])
    tok.save(str(path))
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    again = build_tokenizer(str(path))
    assert again is not first and again.vocab_size == first.vocab_size + 1


def test_the_run_says_how_much_of_the_dataset_it_reads_and_warns_past_one_epoch(logs):
    import logging
    from types import SimpleNamespace

    from trainer.trainer import Trainer

    # What the Trainer logs at start-up on rank 0: 17 samples read 4 times over is a warning (QA:
    # a tiny dataset trained 3.8 epochs and memorised it without a word).
    dataset = type("Shards", (), {"name": "shards", "__len__": lambda self: 4405})()
    run = SimpleNamespace(stream=SimpleNamespace(n_windows=17, seq_len=256), dataset=dataset)
    Trainer._log_data_coverage(run, 8, 8)
    assert logs.at(logging.WARNING) == [
        "data: shards: 4,405 tokens, 17 samples of 256 tokens; 8 steps x 8 samples read 64 of them "
        "(3.76 epochs): every sample is seen about 3.76 times (a larger dataset, fewer "
        "training.steps or a smaller batch reads each once)"]
    Trainer._log_data_coverage(run, 2, 8)
    assert logs.at(logging.INFO)[-1].endswith("read 16 of them (0.941 epochs)")
