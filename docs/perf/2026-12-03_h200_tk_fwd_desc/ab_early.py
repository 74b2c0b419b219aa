"""A/B of the barriers tested early (early_tests.patch: the forward tests K_i and V_{i-1} at the end
of iteration i - 1; the backward tests its next Q / dO stage at the end of an iteration and the two
dS^T hand-overs once the iteration's S^T / dP^T wgmmas are issued; each waits only where a test
failed) against main, in one process. Run with early_tests.patch applied to the tree:
  early     the tree's build
  main      the patch reversed
  early_qo  the tree with the backward's dS^T hand-overs waited as on main (only its stage tested)
Each variant is checked against main (as ab.py), then 4r's attention A/B.

  git apply docs/perf/2026-12-03_h200_tk_fwd_desc/early_tests.patch
  python3 docs/perf/2026-12-03_h200_tk_fwd_desc/ab_early.py [rounds] [cooldown]
"""
import importlib.util
import sys
import time
from pathlib import Path

from kernels.thunderkittens import build

HERE = Path(__file__).resolve().parent


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


desc_ab = _load("desc_ab", HERE / "ab.py")  # check(); it also puts alloc_ab and fused_dq's ab on the path
alloc_ab, fused_ab = desc_ab.alloc_ab, desc_ab.fused_ab

DS_FREE = "const bool ds_free_ready = it < 2 || detail::test_phase(ds_free[buf], ((it - 2) / 2) & 1);"
DS_FULL = "const bool ds_full_ready = ui == 0 || detail::test_phase(ds_full[(it - 1) % 2], ((it - 1) / 2) & 1);"


def main_text(name, text):
    return fused_ab.patched(name, text, True, HERE / "early_tests.patch")


def early_qo(name, text):
    if name == "attention_bwd_sm90.cu":
        assert text.count(DS_FREE) == 1 and text.count(DS_FULL) == 1
        text = text.replace(DS_FREE, "const bool ds_free_ready = it < 2;")
        text = text.replace(DS_FULL, "const bool ds_full_ready = false;")
    return text


if __name__ == "__main__":
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    cooldown = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    t0 = time.time()
    exts = {"early": build.extension()}
    exts["main"] = alloc_ab.edited_extension("titankit_tk_main", main_text)
    exts["early_qo"] = alloc_ab.edited_extension("titankit_tk_early_qo", early_qo)
    print(f"builds {time.time() - t0:.0f} s", flush=True)
    desc_ab.check({"main": exts["main"], "early": exts["early"], "early_qo": exts["early_qo"]})
    alloc_ab.attention_ab(exts, rounds, cooldown)
