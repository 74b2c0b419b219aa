"""scripts/bench_cp_attention.py runs on CPU: 2 gloo ranks under torchrun, tiny fp32 shape.

The numbers are meaningless on CPU; what must hold is the command a user runs on GPUs: it times
every method/backend row against the one-process baseline, writes the markdown report, and its
CP results match full attention (the error column, which also makes the script fail when large).
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.helpers.cpu import cpu_env

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "bench_cp_attention.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("bench_cp_attention", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_bench_runs_on_two_gloo_ranks(tmp_path):
    out = tmp_path / "cp.md"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           str(SCRIPT), "--seq", "32", "--batch", "2", "--heads", "4", "--kv-heads", "2",
           "--head-dim", "16", "--backends", "sdpa,reference", "--warmup", "1", "--iters", "2",
           "--out", str(out)]
    env = cpu_env(OMP_NUM_THREADS="1")
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = out.read_text()
    assert report.strip() in proc.stdout
    assert "2 CPU processes (gloo)" in report and "seq 32 (cp 2: 16 per rank)" in report
    rows = [line for line in report.splitlines() if line.startswith("| cp 2 ")]
    names = [line.split("|")[1].strip() for line in rows]
    assert names == ["cp 2 ring, sdpa", "cp 2 ring, reference", "cp 2 allgather, sdpa",
                     "cp 2 allgather, reference"]
    for line in rows:
        cells = [c.strip() for c in line.strip("|").split("|")]
        fwd_ms, both_ms, err = float(cells[1]), float(cells[3]), float(cells[6])
        assert fwd_ms > 0 and both_ms > 0
        assert err < 1e-4, line  # fp32: CP equals full attention up to rounding
    assert re.search(r"\| 1 process, full sequence, SDPA \| [0-9.]+ \|", report)


def test_bench_rejects_bad_arguments(capsys):
    bench = _load_script()
    with pytest.raises(SystemExit):
        bench.main(["--methods", "ulysses"])
    assert "valid items are ['ring', 'allgather']" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.main(["--backends", "flash"])
    assert "['sdpa', 'triton', 'reference']" in capsys.readouterr().err
