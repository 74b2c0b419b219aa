"""scripts/bench_train.py: a real (tiny, 2 CPU ranks) benchmark with --profile, and the 70B per-layer
extrapolation of ANCHORS.md section 3, so the benchmark any user can rerun cannot rot."""

import importlib.util
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.cpu import CPU_ONLY

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("bench_train", ROOT / "scripts" / "bench_train.py")
bench = importlib.util.module_from_spec(_spec)
sys.modules["bench_train"] = bench  # dataclasses look their module up while the class is built
_spec.loader.exec_module(bench)

TINY = ["--model.overrides.n_layers=2", "--model.overrides.dim=64", "--training.seq_len=32",
        "--training.local_batch_size=2", "--lr_scheduler.warmup_steps=1"]


def test_bench_runs_on_cpu_and_prints_a_table_with_profile(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    for key, value in CPU_ONLY.items():  # the torchrun job runs on CPU, also on a GPU machine
        monkeypatch.setenv(key, value)
    out = tmp_path / "bench.md"
    rc = bench.main(["--config", "configs/debug.toml", "--ngpu", "2", "--warmup", "1", "--steps", "2",
                     *TINY, f"--data.cache_dir={tmp_path / 'cache'}", "--profile", "--profile-steps", "2",
                     "--out", str(out)])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    rows = [ln for ln in printed.splitlines() if ln.startswith("| debug |")]
    assert len(rows) == 1, printed
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    header = [c.strip() for c in printed.split("| variant |")[1].split("\n")[0].strip("|").split("|")]
    row = dict(zip(["variant", *header], cells))
    assert float(row["tokens/s/GPU"].replace(",", "")) > 0
    assert row["layout"] == "fsdp2"
    assert row["model"] == "llama3 debug (2 layers)"
    assert row["seq"] == "32" and row["local batch"] == "2"
    assert row["alloc retries"] == "0"  # CPU: no CUDA allocator
    assert row["GPU clock MHz / power W"] == "n/a"  # CPU: nothing for NVML to read
    assert row["max active / reserved GiB"] == "n/a"  # CPU: no allocator peaks (not a measured 0.0)
    # Rows with the same batch and steps can be checked for the same training at a glance.
    assert 0 < float(row["loss, last measured step"]) < 20
    assert "Steps: 1 warm-up + 2 measured + 2 profiled" in printed
    assert out.read_text().strip() in printed  # the written table is what was printed
    log = (tmp_path / "bench" / "debug.log").read_text()
    assert "--profiling.profile_start_step=4" in log  # profiled steps come after the measured ones
    profile = (tmp_path / "bench" / "debug.profile.md").read_text()
    assert "# Profile of steps 4-5, rank 0 of 2 (cpu)" in profile
    assert "## Where the time goes on cpu (per step)" in profile
    # Two FSDP ranks talk: the summary finds the collectives (gloo on CPU) and times them.
    assert re.search(r"^\| all-gather \| \d+ \| [0-9.]+ \| [0-9.]+ \|$", profile, re.M), profile
    # scripts/project_hardware.py reads this very output (table + profile summary).
    spec = importlib.util.spec_from_file_location("project_hardware", ROOT / "scripts" / "project_hardware.py")
    proj = importlib.util.module_from_spec(spec)
    sys.modules["project_hardware"] = proj  # for its dataclasses, as above
    spec.loader.exec_module(proj)
    (got,) = proj.parse_bench(out)
    assert (got.variant, got.model, got.flavor, got.layers, got.fsdp) == ("debug", "llama3", "debug", 2, 2)
    assert math.isnan(got.mem_active_gib)
    assert got.tps == pytest.approx(float(row["tokens/s/GPU"].replace(",", "")))
    parts = proj.parse_profile(tmp_path / "bench" / "debug.profile.md")
    assert parts["step"] > 0 and parts["gemm"] >= 0


def _result(group: str, layers: int, tps: float):
    return bench.Result(bench.Variant(name=f"70B {layers}L", config="c.toml", group=group), ok=True, tps=tps,
                        resolved={"model": {"overrides": {"n_layers": layers}}})


def test_extrapolation_reproduces_the_anchor_numbers():
    # ANCHORS.md section 3: torchtitan's 70B first 4 / 8 layers -> 1.20e-5 s per layer, ~1,027 at 80.
    slope, tps = bench.extrapolate_tps([(8, 8935.0), (4, 15620.0)], 80)
    assert slope == pytest.approx(1.1975e-5, rel=1e-3)
    assert round(tps) == 1027


def test_extrapolation_is_exact_for_a_linear_cost():
    a, b = 3.7e-5, 1.3e-5  # seconds per token: fixed part and per layer
    pts = [(layers, 1.0 / (a + b * layers)) for layers in (4, 8)]
    slope, tps = bench.extrapolate_tps(pts, 80)
    assert slope == pytest.approx(b, rel=1e-9)
    assert tps == pytest.approx(1.0 / (a + 80 * b), rel=1e-9)
    lines = bench.extrapolate([_result("70b", 4, pts[0][1]), _result("70b", 8, pts[1][1])])
    assert lines == [f"70b: per-layer per-token time 1.300e-05 s; extrapolated to 80 layers: "
                     f"{1.0 / (a + 80 * b):,.0f} tokens/s/GPU (an estimate from 4 and 8 layers)"]


def test_extrapolation_says_why_it_has_no_estimate():
    failed = _result("70b", 8, 0.0)
    failed.ok = False
    lines = bench.extrapolate([_result("70b", 4, 15620.0), failed])
    assert lines == ["70b: no estimate: needs two depths that ran, got [4] (1 variant(s) failed)"]
    with pytest.raises(ValueError, match="two different depths"):
        bench.extrapolate_tps([(4, 100.0), (4, 120.0)], 80)


def test_suite_env_reaches_the_variant_and_is_reported(tmp_path, monkeypatch):
    suite = tmp_path / "suite.toml"
    suite.write_text('[[variant]]\nname = "a"\nconfig = "configs/debug.toml"\n'
                     'env = {PYTORCH_CUDA_ALLOC_CONF = "expandable_segments:True"}\n')
    [v] = bench.load_suite(str(suite))
    assert v.env == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    seen = {}

    def fake_run(cmd, env, **kw):  # records what the torchrun job would get
        seen.update(env)
        return subprocess.CompletedProcess(cmd, 1, "", "boom")

    monkeypatch.setattr(bench, "run_group", fake_run)
    res = bench.run_variant(v, 1, 1, tmp_path, tmp_path, 10.0)
    assert not res.ok and seen["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert (tmp_path / "a.log").read_text().startswith("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True ")
    bad = tmp_path / "bad.toml"
    bad.write_text('[[variant]]\nname = "b"\nconfig = "c.toml"\nenv = {X = 1}\n')
    with pytest.raises(ValueError, match="env must be a table of strings"):
        bench.load_suite(str(bad))


def test_variant_files_are_named_without_commas_and_names_that_collide_are_refused(tmp_path):
    """Logs, profiles and run folders are named by the variant: only [A-Za-z0-9._-] survive, and two
    variants that would share a file are an error at load time, not an overwritten log."""
    assert bench.file_stem("70B noAC, 1 GPU, accum 8, 2 layers bf16") == "70B_noAC_1_GPU_accum_8_2_layers_bf16"
    assert bench.file_stem("8B w1/w3 (tp=2)") == "8B_w1_w3_tp_2"
    assert bench.file_stem(", ,") == "variant"
    clash = tmp_path / "clash.toml"
    clash.write_text('[[variant]]\nname = "a, b"\nconfig = "c.toml"\n\n'
                     '[[variant]]\nname = "a b"\nconfig = "c.toml"\n')
    with pytest.raises(ValueError, match="'a, b' and 'a b' give the same file name 'a_b'"):
        bench.load_suite(str(clash))


def test_only_runs_the_matching_variants_and_says_which_exist(tmp_path, monkeypatch, capsys):
    suite = tmp_path / "s.toml"
    suite.write_text("".join(f'[[variant]]\nname = "{n}"\nconfig = "configs/debug.toml"\n\n'
                             for n in ("70B local batch 2, 8 layers", "70B local batch 4, 4 layers")))
    ran = []
    monkeypatch.setattr(bench, "run_variant", lambda v, *a, **k: ran.append(v.name) or bench.Result(v, ok=False))
    monkeypatch.setattr(bench, "environment", lambda: "env")
    bench.main(["--suite", str(suite), "--only", "local batch 4"])
    assert ran == ["70B local batch 4, 4 layers"]
    with pytest.raises(SystemExit):
        bench.main(["--suite", str(suite), "--only", "batch 8"])
    assert "matches none of: 70B local batch 2, 8 layers; 70B local batch 4, 4 layers" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.main(["--suite", str(suite), "--only", "("])
    assert "not a regular expression" in capsys.readouterr().err


@pytest.mark.parametrize("suite", sorted(p.name for p in (ROOT / "scripts" / "bench_suites").glob("*.toml")))
def test_every_shipped_suite_loads_and_its_variants_are_valid_configs(suite, monkeypatch):
    """A suite whose override names a key or value that no longer exists fails here, not on a GPU."""
    from trainer.config import load_config

    monkeypatch.chdir(ROOT)
    variants = bench.load_suite(str(ROOT / "scripts" / "bench_suites" / suite))
    assert variants
    for v in variants:
        load_config(["--config", v.config, *v.overrides])


def test_batch_cell_shows_gradient_accumulation():
    r = {"training": {"local_batch_size": 1, "global_batch_size": 8},
         "parallelism": {"tensor_parallel_degree": 1, "context_parallel_degree": 1}}
    assert bench._batch(r, 2) == "1 x 4 accum"  # dp 2
    r["parallelism"]["tensor_parallel_degree"] = 2
    assert bench._batch(r, 4) == "1 x 4 accum"  # dp = 4 / tp 2
    r["training"]["global_batch_size"] = -1
    assert bench._batch(r, 2) == "1"


def _suite(tmp_path, text: str) -> str:
    path = tmp_path / "suite.toml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("text, message", [
    ('[[variant]]\nname = "x"\nconfig = "configs/debug.toml"\n\n'
     '[[variant]]\nname = "x"\nconfig = "configs/debug.toml"\noverrides = ["--training.seq_len=128"]\n',
     "2 variants are named 'x'; each name must be unique"),
    ('[[variant]]\nname = "x"\nconfig = "configs/debug.toml"\noverrides = "--training.seq_len=128"\n',
     "variant 'x': overrides must be a list of strings, e.g. overrides = [\"--training.seq_len=128\"]"),
    ('[[variant]]\nname = "x"\nconfig = "configs/debug.toml"\nngpu = 0\n',
     "variant 'x': ngpu must be an integer >= 1, got 0"),
    ('[[variant]\nname = "x"\n', "not valid TOML"),
    ('name = "x"\n', "no [[variant]] tables"),
])
def test_a_bad_suite_is_one_line_naming_the_file_before_anything_runs(tmp_path, monkeypatch, capsys, text,
                                                                     message):
    path = _suite(tmp_path, text)
    monkeypatch.setattr(bench, "run_variant", lambda *a, **k: pytest.fail("launched a variant"))
    assert bench.main(["--suite", path]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}") or err.startswith(f"error: --suite {path}"), err
    assert message in err and err.count("\n") == 1, err


