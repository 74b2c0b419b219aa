"""scripts/convert_checkpoint.py: titankit checkpoints to and from Hugging Face's Llama layout.

What a user relies on: an exported run computes the same logits in transformers' LlamaForCausalLM
as in titankit; Hugging Face weights imported and trained from give the same first step as the
weights they came from; a wrong config, an existing output folder or an incomplete checkpoint is
refused with a message that names it, and no partial folder is left behind.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

from tests.helpers.cpu import cpu_env
from trainer.config import load_config, resolve_model_args
from trainer.models.hf_llama import from_hf_name, from_hf_tensor, to_hf_name, to_hf_tensor
from trainer.models.llama import Llama

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "convert_checkpoint.py"
_spec = importlib.util.spec_from_file_location("convert_checkpoint", SCRIPT)
convert = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(convert)

# RoPE with a short original context, so that the Llama-3.1 scaling moves most frequencies of the
# debug model's 16-wide heads: a wrong scaling or pairing in the export shows in the logits.
MODEL = ["--model.overrides.rope_theta=10000", "--model.overrides.rope_original_max_seq_len=16",
         "--training.seq_len=64", "--training.local_batch_size=2", "--lr_scheduler.warmup_steps=1"]


def train(dump: Path, name: str, steps: int, *extra: str, ranks: int = 1) -> subprocess.CompletedProcess:
    launcher = ([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}"]
                if ranks > 1 else [sys.executable])
    cmd = [*launcher, "-m", "trainer.train", "--config", "configs/debug.toml", *MODEL,
           f"--run.dump_folder={dump}", f"--run.name={name}", f"--training.steps={steps}",
           f"--data.cache_dir={dump / 'cache'}", "--metrics.log_freq=1", *extra]
    env = cpu_env(OMP_NUM_THREADS="1")
    env.pop("WANDB_API_KEY", None)
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def first_loss(run_dir: Path) -> float:
    return json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[0])["loss_metrics/global_avg_loss"]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A real run of the debug model on 2 gloo ranks: 3 steps, checkpoint step-3 (weights moved off
    their init, each tensor split over the two ranks' files by FSDP)."""
    dump = tmp_path_factory.mktemp("convert")
    train(dump, "src", 3, "--checkpoint.enable", "--checkpoint.interval=3", ranks=2)
    assert len(list((dump / "src" / "checkpoint" / "step-3").glob("*.distcp"))) == 2
    return dump


def titankit_model(run: Path, step_dir: Path) -> Llama:
    args = resolve_model_args(load_config(["--config", str(run / "src" / "config.toml")]))
    model = Llama(args)
    model.init_weights()
    state = {"model": {k: v for k, v in model.state_dict().items() if k != "rope_cache"}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        dcp.load(state, checkpoint_id=str(step_dir), no_dist=True)
    model.load_state_dict(state["model"], strict=False)
    return model.eval()


def cli(*argv: str) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, str(SCRIPT), *argv], cwd=ROOT, env=cpu_env(),
                          capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout + proc.stderr


