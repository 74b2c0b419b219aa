"""scripts/prepare_data.py: txt/jsonl/parquet inputs, 2 worker processes, resumability, errors."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.unit.test_data import make_hf_tokenizer, random_text
from trainer.data import TokenSource, build_tokenizer
from trainer.data.prepare import prepare

ROOT = Path(__file__).resolve().parents[2]


def make_corpus(folder: Path, seed: int = 0) -> tuple[list[str], list[str]]:
    """Random documents in 3 .txt, 2 .jsonl (with a null and a blank line) and 1 .parquet (2 row
    groups) -> (the --input list, the documents in the order they must appear in the shards)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    docs: list[str] = []
    for k in range(3):
        text = random_text(rng, int(rng.integers(50, 400)))
        (folder / f"t{k}.txt").write_text(text, encoding="utf-8")
        docs.append(text)
    for k in range(2):
        lines = []
        for j in range(40):
            text = random_text(rng, int(rng.integers(0, 120)))
            lines.append(json.dumps({"id": j, "text": text}))
            docs.append(text)
        lines.insert(7, json.dumps({"id": -1, "text": None}))
        lines.insert(3, "")
        (folder / f"j{k}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    texts = [random_text(rng, int(rng.integers(1, 200))) for _ in range(30)]
    pq.write_table(pa.table({"text": texts, "n": list(range(30))}), folder / "p.parquet", row_group_size=16)
    docs.extend(texts)
    return [str(folder / "t*.txt"), str(folder / "j*.jsonl"), str(folder / "p.parquet")], docs


def shard_files(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(folder.glob("shard-*"))}


@pytest.mark.parametrize("tokenizer", ["bytes", "hf"])
def test_prepare_txt_jsonl_parquet_two_workers_and_resume(tmp_path, tokenizer):
    pytest.importorskip("pyarrow")
    inputs, docs = make_corpus(tmp_path / "in")
    spec = "bytes" if tokenizer == "bytes" else str(make_hf_tokenizer(tmp_path))
    tok = build_tokenizer(spec)
    out = tmp_path / "out"
    # Small units and shards: the jsonl files split into byte ranges, units write several parts.
    kw = dict(tokenizer=spec, workers=2, shard_tokens=700, unit_bytes=1500, log=None)
    stats = prepare(inputs, out, **kw)
    assert stats.units >= 8 and stats.done == stats.units and stats.skipped == 0
    assert stats.documents == len(docs) and stats.null_documents == 2
    expected = np.concatenate([np.array(tok.encode(d) + [tok.eos_id]) for d in docs])
    src = TokenSource(out, tok.fingerprint)
    assert np.array_equal(src[:], expected) and stats.tokens == len(expected)
    assert len(src.paths) > stats.units  # some units wrote several parts
    assert max(src.counts) <= 700

    # A rerun does no work and leaves every file untouched.
    before = shard_files(out)
    again = prepare(inputs, out, **kw)
    assert (again.done, again.skipped, again.tokens) == (0, stats.units, 0)
    assert shard_files(out) == before

    # An interrupted unit (header missing, data truncated) is redone alone, with identical results.
    victim = sorted(out.glob("shard-000002-*.bin"))[-1]
    victim.with_suffix(".json").unlink()
    first_of_4 = out / "shard-000004-0000.bin"
    first_of_4.write_bytes(first_of_4.read_bytes()[:-2])
    redo = prepare(inputs, out, **kw)
    assert (redo.done, redo.skipped) == (2, stats.units - 2)
    assert {k: v[0] for k, v in shard_files(out).items()} == {k: v[0] for k, v in before.items()}


def test_prepare_sequential_equals_parallel_and_rejects_mixing(tmp_path):
    pytest.importorskip("pyarrow")
    inputs, _ = make_corpus(tmp_path / "in", seed=1)
    a = prepare(inputs, tmp_path / "a", workers=1, shard_tokens=500, unit_bytes=2000, log=None)
    b = prepare(inputs, tmp_path / "b", workers=2, shard_tokens=500, unit_bytes=2000, log=None)
    assert a.tokens == b.tokens
    assert {k: v[0] for k, v in shard_files(tmp_path / "a").items()} == {
        k: v[0] for k, v in shard_files(tmp_path / "b").items()
    }
    hf = str(make_hf_tokenizer(tmp_path))
    with pytest.raises(ValueError, match=r"holds shard-000000-0000.json made by tokenizer 'bytes-v1', not 'sha256:"):
        prepare(inputs, tmp_path / "a", tokenizer=hf, shard_tokens=500, unit_bytes=2000, log=None)
    with pytest.raises(ValueError, match="holds shards beyond this input set"):
        prepare(inputs[1:], tmp_path / "a", shard_tokens=500, unit_bytes=2000, log=None)
    # An edited input changes its unit's description: never mixed with the old shards.
    (tmp_path / "in" / "t0.txt").write_text("edited")
    with pytest.raises(ValueError, match=r"holds shard-000000-0000.json made from other inputs"):
        prepare(inputs, tmp_path / "a", shard_tokens=500, unit_bytes=2000, log=None)


def test_prepare_input_errors(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "fine"}) + "\n" + json.dumps({"body": "x"}) + "\n")
    msg = r"bad\.jsonl line 2 \(byte 17\): no field 'text' \(--text-key\); found \['body'\]"
    with pytest.raises(ValueError, match=msg):
        prepare([str(bad)], tmp_path / "o1", log=None)
    (tmp_path / "good.txt").write_text("a fine document")
    with pytest.raises(ValueError, match=r"bad\.jsonl line 2 \(byte 17\): no field 'text'"):
        prepare([str(tmp_path / "good.txt"), str(bad)], tmp_path / "o1", workers=2, log=None)  # raised in a worker
    with pytest.raises(ValueError, match=r"--input '.*nothing\*\.txt': the pattern matches no file"):
        prepare([str(tmp_path / "nothing*.txt")], tmp_path / "o2", log=None)
    (tmp_path / "x.csv").write_text("a,b\n")
    with pytest.raises(ValueError, match=r"x\.csv: unsupported file type; valid: \.txt, \.jsonl, \.parquet"):
        prepare([str(tmp_path / "x.csv")], tmp_path / "o3", log=None)
    (tmp_path / "latin.txt").write_bytes(b"caf\xe9")
    with pytest.raises(ValueError, match=r"latin\.txt: not valid UTF-8"):
        prepare([str(tmp_path / "latin.txt")], tmp_path / "o4", log=None)
    # A .jsonl line that is not UTF-8: the file and the line, also in a unit starting mid-file.
    (tmp_path / "latin.jsonl").write_bytes(b'{"text": "fine"}\n' * 3 + b'{"text": "ok \xff bad"}\n')
    for unit_bytes in (2**20, 20):
        with pytest.raises(ValueError, match=r"latin\.jsonl line 4 \(byte 51\): not valid UTF-8 \('utf-8' codec"):
            prepare([str(tmp_path / "latin.jsonl")], tmp_path / "o4", unit_bytes=unit_bytes, log=None)
    if importlib.util.find_spec("datasets") is None:
        with pytest.raises(ValueError, match="hf: inputs need the `datasets` package"):
            prepare(["hf:roneneldan/TinyStories"], tmp_path / "o5", log=None)