def test_a_missing_suite_or_a_folder_is_one_line(tmp_path, capsys):
    assert bench.main(["--suite", str(tmp_path / "nope.toml")]) == 2
    assert capsys.readouterr().err == (f"error: --suite {tmp_path / 'nope.toml'}: no such file; give a TOML "
                                       "file of [[variant]] tables (e.g. scripts/bench_suites/h200_x2_fsdp.toml)\n")
    assert bench.main(["--suite", str(tmp_path)]) == 2
    assert f"error: --suite {tmp_path}: a folder;" in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["--ngpu", "-1"], "argument --ngpu: must be an integer >= 0, got '-1'"),
    (["--steps", "0"], "argument --steps: must be an integer >= 1, got '0'"),
    (["--warmup", "x"], "argument --warmup: must be an integer >= 0, got 'x'"),
    (["--timeout", "0"], "argument --timeout: must be a number of seconds > 0, got '0'"),
    (["--training.steps=300"], "--training.steps=300: bench_train sets training.steps itself (use --warmup "
                               "and --steps)"),
    (["--checkpoint.enable"], "--checkpoint.enable: bench_train sets checkpoint.enable itself"),
    (["--metrics.log_freq", "5"], "--metrics.log_freq: bench_train sets metrics.log_freq itself"),
    (["--run.name=x"], "--run.name=x: bench_train sets run.name itself"),
    (["--run.dump_folder=/x"], "--run.dump_folder=/x: bench_train sets run.dump_folder itself"),
])
def test_bad_arguments_are_refused_before_anything_runs(monkeypatch, capsys, args, message):
    monkeypatch.setattr(bench, "run_variant", lambda *a, **k: pytest.fail("launched a variant"))
    with pytest.raises(SystemExit) as exc:
        bench.main(["--config", "configs/debug.toml", *args])
    assert exc.value.code == 2
    assert f"error: {message}" in capsys.readouterr().err