def test_rope_rows_move_and_come_back():
    args = resolve_model_args(load_config(["--config", "configs/debug.toml"]))
    w = torch.randn(args.n_heads * args.head_dim, args.dim)
    hf = to_hf_tensor("layers.0.attention.wq.weight", w, args)
    # Head 0: HF row 1 (first half, pair 1) is Meta's row 2; HF row D/2 (second half, pair 0) is
    # Meta's row 1.
    assert torch.equal(hf[1], w[2]) and torch.equal(hf[args.head_dim // 2], w[1])
    assert torch.equal(from_hf_tensor("layers.0.attention.wq.weight", hf, args), w)
    wv = torch.randn(args.kv_heads * args.head_dim, args.dim)
    assert torch.equal(to_hf_tensor("layers.0.attention.wv.weight", wv, args), wv)  # not rotated
    for name in ("tok_embeddings.weight", "layers.3.feed_forward.w2.weight", "output.weight",
                 "layers.0.ffn_norm.weight", "norm.weight"):
        assert from_hf_name(to_hf_name(name)) == name
    with pytest.raises(KeyError, match="rope_cache"):
        to_hf_name("rope_cache")


def test_export_computes_the_same_logits_in_transformers(run, tmp_path):
    transformers = pytest.importorskip("transformers")
    step = run / "src" / "checkpoint" / "step-3"
    code, out = cli("to-hf", str(step), str(tmp_path / "hf"), "--dtype", "float32")
    assert code == 0, out
    ours = titankit_model(run, step)
    theirs = transformers.LlamaForCausalLM.from_pretrained(str(tmp_path / "hf"), dtype=torch.float32).eval()
    tokens = torch.randint(0, ours.args.vocab_size, (2, 200), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        a, b = ours(tokens).float(), theirs(tokens).logits.float()
    assert (a - b).abs().max().item() < 1e-4, (a - b).abs().max().item()


def test_export_shards_bf16_with_an_index(run, tmp_path):
    from safetensors import safe_open

    step = run / "src" / "checkpoint" / "step-3"
    code, out = cli("to-hf", str(step), str(tmp_path / "hf"), "--shard-gb", "0.001")
    assert code == 0, out
    hf = tmp_path / "hf"
    index = json.loads((hf / "model.safetensors.index.json").read_text())
    files = sorted(p.name for p in hf.glob("*.safetensors"))
    assert len(files) > 1 and sorted(set(index["weight_map"].values())) == files
    model = titankit_model(run, step)
    names = [k for k in model.state_dict() if k != "rope_cache"]
    assert sorted(index["weight_map"]) == sorted(to_hf_name(k) for k in names)
    total = 0
    for name in names:
        with safe_open(str(hf / index["weight_map"][to_hf_name(name)]), framework="pt") as f:
            t = f.get_tensor(to_hf_name(name))
        assert t.dtype == torch.bfloat16
        total += t.numel() * 2
    assert index["metadata"]["total_size"] == total
    assert json.loads((hf / "config.json").read_text())["torch_dtype"] == "bfloat16"


def test_export_copies_the_runs_tokenizer(run, tmp_path):
    from tokenizers import Tokenizer, models

    step = run / "src" / "checkpoint" / "step-3"
    code, out = cli("to-hf", str(step), str(tmp_path / "bytes"))
    assert code == 0 and "no tokenizer: the run used titankit's byte tokenizer" in out, out
    tok_dir = tmp_path / "tok"
    tok_dir.mkdir()
    Tokenizer(models.WordLevel({"<unk>": 0, "a": 1}, unk_token="<unk>")).save(str(tok_dir / "tokenizer.json"))
    (tok_dir / "tokenizer_config.json").write_text('{"eos_token": "a"}')
    code, out = cli("to-hf", str(step), str(tmp_path / "hf"), f"--data.tokenizer={tok_dir / 'tokenizer.json'}")
    assert code == 0 and "tokenizer copied" in out, out
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (tmp_path / "hf" / name).read_bytes() == (tok_dir / name).read_bytes()
    assert not (tmp_path / "hf" / "special_tokens_map.json").exists()


def test_export_names_the_runs_bos_and_eos_so_generate_stops(run, tmp_path):
    """Without bos/eos ids in config.json transformers takes Llama-2's (1, 2) or none, and generate
    never stops at the end of a document. The byte tokenizer the run recorded: BOS 256, EOS 257,
    in config.json and generation_config.json, named in the summary."""
    step = run / "src" / "checkpoint" / "step-3"
    code, out = cli("to-hf", str(step), str(tmp_path / "hf"))
    assert code == 0 and "bos_token_id 256, eos_token_id 257 (from titankit's byte tokenizer)" in out, out
    ids = {"bos_token_id": 256, "eos_token_id": 257}
    assert json.loads((tmp_path / "hf" / "config.json").read_text()).items() >= ids.items()
    assert json.loads((tmp_path / "hf" / "generation_config.json").read_text()) == ids
    transformers = pytest.importorskip("transformers")
    model = transformers.LlamaForCausalLM.from_pretrained(str(tmp_path / "hf"))
    assert (model.generation_config.bos_token_id, model.generation_config.eos_token_id) == (256, 257)
    assert (model.config.bos_token_id, model.config.eos_token_id) == (256, 257)


def test_export_ids_when_the_runs_tokenizer_is_not_the_recorded_one(run, tmp_path):
    """A data.tokenizer that is not the tokenizer the checkpoint recorded gives no ids (its ids
    would be another vocabulary's), written as null so transformers' defaults do not apply; the
    summary says why and which flags set them. The shard headers of data.dataset, made by the
    recorded tokenizer, still give the EOS. Given ids win and are checked against the vocabulary."""
    from tokenizers import Tokenizer, models

    from trainer.data.prepare import prepare

    step = run / "src" / "checkpoint" / "step-3"
    tok = tmp_path / "tok" / "tokenizer.json"
    tok.parent.mkdir()
    Tokenizer(models.WordLevel({"<unk>": 0, "</s>": 1}, unk_token="<unk>")).save(str(tok))
    code, out = cli("to-hf", str(step), str(tmp_path / "a"), f"--data.tokenizer={tok}")
    assert code == 0, out
    assert (f"no bos_token_id or eos_token_id: data.tokenizer = '{tok}' is tokenizer 'sha256:" in out
            and "but the checkpoint was trained with 'bytes-v1'; pass --bos-token-id / --eos-token-id" in out), out
    config = json.loads((tmp_path / "a" / "config.json").read_text())
    assert config["bos_token_id"] is None and config["eos_token_id"] is None
    assert not (tmp_path / "a" / "generation_config.json").exists()
    # The tokenizer file gone, the byte-tokenized shard folder the run read still here: its EOS.
    (tmp_path / "c.txt").write_text("some text")
    prepare([str(tmp_path / "c.txt")], tmp_path / "shards", log=None)
    code, out = cli("to-hf", str(step), str(tmp_path / "b"), f"--data.tokenizer={tmp_path / 'gone.json'}",
                    f"--data.dataset={tmp_path / 'shards'}")
    assert code == 0, out
    assert f"eos_token_id 257 (from the shard headers of data.dataset {tmp_path / 'shards'})" in out, out
    assert (f"no bos_token_id: data.tokenizer: '{tmp_path / 'gone.json'}' is neither 'bytes' nor an existing "
            "tokenizer.json file" in out and "; pass --bos-token-id;" in out), out
    assert json.loads((tmp_path / "b" / "generation_config.json").read_text()) == {
        "bos_token_id": None, "eos_token_id": 257}
    # Given ids.
    code, out = cli("to-hf", str(step), str(tmp_path / "c"), f"--data.tokenizer={tok}",
                    "--eos-token-id", "1", "--bos-token-id", "0")
    assert code == 0 and "bos_token_id 0 (given); eos_token_id 1 (given)" in out, out
    assert json.loads((tmp_path / "c" / "generation_config.json").read_text()) == {
        "bos_token_id": 0, "eos_token_id": 1}
    code, out = cli("to-hf", str(step), str(tmp_path / "d"), "--eos-token-id", "512")
    assert code == 2 and "--eos-token-id 512 is not a token of the model (0..511)" in out, out
    assert not (tmp_path / "d").exists()


def test_debug_flavor_rope_exports_without_transformers_warning_and_same_frequencies(tmp_path):
    """The debug flavor's table is as long as its original context (8192 = 8192); transformers
    warns on a llama3 rope_scaling with original_max_position_embeddings >= max_position_embeddings.
    The export keeps max_position_embeddings at the real 8192 and halves the original length with
    both factors (the same frequencies, bit for bit); 8B/70B exports keep Meta's published values.
    A weights-only step (as from-hf writes) then computes the same logits in transformers."""
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from trainer.models.hf_llama import config_mismatches, hf_config
    from trainer.models.rope import rope_frequencies

    def args_of(flavor: str):
        return resolve_model_args(load_config(["--config", "configs/debug.toml", f"--model.flavor={flavor}"]))

    for flavor in ("8B", "70B"):
        cfg = hf_config(args_of(flavor), torch.bfloat16)
        assert cfg["max_position_embeddings"] == 131072 and cfg["rope_scaling"] == {
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192}
    args = args_of("debug")
    assert (args.max_seq_len, args.rope_original_max_seq_len) == (8192, 8192)
    cfg = hf_config(args, torch.float32)
    assert cfg["max_position_embeddings"] == 8192
    assert cfg["rope_scaling"]["original_max_position_embeddings"] < 8192
    # The same frequencies as Meta's form of the scaling, in transformers' own computation, and the
    # same as titankit's (float32 there, float64 here).
    meta_form = {**cfg, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}
    as_written, as_meta = transformers.LlamaConfig(**cfg), transformers.LlamaConfig(**meta_form)
    theirs = ROPE_INIT_FUNCTIONS["llama3"](as_written, "cpu")[0]
    assert torch.equal(theirs, ROPE_INIT_FUNCTIONS["llama3"](as_meta, "cpu")[0])
    assert torch.allclose(theirs.double(), rope_frequencies(args), rtol=1e-6, atol=0)
    # from-hf accepts either form for this model, and still refuses other frequencies.
    assert config_mismatches(cfg, args) == [] and config_mismatches(meta_form, args) == []
    other = {**cfg, "rope_scaling": {**cfg["rope_scaling"], "original_max_position_embeddings": 1024}}
    assert "original / low_freq_factor" in " ".join(config_mismatches(other, args))
    # The whole export: a weights-only step of the debug model, loaded without the warning.
    model = Llama(args)
    model.init_weights()
    state = {k: v for k, v in model.state_dict().items() if k != "rope_cache"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        dcp.save({"model": state}, checkpoint_id=str(tmp_path / "step-0"), no_dist=True)
    code, out = cli("to-hf", str(tmp_path / "step-0"), str(tmp_path / "hf"), "--config", "configs/debug.toml",
                    "--dtype", "float32")
    assert code == 0 and "unchecked: the checkpoint records no data identity" in out, out
    # transformers' warnings go to its own stderr handler: load in a child process and read them.
    load = ("import sys, transformers; transformers.logging.set_verbosity_warning(); "
            "transformers.LlamaForCausalLM.from_pretrained(sys.argv[1])")
    for folder, warned in ((tmp_path / "hf", False), (tmp_path / "as_meta", True)):
        if warned:  # the form written before: the check below does see the warning
            shutil.copytree(tmp_path / "hf", folder)
            (folder / "config.json").write_text(json.dumps(meta_form))
        proc = subprocess.run([sys.executable, "-c", load, str(folder)], cwd=ROOT, env=cpu_env(),
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert ("original_max_position_embeddings field must be less" in proc.stderr) == warned, proc.stderr
    theirs = transformers.LlamaForCausalLM.from_pretrained(str(tmp_path / "hf"), dtype=torch.float32).eval()
    tokens = torch.randint(0, args.vocab_size, (1, 300), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        a, b = model.eval()(tokens).float(), theirs(tokens).logits.float()
    assert (a - b).abs().max().item() < 1e-4, (a - b).abs().max().item()


def test_import_round_trip_is_bitwise_and_trains_like_its_source(run, tmp_path):
    step = run / "src" / "checkpoint" / "step-3"
    config = str(run / "src" / "config.toml")
    assert cli("to-hf", str(step), str(tmp_path / "hf"), "--dtype", "float32")[0] == 0
    code, out = cli("from-hf", str(tmp_path / "hf"), str(tmp_path / "imported"), "--config", config)
    assert code == 0 and "--checkpoint.initial_load_path=" in out, out
    # The imported folder carries checksums of its files, as a run's saves do.
    record = json.loads((tmp_path / "imported" / ".checksums" / "rank-0.json").read_text())
    assert sorted(record["files"]) == sorted(p.name for p in (tmp_path / "imported").iterdir()
                                             if p.is_file())
    a = titankit_model(run, step).state_dict()
    b = titankit_model(run, tmp_path / "imported").state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    # A run started from the imported weights takes the same first step as one started from the
    # original checkpoint's weights.
    for name, path in (("from_source", step), ("from_import", tmp_path / "imported")):
        proc = train(run, name, 1, f"--checkpoint.initial_load_path={path}", "--checkpoint.enable")
        assert "loaded the model weights" in proc.stderr
        assert f"of {path} match their checksums" in proc.stderr
    assert first_loss(run / "from_source") == first_loss(run / "from_import")


def test_import_of_tied_embeddings_copies_them_to_the_output(run, tmp_path):
    from safetensors.torch import load_file, save_file

    step = run / "src" / "checkpoint" / "step-3"
    assert cli("to-hf", str(step), str(tmp_path / "hf"), "--dtype", "float32")[0] == 0
    hf = tmp_path / "hf"
    (file,) = hf.glob("*.safetensors")
    tensors = load_file(str(file))
    del tensors["lm_head.weight"]
    (hf / "model.safetensors.index.json").unlink()
    file.unlink()
    save_file(tensors, str(hf / "model.safetensors"))
    cfg = json.loads((hf / "config.json").read_text())
    (hf / "config.json").write_text(json.dumps({**cfg, "tie_word_embeddings": True}))
    code, out = cli("from-hf", str(hf), str(tmp_path / "imported"), "--config", str(run / "src" / "config.toml"))
    assert code == 0, out
    model = titankit_model(run, tmp_path / "imported")
    assert torch.equal(model.output.weight, model.tok_embeddings.weight)


def test_bad_inputs_are_refused_by_name_and_leave_nothing(run, tmp_path):
    step = run / "src" / "checkpoint" / "step-3"
    config = str(run / "src" / "config.toml")
    hf = tmp_path / "hf"
    assert cli("to-hf", str(step), str(hf))[0] == 0
    before = sorted(p.name for p in hf.iterdir())
    code, out = cli("to-hf", str(step), str(hf))
    assert code == 2 and f"{hf} already exists" in out
    assert sorted(p.name for p in hf.iterdir()) == before
    # Another depth: config.json says 4 layers.
    code, out = cli("from-hf", str(hf), str(tmp_path / "x"), "--config", config, "--model.overrides.n_layers=3")
    assert code == 2 and "num_hidden_layers = 4, but the titankit model has n_layers = 3" in out
    # Another RoPE: the logits would differ silently, so it is refused too.
    code, out = cli("from-hf", str(hf), str(tmp_path / "x"), "--config", config, "--model.overrides.rope_theta=500000")
    assert code == 2 and "rope_theta = 10000.0, but the titankit model has rope_theta = 500000.0" in out
    # A tensor of the wrong shape (the config agrees): refused naming the file and the tensor.
    from safetensors.torch import load_file, save_file

    (file,) = hf.glob("*.safetensors")
    tensors = load_file(str(file))
    tensors["model.layers.1.mlp.up_proj.weight"] = tensors["model.layers.1.mlp.up_proj.weight"][:-1].clone()
    save_file(tensors, str(file))
    code, out = cli("from-hf", str(hf), str(tmp_path / "x"), "--config", config)
    assert code == 2 and "model.layers.1.mlp.up_proj.weight has shape" in out and str(file) in out
    # A step folder without .metadata (a save that never finished).
    partial = tmp_path / "step-9"
    partial.mkdir()
    code, out = cli("to-hf", str(partial), str(tmp_path / "y"))
    assert code == 2 and "is not a complete checkpoint" in out
    # A mixture-of-experts config has no LlamaForCausalLM counterpart.
    code, out = cli("to-hf", str(step), str(tmp_path / "y"), "--config", "configs/debug.toml",
                    "--model.name=moe", "--model.flavor=moe_debug")
    assert code == 2 and "only llama3" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "step-9"]  # no output, no .partial


def test_export_of_a_checkpoint_folder_takes_its_newest_complete_step(run, tmp_path):
    """A run's checkpoint/ folder means its newest complete step-N, as for
    checkpoint.initial_load_path; the step used is named, and a folder with none is refused naming
    the step folders it holds and what to pass."""
    src = tmp_path / "src"
    shutil.copytree(run / "src", src)
    (src / "checkpoint" / "step-5").mkdir()  # a newer save that never finished
    code, out = cli("to-hf", str(src / "checkpoint"), str(tmp_path / "hf"))
    assert code == 0, out
    assert f"{src / 'checkpoint'} is a folder of checkpoints: exporting its newest complete one, step-3" in out
    assert "skipped the newer step-5: it has no .metadata" in out
    assert (tmp_path / "hf" / "config.json").is_file()
    # No complete step in it: refused, naming the folder, its step folders and what to pass.
    shutil.rmtree(src / "checkpoint" / "step-3")
    code, out = cli("to-hf", str(src / "checkpoint"), str(tmp_path / "hf2"))
    assert code == 2 and f"{src / 'checkpoint'} is neither a checkpoint" in out
    assert "step folders found, none complete (1, the newest 5 at most): step-5" in out
    assert "pass a complete step folder" in out
    # The run folder itself: the message points at its checkpoint/ folder.
    code, out = cli("to-hf", str(src), str(tmp_path / "hf2"))
    assert code == 2 and f"did you mean {src / 'checkpoint'}?" in out
    assert not (tmp_path / "hf2").exists()


def test_shards_stay_under_the_limit():
    sizes = {"a": 4, "b": 4, "c": 10, "d": 1}
    assert convert.plan_shards(list(sizes), sizes, 8) == [["a", "b"], ["c"], ["d"]]
    assert convert.plan_shards(list(sizes), sizes, 100) == [["a", "b", "c", "d"]]


def test_export_uses_the_config_of_the_launch_that_saved_the_step(tmp_path, capsys):
    """A run relaunched with another config keeps config.toml and adds config_0002.toml; a step
    exported from the second launch must take its rope_theta, norm_eps, ... from the second."""
    import os

    run = tmp_path / "run"
    for step in (4, 8):
        (run / "checkpoint" / f"step-{step}").mkdir(parents=True)
    # launch 1 writes config.toml, saves step-4; launch 2 writes config_0002.toml, saves step-8
    times = {"config.toml": 100, "checkpoint/step-4/.metadata": 200, "config_0002.toml": 300,
             "checkpoint/step-8/.metadata": 400}
    for name, t in times.items():
        (run / name).write_text("")
        os.utime(run / name, (t, t))
    assert convert.launch_config_of(run / "checkpoint" / "step-8") == run / "config_0002.toml"
    assert "saved under config_0002.toml" in capsys.readouterr().err
    assert convert.launch_config_of(run / "checkpoint" / "step-4") == run / "config.toml"
    capsys.readouterr()
    (run / "config_0002.toml").unlink()  # one launch: its config.toml, silently
    assert convert.launch_config_of(run / "checkpoint" / "step-8") == run / "config.toml"
    assert capsys.readouterr().err == ""


def test_a_run_copy_without_its_launch_config_says_to_pass_config(tmp_path, capsys):
    run = tmp_path / "run"
    (run / "checkpoint" / "step-8").mkdir(parents=True)
    (run / "checkpoint" / "step-8" / ".metadata").write_text("")
    with pytest.raises(ValueError) as err:
        convert.launch_config_of(run / "checkpoint" / "step-8", "config.toml")
    assert str(err.value) == (f"{run.resolve()}: no launch config (config.toml) in the run folder of step-8 (the "
                              "checkpoint names config.toml); pass --config FILE, the TOML the run was trained with")
    # The one launch config there is not config.toml: it is the one used, and the message says so.
    (run / "config_0002.toml").write_text("")
    assert convert.launch_config_of(run / "checkpoint" / "step-8", "config.toml") == run.resolve() / "config_0002.toml"
    assert capsys.readouterr().err == (f"{run.resolve()}: the checkpoint names config.toml, which is not there; using "
                                       "config_0002.toml, the only launch config there (pass --config FILE to "
                                       "choose another)\n")


def test_to_hf_of_a_file_says_it_is_a_file(tmp_path):
    (tmp_path / "metrics.jsonl").write_text("{}\n")
    code, out = cli("to-hf", str(tmp_path / "metrics.jsonl"), str(tmp_path / "hf"))
    assert code == 2 and out == (f"error: {tmp_path / 'metrics.jsonl'}: is a file; pass a step folder "
                                 "(<run>/checkpoint/step-N) or a run's checkpoint/ folder\n")
    assert not (tmp_path / "hf").exists()


def test_a_damaged_hugging_face_folder_is_one_line_naming_the_file(tmp_path, capsys):
    """What an interrupted download leaves (a cut or tiny safetensors file, an empty or cut JSON file,
    a shard the index lists but that never arrived) was a SafetensorError traceback or json's bare
    'Expecting value' naming no file: now one error line naming the file, and no output folder."""
    from safetensors.torch import save_file

    from trainer.models.hf_llama import hf_config

    args = resolve_model_args(load_config(["--config", "configs/debug.toml"]))
    model = Llama(args)
    model.init_weights()
    tensors = {to_hf_name(k): to_hf_tensor(k, v, args).contiguous()
               for k, v in model.state_dict().items() if k != "rope_cache"}
    names = sorted(tensors)
    files = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}

    def hf_folder(name: str) -> Path:
        hf = tmp_path / name
        hf.mkdir()
        (hf / "config.json").write_text(json.dumps(hf_config(args, torch.float32)))
        for file, part in files.items():
            save_file({n: tensors[n] for n in part}, str(hf / file))
        weight_map = {n: file for file, part in files.items() for n in part}
        (hf / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
        return hf

    def refusal(hf: Path) -> str:
        code = convert.main(["from-hf", str(hf), str(tmp_path / "out"), "--config", "configs/debug.toml"])
        err = capsys.readouterr().err
        assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
        assert not (tmp_path / "out").exists()
        return err

    cut = hf_folder("cut")
    shard = cut / "model-00001-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[:100_000])
    assert f"{shard}: not a complete safetensors file (an interrupted download?)" in refusal(cut)
    single = hf_folder("single")
    (single / "model.safetensors.index.json").unlink()
    for file in files:
        (single / file).unlink()
    (single / "model.safetensors").write_bytes(b"version")  # 7 bytes
    assert f"{single / 'model.safetensors'}: not a complete safetensors file" in refusal(single)
    for name in ("config.json", "model.safetensors.index.json"):
        hf = hf_folder(f"bad-{name}")
        for text in ("", (hf / name).read_text()[:50]):
            (hf / name).write_text(text)
            assert f"{hf / name}: not valid JSON (" in refusal(hf)
    absent = hf_folder("absent")
    (absent / "model-00002-of-00002.safetensors").unlink()
    err = refusal(absent)
    assert f"{absent / 'model.safetensors.index.json'} lists ['model-00002-of-00002.safetensors'], missing" in err
    whole = hf_folder("whole")
    assert convert.main(["from-hf", str(whole), str(tmp_path / "out"), "--config", "configs/debug.toml"]) == 0


def test_the_checkpoint_records_its_launch_config_and_to_hf_uses_it_over_file_times(tmp_path, capsys):
    """The modification-time rule above picks the wrong file once a copy of the run folder loses the
    times (cp -r): checkpoints now record the file they were saved under."""
    import os

    from trainer.checkpoint_folders import read_metadata

    train(tmp_path, "two", 2, "--checkpoint.enable", "--checkpoint.interval=2")
    train(tmp_path, "two", 4, "--checkpoint.enable", "--checkpoint.interval=2", "--optimizer.lr=1e-3")
    run = tmp_path / "two"
    assert (run / "config_0002.toml").is_file()
    ckpt = run / "checkpoint"
    recorded = {s: convert.saved_launch_config(ckpt / s, read_metadata(ckpt / s))
                for s in ("step-2", "step-4")}
    assert recorded == {"step-2": "config.toml", "step-4": "config_0002.toml"}
    # As after `cp -r`: every config is newer than every .metadata (copied in name order).
    later = max((ckpt / s / ".metadata").stat().st_mtime for s in recorded) + 100
    for i, name in enumerate(("config.toml", "config_0002.toml")):
        os.utime(run / name, (later + i, later + i))
    assert convert.launch_config_of(ckpt / "step-2") == run / "config_0002.toml"  # the old rule: wrong
    capsys.readouterr()
    assert convert.launch_config_of(ckpt / "step-2", recorded["step-2"]) == run / "config.toml"
    assert "step-2 was saved under config.toml (recorded in the checkpoint" in capsys.readouterr().err
    code, out = cli("to-hf", str(ckpt / "step-2"), str(tmp_path / "hf"))
    assert code == 0 and "saved under config.toml (recorded in the checkpoint" in out, out
