"""Checkpoint acceptance on the real trainer: gloo ranks on CPU, a 2-layer debug Llama, deterministic.

Every run uses global_batch_size 8 (local 2 x grad accumulation), so 1, 2 and 4 ranks train on the
same 8 samples per step and their losses are comparable. The LR warms up over 8 steps and then stays
constant (min_lr_factor 1.0), so a run stopped at step 10 and one of 20 steps share their schedule.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import warnings
import zlib
from pathlib import Path

import pytest
import torch.distributed.checkpoint as dcp
from tests.helpers.cpu import cpu_env

REPO = Path(__file__).resolve().parents[2]
STEPS = 20

CONFIG = """
[run]
name = "ref"
dump_folder = "{dump}"
seed = 0
deterministic = true

[model]
name = "llama3"
flavor = "debug"
overrides = {{n_layers = 2, dim = 64}}

[training]
local_batch_size = 2
global_batch_size = 8
seq_len = 64
steps = 20

[lr_scheduler]
warmup_steps = 8
min_lr_factor = 1.0

[metrics]
log_freq = 1

[checkpoint]
enable = true
interval = 10
"""


def env() -> dict[str, str]:
    e = cpu_env(OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    e.pop("WANDB_API_KEY", None)
    return e


def torchrun(nproc: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
            *extra]


def launch(dump: Path, name: str, nproc: int, *overrides: str, check: bool = True,
           torchrun_args: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    cmd = torchrun(nproc, *torchrun_args) + ["-m", "trainer.train", "--config", str(dump / "job.toml"),
                                             f"--run.name={name}", *overrides]
    proc = subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-6000:]}")
    return proc


def losses(run_dir: Path) -> dict[int, float]:
    """step -> loss from metrics.jsonl; a step logged again after a resume keeps its last value."""
    out = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        out[rec["step"]] = rec["loss_metrics/global_avg_loss"]
    return out


def logged_steps(run_dir: Path) -> list[int]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    steps = []
    for line in path.read_text().splitlines():
        try:
            steps.append(json.loads(line)["step"])
        except (json.JSONDecodeError, KeyError):
            pass  # a line being written right now
    return steps


def saved_state(step_dir: Path) -> dict[str, int]:
    """The data and train sections of a step folder (read without a process group)."""
    state = {"data": {"next_index": None}, "train": {"step": None, "tokens_seen": None}}
    with warnings.catch_warnings():  # "assuming the intent is to load in a single process": yes
        warnings.simplefilter("ignore", UserWarning)
        dcp.load(state, checkpoint_id=str(step_dir), no_dist=True)
    return {"next_index": state["data"]["next_index"], **state["train"]}


@pytest.fixture(scope="module")
def dump(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("ckpt")
    (d / "job.toml").write_text(CONFIG.format(dump=d))
    return d


@pytest.fixture(scope="module")
def reference(dump) -> dict[int, float]:
    """20 steps straight on 2 ranks (saves step-10 and step-20 on the way)."""
    launch(dump, "ref", 2)
    ref = losses(dump / "ref")
    assert sorted(ref) == list(range(1, STEPS + 1))
    return ref


@pytest.mark.parametrize("writer", ["thread", "process"])
def test_stop_and_resume_is_bitwise_identical_with_async_save(dump, reference, writer):
    # 10 steps with async saves (step 5 is written while steps 6-10 train), exit, resume to 20.
    name = f"resumed-{writer}"
    flags = ("--checkpoint.async_mode=async", f"--checkpoint.async_writer={writer}")
    proc = launch(dump, name, 2, "--training.steps=10", "--checkpoint.interval=5", *flags)
    # The FSDP (DTensor) state went through the reused staging buffers, not a fresh copy per save
    # (in shared memory for the writer processes).
    assert "async saves stage into CPU memory allocated once and reused" in proc.stderr
    assert f"writing in the background (a writer {writer})" in proc.stderr
    assert saved_state(dump / name / "checkpoint" / "step-10") == \
        {"next_index": 80, "step": 10, "tokens_seen": 80 * 64}
    # Each rank recorded the checksums of its files once the background write was done.
    assert "for the checksums of rank 0's" in proc.stderr
    assert recorded_files(dump / name / "checkpoint" / "step-10") == \
        all_files(dump / name / "checkpoint" / "step-10")
    resumed = launch(dump, name, 2, *flags)
    assert "resumed from" in resumed.stderr and "step-10" in resumed.stderr
    assert "match their checksums, checked by 2 rank(s)" in resumed.stderr
    got = losses(dump / name)
    for step in range(11, STEPS + 1):
        assert got[step] == reference[step], (step, got[step], reference[step])
    # step-5 was written while steps 6-10 trained (step-10, the last, was waited for at exit): a
    # rewind to it continues bitwise too, so the write read the state of step 5, not a later one.
    proc = launch(dump, name, 2, "--checkpoint.load_step=5", *flags)
    assert "resumed from" in proc.stderr and "step-5" in proc.stderr
    got = losses(dump / name)
    for step in range(6, STEPS + 1):
        assert got[step] == reference[step], (step, got[step], reference[step])
    # The launches' configs are kept: the first as config.toml, the second (other steps and
    # interval) beside it, and the log says where it went.
    run_dir = dump / name
    assert sorted(p.name for p in run_dir.glob("config*")) == ["config.toml", "config_0002.toml",
                                                                  "config_0003.toml"]
    assert "steps = 10" in (run_dir / "config.toml").read_text()
    assert "steps = 20" in (run_dir / "config_0002.toml").read_text()
    assert "load_step = 5" in (run_dir / "config_0003.toml").read_text()
    assert f"this launch's resolved config is {run_dir / 'config_0002.toml'}" in resumed.stderr


def test_without_the_nan_fill_losses_and_resume_stay_bitwise(dump, reference):
    """run.deterministic_fill = false (no NaN writes into new tensors): every kernel of the run writes
    what it reads, so the losses are those of the filled reference run, also after a resume."""
    proc = launch(dump, "nofill", 2, "--run.deterministic_fill=false", "--training.steps=10")
    assert "without the NaN fill of new tensors" in proc.stderr
    proc = launch(dump, "nofill", 2, "--run.deterministic_fill=false")
    assert "resumed from" in proc.stderr and "step-10" in proc.stderr
    got = losses(dump / "nofill")
    for step in range(1, STEPS + 1):
        assert got[step] == reference[step], (step, got[step], reference[step])


@pytest.mark.parametrize("nproc", [1, 4])
def test_resume_on_another_world_size(dump, reference, nproc):
    # Saved on 2 ranks (FSDP over 2), resumed on 1 rank (no sharding) or 4 (FSDP over 4).
    run = dump / f"on{nproc}"
    shutil.copytree(dump / "ref" / "checkpoint" / "step-10", run / "checkpoint" / "step-10")
    proc = launch(dump, f"on{nproc}", nproc)
    assert "saved on 2 ranks and is loaded on" in proc.stderr
    assert f"match their checksums, checked by {nproc} rank(s)" in proc.stderr
    if nproc == 4:  # ranks 2 and 3 have no saved generators: reseeded, with a warning
        assert "no RNG state for rank 3" in proc.stderr
    got = losses(run)
    assert sorted(got) == list(range(11, STEPS + 1))  # continues at the next step
    for step in range(11, STEPS + 1):
        assert math.isfinite(got[step])
        # Same samples and math, other reduction order: fp32 rounding only.
        assert abs(got[step] - reference[step]) <= 1e-5 * abs(reference[step]), step
    # The global stream continued exactly: 8 samples per step from sample 80, none repeated or
    # skipped (the stream's own tests check that a state of next_index = n means samples [0, n)).
    assert saved_state(run / "checkpoint" / "step-20") == \
        {"next_index": 160, "step": 20, "tokens_seen": 160 * 64}


def recorded_files(step_dir: Path) -> dict[int, set[str]]:
    """rank -> the files its checksum record lists."""
    out = {}
    for path in sorted((step_dir / ".checksums").glob("rank-*.json")):
        rec = json.loads(path.read_text())
        out[rec["rank"]] = set(rec["files"])
    return out


def all_files(step_dir: Path) -> dict[int, set[str]]:
    """rank -> the files it wrote by DCP's naming (__{rank}_{i}.distcp; rank 0 also .metadata)."""
    out: dict[int, set[str]] = {}
    for path in step_dir.glob("__*_*.distcp"):
        out.setdefault(int(path.name.split("_")[2]), set()).add(path.name)
    out[0].add(".metadata")
    return out