def test_damaged_parquet_is_named(tmp_path):
    """pyarrow's errors name no file: a .parquet that is not one, or whose data pages are damaged,
    is one error naming it, and the new folder is removed again."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    (tmp_path / "notes.parquet").write_text("not parquet at all")
    with pytest.raises(ValueError, match=r"input .*notes\.parquet: not a readable parquet file \(Parquet magic"):
        prepare([str(tmp_path / "notes.parquet")], tmp_path / "o1", log=None)
    damaged = tmp_path / "damaged.parquet"
    pq.write_table(pa.table({"text": [f"document {i} " * 20 for i in range(100)]}), damaged)
    data = bytearray(damaged.read_bytes())
    data[20:400] = b"\xab" * 380  # the first page header and data; the footer is intact
    damaged.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"input .*damaged\.parquet: row group 0 cannot be read \(\S"):
        prepare([str(damaged)], tmp_path / "o2", log=None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["damaged.parquet", "notes.parquet"]


def test_a_text_column_of_another_type_is_one_line_and_leaves_no_folder(tmp_path, capsys, monkeypatch):
    """A .parquet text column of ints was a TypeError traceback, and the new --output folder stayed
    behind holding only the lock file. Now: one line naming the file, column and type, as for .jsonl."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    import trainer.data.prepare as prep

    prepare_data = _prepare_data_cli()
    ints = tmp_path / "ints.parquet"
    pq.write_table(pa.table({"text": list(range(20)), "n": list(range(20))}), ints, row_group_size=8)
    out = tmp_path / "out"
    for workers in ("1", "2"):  # in this process; in a worker (several units)
        rc = prepare_data.main(["--input", str(ints), "--output", str(out), "--workers", workers, "--unit-mb", "1e-6"])
        err = capsys.readouterr().err
        assert rc == 2 and err == (f"prepare_data: error: input {ints}: column 'text' (--text-key) is int, "
                                   "expected a string\n"), err
        assert not out.exists()
    # Whatever else fails before a unit is written leaves no folder either.
    monkeypatch.setattr(prep, "process_unit", lambda job: 1 / 0)
    (tmp_path / "a.txt").write_text("a document")
    with pytest.raises(ZeroDivisionError):
        prepare([str(tmp_path / "a.txt")], out, workers=1, log=None)
    assert not out.exists()


