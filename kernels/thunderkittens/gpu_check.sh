#!/usr/bin/env bash
# One GPU run on an H100/H200 for titankit's ThunderKittens kernels: build the extension (cached),
# run tests/gpu/test_thunderkittens.py, and benchmark against cuDNN SDPA, the Triton kernel and
# torch._scaled_mm, printing markdown tables. From the repository root:
#
#   THUNDERKITTENS_ROOT=<clone> kernels/thunderkittens/gpu_check.sh [build|test|bench|bench-all|all]
#
# THUNDERKITTENS_ROOT defaults to ./.tk (a clone kept untracked in the checkout). "all" (default) is
# build + test + bench (anchor attention shape, 8192^3 GEMM): 194 s on an H200 with a cold build
# (2026-12-02), 81 s of it idle time (27 measurements x 3 s, below); "bench-all" adds the 8B and
# 70B-TP8 attention shapes and three Llama GEMM shapes. The benches idle the GPU 3 s before each
# measurement (--cooldown 3): both attention kernels run at the H200's 700 W limit, and without the
# pause one kernel's heat and clock state carried into the next (TK anchor rounds 503, 504, 538
# TFLOP/s in one run; with it 549, 549, 549: docs/benchmarks.md 4i, 4j).
set -u
stage=${1:-all}
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
export THUNDERKITTENS_ROOT=${THUNDERKITTENS_ROOT:-$root/.tk}
export PYTHONPATH=$root${PYTHONPATH:+:$PYTHONPATH}
py=$(command -v python3 || command -v python)
rc=0
run() { echo "+ $*"; "$@" || rc=1; }

case $stage in build|test|bench|bench-all|all) ;; *)
    echo "usage: $0 [build|test|bench|bench-all|all]" >&2; exit 2;;
esac
if [[ $stage == build || $stage == all ]]; then
    "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
              torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU")'
    nvcc --version | tail -1
    run "$py" -m kernels.thunderkittens.build
    [[ $rc == 0 ]] || exit 1
fi
if [[ $stage == test || $stage == all ]]; then
    run "$py" -m pytest -q -rs -m gpu -p no:cacheprovider tests/gpu/test_thunderkittens.py
fi
if [[ $stage == bench || $stage == all ]]; then
    run "$py" -m kernels.thunderkittens.bench --attention anchor --gemm '8192^3' --cooldown 3
fi
if [[ $stage == bench-all ]]; then
    run "$py" -m kernels.thunderkittens.bench --attention anchor,8b,70b-tp8 \
        --gemm '8192^3,8B w1/w3,70B wq/wo,70B w2' --cooldown 3
fi
exit $rc