def test_each_rank_records_its_files_and_a_damaged_one_stops_every_rank(dump, reference):
    from trainer.checkpoint_folders import read_metadata, shard_lengths

    step = dump / "ref" / "checkpoint" / "step-10"
    # On this torch every rank's record lists the files DCP named after it, and together they
    # cover every file the metadata references: the naming the records rely on holds.
    recorded = recorded_files(step)
    assert sorted(recorded) == [0, 1] and recorded == all_files(step)
    assert set().union(*recorded.values()) == {".metadata", *shard_lengths(read_metadata(step))}
    for path in (step / ".checksums").glob("rank-*.json"):
        for name, entry in json.loads(path.read_text())["files"].items():
            data = (step / name).read_bytes()
            assert entry == {"bytes": len(data), "crc32": zlib.crc32(data)}, name
    # One byte flipped in the middle of rank 1's shard (same length): both ranks stop with the
    # same error naming the file, before a step; nothing in the folder changes.
    run = dump / "damaged"
    shutil.copytree(step, run / "checkpoint" / "step-10")
    shard = run / "checkpoint" / "step-10" / "__1_0.distcp"
    content = bytearray(shard.read_bytes())
    content[len(content) // 2] ^= 0x10
    shard.write_bytes(bytes(content))
    ckpt = run / "checkpoint"
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in ckpt.rglob("*") if p.is_file()}
    proc = launch(dump, "damaged", 2, check=False, torchrun_args=("--monitor-interval=5",))
    assert proc.returncode != 0
    for rank in (0, 1):
        assert f"[rank{rank}] error: checkpoint {run / 'checkpoint' / 'step-10'} is damaged: 1 of " \
               "its 3 files differ from the checksums recorded when it was saved (__1_0.distcp: " \
               f"saved {len(content):,} bytes with CRC32" in proc.stderr, proc.stderr[-4000:]
    assert "nothing on disk was changed" in proc.stderr
    assert logged_steps(run) == []
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in ckpt.rglob("*") if p.is_file()} == before