def _prepare_data_cli():
    """scripts/prepare_data.py as a module (scripts/ is not a package)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import prepare_data
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    return prepare_data


def test_cli(tmp_path, capsys):
    prepare_data = _prepare_data_cli()
    (tmp_path / "a.txt").write_text("hello world\n")
    (tmp_path / "b.txt").write_text("second document")
    rc = prepare_data.main(["--input", str(tmp_path / "*.txt"), "--output", str(tmp_path / "out"), "--workers", "1"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "1 work unit(s)" in printed and "2 documents" in printed and "29 tokens" in printed
    src = TokenSource(tmp_path / "out", "bytes-v1")
    assert build_tokenizer("bytes").decode(src[:].tolist()) == "hello world\nsecond document"
    rc = prepare_data.main(["--input", str(tmp_path / "missing.txt"), "--output", str(tmp_path / "o")])
    assert rc == 2 and "missing.txt" in capsys.readouterr().err


@pytest.mark.parametrize("unit_mb", ["0", "-1", "nan", "inf"])
def test_a_unit_size_that_is_not_a_positive_number_is_refused(tmp_path, capsys, unit_mb):
    """Was: 0 and negative sizes became 1-byte work units (a shard pair per input byte: 29 shards
    for a 29-byte file), nan an error naming no option, inf a traceback."""
    prepare_data = _prepare_data_cli()
    (tmp_path / "a.txt").write_text("hello world\n")
    out = tmp_path / "out"
    rc = prepare_data.main(["--input", str(tmp_path / "a.txt"), "--output", str(out), "--unit-mb", unit_mb])
    err = capsys.readouterr().err
    assert rc == 2 and not out.exists()
    assert err == (f"prepare_data: error: --unit-mb must be a number > 0 (MB of input text per work unit; "
                   f"default 64), got {unit_mb}\n")


def test_output_that_is_a_file_or_under_an_input_glob_is_refused(tmp_path, capsys, monkeypatch):
    """The corpus file given as --output too (what the old data.dataset hint proposed) is one
    error line naming it and a folder to use instead; the file is untouched and nothing is created.
    A glob that would match the shards written into --output is refused before it can feed them
    back in on the rerun that resumes."""
    prepare_data = _prepare_data_cli()
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"text": "a document"}) + "\n")
    before = corpus.read_bytes()
    monkeypatch.chdir(tmp_path)
    for inputs in (["corpus.jsonl"], [str(tmp_path / "*.jsonl")]):
        rc = prepare_data.main(["--input", *inputs, "--output", "corpus.jsonl", "--workers", "1"])
        err = capsys.readouterr().err
        assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, err
        assert err == (f"prepare_data: error: --output {corpus} is a file (one of the --input files), not a "
                       f"folder: --output names the folder the shards are written to (created when missing), "
                       f"e.g. --output {tmp_path / 'corpus_shards'} (nothing was written)\n")
    # Another existing file: the same refusal, without the claim that it is an input.
    (tmp_path / "notes.md").write_text("mine")
    with pytest.raises(ValueError, match=r"notes\.md is a file, not a folder: --output names the folder"):
        prepare(["corpus.jsonl"], "notes.md", log=None)
    assert corpus.read_bytes() == before and (tmp_path / "notes.md").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.jsonl", "notes.md"]
    # The suggested folder works.
    assert prepare_data.main(["--input", "corpus.jsonl", "--output", "corpus_shards", "--workers", "1"]) == 0
    capsys.readouterr()
    # '**' matches the shard files of a folder under it (a rerun would read them as inputs);
    # '*.jsonl' does not, so the same folder is fine with it.
    for glob_ in (str(tmp_path / "**"), str(tmp_path / "*" / "shard-*")):
        with pytest.raises(ValueError, match=r"out is inside --input .*: the pattern matches the shard files"):
            prepare([glob_], tmp_path / "out", log=None)
    assert not (tmp_path / "out").exists()
    assert prepare([str(tmp_path / "*.jsonl")], tmp_path / "out", log=None).total_tokens == 11
    assert prepare([str(tmp_path / "*.jsonl")], tmp_path / "out", log=None).skipped == 1  # the rerun resumes


@pytest.mark.parametrize("name,content,tokens", [
    ("empty.txt", "", 1),  # one empty document: its EOS only
    ("empty.jsonl", "", 0),
    ("nulls.jsonl", '{"text": null}\n\n', 0),
    ("blank.jsonl", '{"text": ""}\n', 1),
])
def test_inputs_too_small_to_train_are_refused_and_leave_no_folder(tmp_path, capsys, name, content, tokens):
    prepare_data = _prepare_data_cli()
    src = tmp_path / name
    src.write_text(content)
    out = tmp_path / "out"
    rc = prepare_data.main(["--input", str(src), "--output", str(out), "--workers", "1"])
    err = capsys.readouterr().err
    assert rc == 2
    assert f"--input {src} (1 file(s): {src}) gave {tokens} token(s)" in err, err
    assert "training needs at least training.seq_len + 1 tokens" in err
    assert not out.exists()  # nothing a training run could mistake for a dataset


def test_too_few_tokens_into_an_existing_folder_keeps_what_was_there(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.md").write_text("the user's")
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(ValueError, match=r"gave 1 token\(s\) from 1 document\(s\)"):
        prepare([str(tmp_path / "empty.txt")], out, log=None)
    assert sorted(p.name for p in out.iterdir()) == [".prepare_data.lock", "notes.md"]
    assert (out / "notes.md").read_text() == "the user's"
    # Two tokens (a character and its EOS) are one sample of seq_len = 1: accepted.
    (tmp_path / "one.txt").write_text("a")
    assert prepare([str(tmp_path / "one.txt")], tmp_path / "o2", log=None).total_tokens == 2


def test_an_output_that_cannot_be_made_or_written_is_one_line(tmp_path, capsys):
    """mkdir's and the lock file's OSErrors were tracebacks: now one line naming --output and why."""
    prepare_data = _prepare_data_cli()
    (tmp_path / "a.txt").write_text("a document")
    (tmp_path / "notes.md").write_text("mine")
    cases = [(tmp_path / "notes.md" / "x", "cannot create --output {}: Not a directory")]
    if Path("/proc/self").is_dir():  # procfs: no new files or folders there, even for root
        cases += [(Path("/proc/titankit_qa"), "cannot create --output {}: "),
                  (Path("/proc"), "cannot write in --output {}: ")]
    for out, msg in cases:
        rc = prepare_data.main(["--input", str(tmp_path / "a.txt"), "--output", str(out), "--workers", "1"])
        err = capsys.readouterr().err
        assert rc == 2 and err.startswith(f"prepare_data: error: {msg.format(out)}") and err.count("\n") == 1, err
    assert (tmp_path / "notes.md").read_text() == "mine"


def test_no_input_files_leave_no_folder(tmp_path):
    (tmp_path / "in").mkdir()
    with pytest.raises(ValueError, match=r"--input '.*in': the folder holds no \.txt/\.jsonl/\.parquet file"):
        prepare([str(tmp_path / "in")], tmp_path / "out", log=None)
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------- completion marker and lock


def tiny_corpus(folder: Path, n: int = 4) -> list[str]:
    """n small .txt files, one work unit each with unit_bytes=1 -> the --input list."""
    folder.mkdir(parents=True, exist_ok=True)
    for k in range(n):
        (folder / f"d{k}.txt").write_text(f"document {k} " * (k + 3))
    return [str(folder / "d*.txt")]


def test_marker_written_last_and_matching(tmp_path, monkeypatch):
    import trainer.data.prepare as prep

    inputs, out = tiny_corpus(tmp_path / "in"), tmp_path / "out"
    calls: list[str] = []
    real_header, real_marker = prep.write_shard_header, prep.write_complete_marker
    monkeypatch.setattr(prep, "write_shard_header", lambda *a: (calls.append("header"), real_header(*a)))
    monkeypatch.setattr(prep, "write_complete_marker", lambda *a: (calls.append("marker"), real_marker(*a)))
    stats = prepare(inputs, out, workers=1, shard_tokens=20, unit_bytes=1, log=None)
    assert calls.count("marker") == 1 and calls[-1] == "marker" and calls.count("header") == len(stats.shards)
    marker = json.loads((out / "COMPLETE.json").read_text())
    src = TokenSource(out, "bytes-v1")
    assert marker["inputs"] == inputs and marker["tokenizer"] == "bytes-v1" and marker["units"] == 4
    assert marker["shards"] == len(stats.shards) == len(src.paths) > 4  # units wrote several parts
    assert marker["tokens"] == len(src) == stats.tokens == stats.total_tokens
    assert marker["shard_list"] == [[p.name, c] for p, c in zip(src.paths, src.counts)]
    stamp = (out / "COMPLETE.json").stat().st_mtime_ns
    assert all(p.stat().st_mtime_ns <= stamp for p in out.glob("shard-*"))
    # A rerun with nothing to do leaves the marker as it is.
    calls.clear()
    prepare(inputs, out, workers=1, shard_tokens=20, unit_bytes=1, log=None)
    assert calls == [] and (out / "COMPLETE.json").stat().st_mtime_ns == stamp


def test_interrupted_run_is_refused_and_a_rerun_completes_it(tmp_path, monkeypatch):
    import trainer.data.prepare as prep

    inputs = tiny_corpus(tmp_path / "in")
    full = prepare(inputs, tmp_path / "ref", workers=1, shard_tokens=20, unit_bytes=1, log=None)
    out = tmp_path / "out"
    real = prep.process_unit

    def dies_at_unit_2(job):
        if job[1].index == 2:
            raise KeyboardInterrupt  # the tool killed between units
        return real(job)

    monkeypatch.setattr(prep, "process_unit", dies_at_unit_2)
    with pytest.raises(KeyboardInterrupt):
        prepare(inputs, out, workers=1, shard_tokens=20, unit_bytes=1, log=None)
    assert sorted(out.glob("shard-*.json")) and not (out / "COMPLETE.json").exists()
    msg = r"dataset folder .*out has no COMPLETE\.json: scripts/prepare_data\.py did not finish there.*Rerun the same"
    with pytest.raises(ValueError, match=msg):
        TokenSource(out, "bytes-v1")
    monkeypatch.setattr(prep, "process_unit", real)
    redo = prepare(inputs, out, workers=1, shard_tokens=20, unit_bytes=1, log=None)
    assert (redo.skipped, redo.done) == (2, 2)
    assert (out / "COMPLETE.json").read_text() == (tmp_path / "ref" / "COMPLETE.json").read_text()
    assert np.array_equal(TokenSource(out, "bytes-v1")[:], TokenSource(tmp_path / "ref")[:])
    assert redo.total_tokens == full.tokens

    # A rerun that will change the folder invalidates the marker before it starts working.
    for p in out.glob("shard-000001-*.json"):
        p.unlink()

    def dies_at_once(job):
        raise KeyboardInterrupt

    monkeypatch.setattr(prep, "process_unit", dies_at_once)
    with pytest.raises(KeyboardInterrupt):
        prepare(inputs, out, workers=1, shard_tokens=20, unit_bytes=1, log=None)
    assert not (out / "COMPLETE.json").exists()


def test_a_rerun_with_other_settings_is_told_which(tmp_path):
    """A rerun into a folder whose units were planned otherwise names the option that differs (it
    printed both units' raw descriptions), from COMPLETE.json or, for a run stopped midway, from the
    shard headers."""
    corpus = tmp_path / "big.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"document {i} " * 10}) + "\n" for i in range(3000)))
    out = tmp_path / "out"
    prepare([str(corpus)], out, unit_bytes=2**18, log=None)  # 0.25 MB: 2 units of the 0.45 MB file
    refusal = r"shard-000000-0000\.json made with other settings \(--unit-mb: 0\.25 before, 0\.125 now\): rerun with"
    with pytest.raises(ValueError, match=refusal):
        prepare([str(corpus)], out, unit_bytes=2**17, log=None)
    with pytest.raises(ValueError, match=r"holds shards beyond this input set .*\(--unit-mb: 0\.25 before, 0\.5 now\)"):
        prepare([str(corpus)], out, unit_bytes=2**19, log=None)
    (out / "COMPLETE.json").unlink()  # as after a run stopped midway: the headers record --unit-mb
    with pytest.raises(ValueError, match=refusal):
        prepare([str(corpus)], out, unit_bytes=2**17, log=None)
    assert prepare([str(corpus)], out, unit_bytes=2**18, log=None).skipped == 2  # the same settings resume
    (tmp_path / "first.jsonl").write_text(json.dumps({"text": "a new first file"}) + "\n")
    with pytest.raises(ValueError, match=r"made with other settings \(--input files: 1 new \['.*first\.jsonl'\]\)"):
        prepare([str(tmp_path / "first.jsonl"), str(corpus)], out, unit_bytes=2**18, log=None)


def test_a_rerun_with_another_text_key_or_shard_size_is_refused(tmp_path):
    """Same units, other contents or cuts: the rerun skipped every finished unit and wrote its own
    --text-key into COMPLETE.json over shards made from the other field, without a word."""
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"text {i} " * 9, "title": f"t{i}"}) + "\n" for i in range(50)))
    out = tmp_path / "out"
    prepare([str(corpus)], out, shard_tokens=2000, log=None)
    marker = (out / "COMPLETE.json").read_text()
    with pytest.raises(ValueError, match=r"holds shards made with other settings \(--text-key: 'text' before, "
                       r"'title' now\): rerun with the earlier ones"):
        prepare([str(corpus)], out, text_key="title", shard_tokens=2000, log=None)
    with pytest.raises(ValueError, match=r"\(--shard-tokens: 2000 before, 1000 now\)"):
        prepare([str(corpus)], out, shard_tokens=1000, log=None)
    assert (out / "COMPLETE.json").read_text() == marker  # nothing rewritten
    (out / "COMPLETE.json").unlink()  # a run stopped midway: the shard headers record both
    with pytest.raises(ValueError, match=r"--text-key: 'text' before, 'title' now"):
        prepare([str(corpus)], out, text_key="title", shard_tokens=2000, log=None)
    assert prepare([str(corpus)], out, shard_tokens=2000, log=None).skipped == 1


def test_folder_with_a_unit_missing_is_refused(tmp_path):
    inputs, out = tiny_corpus(tmp_path / "in"), tmp_path / "out"
    prepare(inputs, out, workers=1, shard_tokens=20, unit_bytes=1, log=None)
    gone = sorted(out.glob("shard-000003-*"))
    for p in gone:
        p.unlink()
    msg = (r"dataset folder .*out does not match its COMPLETE\.json .*: \d+ listed shard\(s\) missing or without "
           r"a header: \['shard-000003-0000\.bin'")
    with pytest.raises(ValueError, match=msg):
        TokenSource(out, "bytes-v1")
    prepare(inputs, out, workers=1, shard_tokens=20, unit_bytes=1, log=None)  # the rerun repairs it
    assert len(TokenSource(out, "bytes-v1").paths) == json.loads((out / "COMPLETE.json").read_text())["shards"]


def test_mark_complete_for_folders_made_before_markers(tmp_path, capsys):
    from trainer.data.prepare import mark_complete

    prepare_data = _prepare_data_cli()
    inputs, out = tiny_corpus(tmp_path / "in"), tmp_path / "out"
    prepare(inputs, out, workers=1, shard_tokens=20, unit_bytes=1, log=None)
    reference = json.loads((out / "COMPLETE.json").read_text())
    (out / "COMPLETE.json").unlink()  # as an older titankit left it
    with pytest.raises(ValueError, match="has no COMPLETE.json"):
        TokenSource(out)
    assert prepare_data.main(["--mark-complete", "--output", str(out)]) == 0
    assert "marked" in capsys.readouterr().out
    marker = json.loads((out / "COMPLETE.json").read_text())
    assert {k: marker[k] for k in ("shards", "tokens", "shard_list", "units")} == {
        k: reference[k] for k in ("shards", "tokens", "shard_list", "units")}
    assert len(TokenSource(out)) == reference["tokens"]
    # A folder with a unit missing in the middle is not marked.
    (out / "COMPLETE.json").unlink()
    for p in out.glob("shard-000001-*"):
        p.unlink()
    with pytest.raises(ValueError, match=r"not complete, not marking it: unit\(s\) \[1\] missing"):
        mark_complete(out, log=None)
    assert not (out / "COMPLETE.json").exists()


def test_second_concurrent_run_is_refused_while_the_lock_is_held(tmp_path, capsys):
    import fcntl
    import os
    import socket

    prepare_data = _prepare_data_cli()
    inputs, out = tiny_corpus(tmp_path / "in", n=2), tmp_path / "out"
    out.mkdir()
    busy = out / ".shard-000000-0000.bin.tmp-424242"  # the first run's file being written
    busy.write_bytes(b"x")
    lock = out / ".prepare_data.lock"
    with open(lock, "w") as held:  # the first run holds the lock (what output_lock does)
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write(f"{os.getpid()} {socket.gethostname()}\n")
        held.flush()
        msg = (rf"output folder .*out is in use by another scripts/prepare_data\.py run \(pid {os.getpid()} on "
               rf"host {socket.gethostname()} holds .*\.prepare_data\.lock\)")
        with pytest.raises(ValueError, match=msg):
            prepare(inputs, out, workers=1, unit_bytes=1, log=None)
        rc = prepare_data.main(["--input", *inputs, "--output", str(out), "--workers", "1", "--unit-mb", "0.000001"])
        assert rc == 2 and "is in use by another scripts/prepare_data.py run" in capsys.readouterr().err
        assert busy.exists() and not list(out.glob("shard-*"))
    # Released (also by an error inside the run); the lock file left behind does not block.
    assert (out / ".prepare_data.lock").exists()
    stats = prepare(inputs, out, workers=1, unit_bytes=1, log=None)
    assert stats.done == 2 and not busy.exists() and (out / "COMPLETE.json").exists()
    with pytest.raises(ValueError, match="beyond this input set"):
        prepare([str(tmp_path / "in" / "d0.txt")], out, workers=1, unit_bytes=1, log=None)
    assert prepare(inputs, out, workers=1, unit_bytes=1, log=None).skipped == 2  # the failed run let go of the lock


def test_a_file_system_without_locks_is_named_by_the_tool_that_hit_it(tmp_path, monkeypatch):
    import errno
    import fcntl

    from trainer.data.prepare import output_lock

    def refuse(fd, op):
        raise OSError(errno.ENOLCK, "no locks here")

    monkeypatch.setattr(fcntl, "flock", refuse)
    with pytest.warns(UserWarning, match=r"^scripts/prepare_data.py: cannot lock .* going on without a lock"):
        with output_lock(tmp_path):
            pass