def test_a_reserved_key_in_a_suite_names_the_file_and_variant(tmp_path, monkeypatch, capsys):
    path = _suite(tmp_path, '[[variant]]\nname = "x"\nconfig = "configs/debug.toml"\n'
                            'overrides = ["--profiling.profile_steps=9"]\n')
    monkeypatch.setattr(bench, "run_variant", lambda *a, **k: pytest.fail("launched a variant"))
    assert bench.main(["--suite", path]) == 2
    assert capsys.readouterr().err == (f"error: {path}: variant 'x': --profiling.profile_steps=9: bench_train "
                                       "sets profiling.profile_steps itself (use --profile-steps)\n")


def test_out_that_is_a_folder_or_has_no_suffix_is_refused_before_training(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bench, "run_variant", lambda *a, **k: pytest.fail("launched a variant"))
    for out in (tmp_path, tmp_path / "report"):
        with pytest.raises(SystemExit):
            bench.main(["--config", "configs/debug.toml", "--out", str(out)])
        assert f"error: --out {out}: give a file name with a suffix, e.g. {out}.md" in capsys.readouterr().err
    (tmp_path / "f.md").write_text("")
    with pytest.raises(SystemExit):  # its folder cannot be made: a file is in the way
        bench.main(["--config", "configs/debug.toml", "--out", str(tmp_path / "f.md" / "r.md")])
    assert "cannot write it" in capsys.readouterr().err