def test_changed_data_settings_are_refused_on_every_rank(dump, reference, tmp_path):
    # Another dataset (a shard folder), seq_len and seed at once: both ranks stop with the same
    # error, naming each key with its saved and current value; nothing in the run folder changes.
    import numpy as np

    from trainer.data.shards import write_shard
    from trainer.data.tokenizer import ByteTokenizer

    shards = tmp_path / "shards"
    shards.mkdir()
    write_shard(shards / "a.bin", np.random.default_rng(0).integers(0, 258, 200_000), ByteTokenizer())
    run = dump / "changed"
    shutil.copytree(dump / "ref" / "checkpoint" / "step-10", run / "checkpoint" / "step-10")
    before = {p: p.read_bytes() for p in (run / "checkpoint").rglob("*") if p.is_file()}
    # torchrun stops the other ranks when one fails: looking only every 5 s, it lets both print.
    proc = launch(dump, "changed", 2, "--training.seq_len=32", "--run.seed=1",
                  f"--data.dataset={shards}", check=False, torchrun_args=("--monitor-interval=5",))
    assert proc.returncode != 0
    err = proc.stderr
    for rank in (0, 1):  # raised on both ranks: neither waits for the other in a collective
        assert f"[rank{rank}] error: checkpoint {run / 'checkpoint' / 'step-10'} was saved " \
               "from a different data stream" in err, err[-4000:]
    assert "training.seq_len (seq_len): saved 64, current 32" in err
    assert "run.seed (seed): saved 0, current 1" in err
    assert "data.dataset (dataset): saved 'sha256:" in err and "current 'sha256:" in err
    assert f"({shards}, 200,000 tokens)" in err
    assert "--training.seq_len=64 --run.seed=0" in err and "checkpoint.allow_data_change" in err
    assert logged_steps(run) == []  # no step trained
    assert {p: p.read_bytes() for p in (run / "checkpoint").rglob("*") if p.is_file()} == before
    assert not list(run.glob("config*.toml"))  # the refused launch's config was not recorded


def test_default_global_batch_on_fewer_ranks_is_refused_unless_allowed(dump):
    # global_batch_size = -1 is local 2 x dp: 4 on 2 ranks, 2 on 1 rank. A resume on 1 rank would
    # halve the batch silently; it is refused, with the flag that keeps the batch.
    run = dump / "gbs"
    launch(dump, "gbs", 2, "--training.global_batch_size=-1", "--training.steps=2",
           "--checkpoint.interval=2")
    proc = launch(dump, "gbs", 1, "--training.global_batch_size=-1", "--training.steps=4",
                  "--checkpoint.interval=2", check=False)
    assert proc.returncode != 0
    assert "training.global_batch_size (global_batch_size): saved 4, current 2" in proc.stderr
    assert "-1 means local_batch_size x data-parallel degree" in proc.stderr
    assert "--training.global_batch_size=4" in proc.stderr
    assert sorted(losses(run)) == [1, 2]  # the refused launch trained nothing
    # On purpose: the run goes on with the new batch from the saved sample, and says so.
    proc = launch(dump, "gbs", 1, "--training.global_batch_size=-1", "--training.steps=4",
                  "--checkpoint.interval=2", "--checkpoint.allow_data_change")
    assert "checkpoint.allow_data_change = true: resuming" in proc.stderr
    assert "saved 4, current 2" in proc.stderr and "global sample 8 of the new stream" in proc.stderr
    assert sorted(losses(run)) == [1, 2, 3, 4]
    assert saved_state(run / "checkpoint" / "step-4") == \
        {"next_index": 12, "step": 4, "tokens_seen": 12 * 64}


