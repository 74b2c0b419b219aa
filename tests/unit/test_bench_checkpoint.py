"""scripts/bench_checkpoint.py: the real benchmark on 2 gloo ranks with a tiny debug Llama (sync save,
async save overlapping a step, exact resume), its disk-fitting option, and its verdict and errors."""

from __future__ import annotations

import importlib.util
import random
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch.distributed.checkpoint as dcp

from trainer.checkpoint_folders import incomplete_reason
from tests.helpers.cpu import cpu_env

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "bench_checkpoint.py"
_spec = importlib.util.spec_from_file_location("bench_checkpoint", SCRIPT)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

TINY = ["--model.overrides.n_layers=2", "--model.overrides.dim=64", "--training.seq_len=32",
        "--training.local_batch_size=2", "--lr_scheduler.warmup_steps=1"]


def launch(tmp_path: Path, *args: str) -> tuple[str, str]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(SCRIPT),
           "--config", "configs/debug.toml", *TINY, f"--data.cache_dir={tmp_path / 'cache'}",
           f"--run.dump_folder={tmp_path / 'out'}", *args]
    env = cpu_env(OMP_NUM_THREADS="1")
    env.pop("WANDB_API_KEY", None)
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return proc.stdout, proc.stderr


def table_row(printed: str) -> dict[str, str]:
    lines = printed.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith("| model |"))
    header = [c.strip() for c in lines[i].strip("|").split("|")]
    cells = [c.strip() for c in lines[i + 2].strip("|").split("|")]
    assert len(cells) == len(header) == 12, lines[i:i + 3]
    return dict(zip(header, cells))


def test_bench_saves_overlaps_and_resumes_bitwise_on_two_ranks(tmp_path):
    out = tmp_path / "report.md"
    printed, _ = launch(tmp_path, "--run.deterministic", "--keep", "--out", str(out))
    row = table_row(printed)
    assert row["model"] == "llama3 debug (2 layers)" and row["ranks"] == "2"
    assert row["resume loss match"] == "bitwise"
    assert "resume check: PASSED" in printed
    assert "loss, grad norm, weights and stream bitwise equal" in printed
    times = {k: float(row[k]) for k in ("sync save s", "async staging s", "async total s", "step s",
                                        "resume load s")}
    # The mean over step 4 and the --flight-steps steps that started while the write was in flight.
    m = re.fullmatch(r"([0-9.]+) \(mean of (\d+)\)", row["step s, write in flight"])
    assert m is not None, row
    times["write in flight"], n_flight = float(m.group(1)), int(m.group(2))
    assert 1 <= n_flight <= 9  # step 4 + at most the default 8
    assert printed.count("(write in flight) ") == n_flight - 1
    assert all(v > 0 for v in times.values()), row
    assert times["async total s"] >= times["async staging s"]
    # --keep leaves the async checkpoint (step 3) and only it: the sync one (step 2) was deleted.
    runs = list((tmp_path / "out").glob("bench_checkpoint_*"))
    assert len(runs) == 1
    folders = sorted(p.name for p in (runs[0] / "checkpoint").iterdir())
    assert folders == ["step-3"]
    step3 = runs[0] / "checkpoint" / "step-3"
    assert incomplete_reason(step3) is None
    on_disk = sum(f.stat().st_size for f in step3.rglob("*") if f.is_file())
    assert float(row["checkpoint GB"]) == pytest.approx(on_disk / 1e9, rel=5e-3)  # 3 digits printed
    assert float(row["async GB/s"]) == pytest.approx(on_disk / 1e9 / times["async total s"], rel=2e-2)
    state = {"data": {"next_index": None}, "train": {"step": None, "tokens_seen": None}}
    with warnings.catch_warnings():  # "assuming the intent is to load in a single process": yes
        warnings.simplefilter("ignore", UserWarning)
        dcp.load(state, checkpoint_id=str(step3), no_dist=True)
    # 3 steps x 2 ranks x local batch 2 samples of 32 tokens.
    assert state["train"]["step"] == 3 and state["data"]["next_index"] == 12
    assert state["train"]["tokens_seen"] == 12 * 32
    assert out.read_text().strip().split("\n", 2)[2] in printed  # the file holds what was printed


def test_fit_seconds_builds_fewer_layers_says_so_and_cleans_up(tmp_path):
    # A budget no checkpoint meets: the probe runs, the fewest layers (1 of 2) are built, and the
    # output says so on the row itself; without --keep nothing is left on disk.
    printed, _ = launch(tmp_path, "--fit-seconds", "1e-6", "--probe-gb", "0.02")
    row = table_row(printed)
    assert row["model"] == "llama3 debug (ONLY 1 of 2 layers: --fit-seconds 1e-06)"
    assert "so ONLY 1 of 2 layers are built and saved" in printed
    assert "model: " in printed and " params;" in printed
    assert "resume check: PASSED" in printed
    assert row["resume loss match"] in ("bitwise",) or row["resume loss match"].startswith("rel ")
    assert list((tmp_path / "out").iterdir()) == []


@pytest.mark.parametrize("args, message", [
    (["--layer-fraction", "0"], "--layer-fraction 0.0: must be in (0, 1]"),
    (["--layer-fraction", "0.5", "--model.overrides.n_layers=2"], "both set the depth"),
    (["--layer-fraction", "0.5", "--fit-seconds", "60"], "both choose the depth"),
    (["stray"], "unexpected argument 'stray'"),
    (["--training.stepz=3"], "training.steps"),  # config errors come through with their hint
])
def test_bad_arguments_fail_before_any_process_group(args, message, capsys):
    assert bench.main(["--config", "configs/debug.toml", *args]) == 2
    assert message in capsys.readouterr().err