def test_a_bad_override_in_any_variant_is_refused_before_the_first_trains(tmp_path, monkeypatch, capsys):
    path = _suite(tmp_path, '[[variant]]\nname = "ok"\nconfig = "configs/debug.toml"\n\n'
                            '[[variant]]\nname = "typo"\nconfig = "configs/debug.toml"\n')
    monkeypatch.setattr(bench, "run_variant", lambda *a, **k: pytest.fail("launched a variant"))
    assert bench.main(["--suite", path, "--ngpu", "2", "--training.stepz=3"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: variant 'ok': ") and err.count("\n") == 1, err
    assert "unknown key training.stepz; did you mean training.steps?" in err


def test_a_failed_row_shows_the_trainers_error_line_not_torchruns(tmp_path, monkeypatch):
    log = ("error: command line: unknown key training.stepz; did you mean training.steps?\n"
           "Traceback (most recent call last):\n  File \"run.py\", line 1\n"
           "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n")
    monkeypatch.setattr(bench, "run_group", lambda cmd, **kw: subprocess.CompletedProcess(cmd, 1, "", log))
    res = bench.run_variant(bench.Variant("x", "configs/debug.toml", ngpu=2), 1, 1, tmp_path, tmp_path, 10.0)
    assert res.error == "error: command line: unknown key training.stepz; did you mean training.steps?"
    row = bench.table([res]).splitlines()[-1]
    assert row.startswith("| x | failed: error: command line: unknown key training.stepz;")


def test_a_suite_stopped_from_outside_keeps_the_log_and_marks_the_row(tmp_path, monkeypatch, capsys):
    """run_group turns SIGTERM into SystemExit(143) once the ranks are gone: the running variant's log
    names its command and why it stopped, and the table (printed and in --out) marks its row."""
    suite = tmp_path / "suite.toml"
    suite.write_text('[[variant]]\nname = "first"\nconfig = "configs/debug.toml"\n'
                     '[[variant]]\nname = "second"\nconfig = "configs/debug.toml"\n')
    out = tmp_path / "s.md"

    def stopped(cmd, **kw):
        assert "trainer.train" in (tmp_path / "s" / "first.log").read_text()  # written before the run
        raise SystemExit(143)

    monkeypatch.setattr(bench, "run_group", stopped)
    with pytest.raises(SystemExit):
        bench.main(["--suite", str(suite), "--ngpu", "2", "--out", str(out)])
    log = (tmp_path / "s" / "first.log").read_text()
    assert "stopped from outside (SIGTERM, exit 143); the output above is all it printed" in log
    row = "| first | failed: interrupted (SIGTERM, exit 143); later variants not run |"
    assert row in out.read_text() and row in capsys.readouterr().out
    assert "| second |" not in out.read_text()
