"""Run scripts/convert_checkpoint.py in this process and report its peak RssAnon (the process's own
memory) and RssFile (mapped file pages), sampled from /proc/self/status every 50 ms.

    python docs/perf/2026-12-02_cpu_convert_memory/peak_memory.py from-hf /tmp/hf1b /tmp/imp1b \
        --config configs/debug.toml --model.flavor=1B
"""
import importlib.util
import re
import sys
import threading
import time
from pathlib import Path

spec = importlib.util.spec_from_file_location(
    "convert_checkpoint", Path(__file__).resolve().parents[3] / "scripts" / "convert_checkpoint.py")
convert = importlib.util.module_from_spec(spec)
spec.loader.exec_module(convert)
peak = {"RssAnon": 0, "RssFile": 0}


def sample() -> None:
    while True:
        status = Path("/proc/self/status").read_text()
        for key in peak:
            peak[key] = max(peak[key], int(re.search(rf"{key}:\s+(\d+)", status).group(1)))  # kB
        time.sleep(0.05)


threading.Thread(target=sample, daemon=True).start()
rc = convert.main(sys.argv[1:])
time.sleep(0.2)
print(f"rc {rc}, peak RssAnon GB {peak['RssAnon'] / 1e6:.2f}, peak RssFile GB {peak['RssFile'] / 1e6:.2f}")