def test_layer_fraction_and_the_8b_checkpoint_size():
    opts, rest = bench.parse_args(["--config", "configs/llama3_8b.toml", "--layer-fraction", "0.25"])
    cfg, label = bench.build_config(opts, rest, 2)
    assert cfg.model.overrides["n_layers"] == 8 and "ONLY 8 of 32 layers" in label
    assert cfg.compile.enable is False and cfg.checkpoint.enable is True
    # fp32 weights + two AdamW moments of Llama-3 8B's 8,030,261,248 parameters.
    assert bench.checkpoint_bytes(cfg, 32) == 12 * 8_030_261_248


@pytest.mark.parametrize("gbps, free_gb, seconds", [(0.7, 500.0, 150.0), (2.3, 500.0, 100.0),
                                                     (5.0, 500.0, 1e4), (5.0, 60.0, 1e4), (3.1, 41.0, 20.0)])
def test_fit_layers_picks_the_deepest_model_that_fits(gbps, free_gb, seconds):
    opts, rest = bench.parse_args(["--config", "configs/llama3_8b.toml"])
    cfg, label = bench.build_config(opts, rest, 2)
    new_label, line = bench.fit_layers(cfg, label, gbps, free_gb * 1e9, seconds)
    n = cfg.model.overrides.get("n_layers", 32)

    def fits(k: int) -> bool:
        size = bench.checkpoint_bytes(cfg, k)
        return 3 * size / 1e9 / gbps <= seconds and 1.05 * size + 1e9 <= free_gb * 1e9

    assert fits(n) and (n == 32 or not fits(n + 1)), n
    assert ("ONLY" in new_label) == (n < 32) and ("ONLY" in line) == (n < 32)
    with pytest.raises(ValueError, match="not enough for a checkpoint of even 1 layer"):
        bench.fit_layers(cfg, label, gbps, 3e9, seconds)


def test_ram_backed_folder_caps_the_depth_so_the_async_save_is_not_oom_killed(monkeypatch, tmp_path):
    """On 2 x H200 a full 8B checkpoint in /dev/shm (96 GB of files + 96 GB of async staging on a
    251 GB host) got both ranks OOM-killed: a RAM-backed folder now limits the depth."""
    import trainer.checkpoint_memory as cm

    monkeypatch.setattr(cm, "filesystem_type", lambda folder: "tmpfs")
    monkeypatch.setattr(cm, "mem_available", lambda: 200 * 10**9)
    cap = bench.ram_cap(tmp_path, nodes=1)
    assert cap == pytest.approx((200e9 - cm.HEADROOM_BYTES) / (2 * (1 + cm.HEADROOM_FRACTION)))
    opts, rest = bench.parse_args(["--config", "configs/llama3_8b.toml"])
    cfg, label = bench.build_config(opts, rest, 2)
    new_label, line = bench.fit_layers(cfg, label, 50.0, 250e9, 1e4, cap)  # fast, big disk: RAM decides
    n = cfg.model.overrides["n_layers"]
    assert bench.checkpoint_bytes(cfg, n) <= cap < bench.checkpoint_bytes(cfg, n + 1)
    assert f"ONLY {n} of 32" in new_label and "RAM-backed folder" in line
    # The trainer's own check agrees that this depth can be staged.
    assert cm.async_shortfall(bench.checkpoint_bytes(cfg, n) // 2, 2, 200 * 10**9, True) is None
    monkeypatch.setattr(cm, "filesystem_type", lambda folder: "ext4")
    assert bench.ram_cap(tmp_path, nodes=1) is None


def test_verdict_holds_each_mode_to_its_criterion():
    rng = random.Random(7)
    for _ in range(20):
        loss = rng.uniform(2.0, 12.0)
        res = {"loss4": loss, "loss4b": loss, "grad_rel": 0.0, "sums_rel": 0.0, "stream_ok": True}
        assert bench.verdict(res, True)[:2] == (True, "bitwise")
        # Deterministic mode: any difference, in the loss or only in the weights, fails.
        assert not bench.verdict({**res, "sums_rel": rng.uniform(1e-12, 1e-6)}, True)[0]
        assert not bench.verdict({**res, "loss4b": loss * (1 + 1e-7)}, True)[0]
        # Otherwise the loss may move by less than NONDET_RTOL; the weights are only reported.
        near = {**res, "loss4b": loss * (1 + 0.5 * bench.NONDET_RTOL), "sums_rel": 1e-6}
        ok, cell, _ = bench.verdict(near, False)
        assert ok and cell.startswith("rel ")
        assert not bench.verdict({**res, "loss4b": loss * (1 + 2 * bench.NONDET_RTOL)}, False)[0]
        assert not bench.verdict({**res, "stream_ok": False}, False)[0]


def test_unwritable_run_folder_is_one_rank_error_line(tmp_path):
    (tmp_path / "afile").write_text("x")
    env = cpu_env(OMP_NUM_THREADS="1")
    env.pop("TITANKIT_TRACEBACK", None)
    proc = subprocess.run([sys.executable, str(SCRIPT), "--config", "configs/debug.toml", *TINY,
                           f"--run.dump_folder={tmp_path / 'afile'}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert f"[rank0] error: run.dump_folder / run.name: cannot create the run folder {tmp_path / 'afile'}/" \
        in proc.stderr
    assert "[rank0] (start-up stopped, exit status 2; ValueError: TITANKIT_TRACEBACK=1" in proc.stderr