def test_other_model_shape_fails_naming_the_setting(dump, reference):
    # A resume compares the recorded model settings before the shapes: the error names the field,
    # both values and the flag that restores it (the shape check's key names are the fallback for
    # checkpoints without the record, tests/unit/test_checkpoint.py).
    run = dump / "shape"
    shutil.copytree(dump / "ref" / "checkpoint" / "step-10", run / "checkpoint" / "step-10")
    proc = launch(dump, "shape", 1, "--model.overrides.dim=32", check=False)
    assert proc.returncode != 0
    assert "model.overrides.dim: saved 64, current 32\nTo resume it, run with the saved values " \
           "(--model.overrides.dim=64)" in proc.stderr, proc.stderr[-3000:]


def children(pid: int) -> list[int]:
    kids = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        kids += [int(k) for k in (task / "children").read_text().split()]
    return kids


def wait_for_step(run_dir: Path, proc: subprocess.Popen, step: int, timeout: float = 300) -> None:
    end = time.monotonic() + timeout
    while not logged_steps(run_dir) or max(logged_steps(run_dir)) < step:
        if proc.poll() is not None:
            raise AssertionError(f"the run ended (rc {proc.returncode}) before step {step}:\n"
                                 f"{proc.stderr.read()[-4000:]}")
        if time.monotonic() > end:
            raise AssertionError(f"step {step} not reached in {timeout}s")
        time.sleep(0.02)


def train_sh(dump: Path, *overrides: str, **env_vars: str) -> subprocess.Popen:
    """scripts/train.sh (torchrun underneath) on 2 CPU ranks, in the background."""
    e = dict(env(), NGPU="2", CONFIG=str(dump / "job.toml"), PYTHON=sys.executable, **env_vars)
    return subprocess.Popen(["bash", str(REPO / "scripts" / "train.sh"), *overrides], cwd=REPO, env=e,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def test_sigkill_of_a_rank_restarts_from_last_checkpoint(dump):
    steps = 60
    run = dump / "killed"
    proc = train_sh(dump, "--run.name=killed", f"--training.steps={steps}", "--checkpoint.interval=5",
                    MAX_RESTARTS="1")
    try:
        wait_for_step(run, proc, 7)  # past the checkpoint of step 5
        (torchrun_pid,) = children(proc.pid)
        os.kill(children(torchrun_pid)[-1], signal.SIGKILL)  # one training rank dies
        _, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-4000:]
    # First attempt: 1..k; the restart resumed from s, the newest checkpoint at the kill, and moved
    # the first attempt's rows after s to metrics.superseded.jsonl: metrics.jsonl has each step once.
    assert logged_steps(run) == list(range(1, steps + 1))
    found = re.search(r"resumed from \S+/step-(\d+) ", err)
    assert found, err[-4000:]
    resumed_at = int(found.group(1))
    assert resumed_at % 5 == 0 and resumed_at >= 5
    superseded = run / "metrics.superseded.jsonl"  # absent when the kill fell right after a save
    moved = [json.loads(line) for line in superseded.read_text().splitlines()] if superseded.exists() else []
    assert [r["step"] for r in moved] == list(range(resumed_at + 1, resumed_at + 1 + len(moved)))
    assert all(r["resumed_from_step"] == resumed_at for r in moved)
    assert resumed_at + len(moved) >= 7  # the first attempt had logged step 7
    assert saved_state(run / "checkpoint" / f"step-{steps}")["step"] == steps


def test_sigterm_to_launcher_saves_current_step_and_exits_0(dump):
    run = dump / "preempted"
    proc = train_sh(dump, "--run.name=preempted", "--training.steps=10000",
                    "--checkpoint.interval=10000")
    try:
        wait_for_step(run, proc, 3)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-4000:]
    last = logged_steps(run)[-1]
    folders = sorted(p.name for p in (run / "checkpoint").iterdir())
    assert folders == [f"step-{last}"]  # the step at which every rank stopped
    assert (run / "checkpoint" / f"step-{last}" / ".metadata").is_file()
    assert saved_state(run / "checkpoint" / f"step-{last}")["step"] == last
