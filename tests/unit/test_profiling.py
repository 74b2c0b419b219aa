"""trainer.profiling: the interval arithmetic behind 'exposed communication', the summary of a GPU-like
trace (built by hand, since CI has no GPU), and a real profiled CPU run of the debug model."""

import gzip
import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers.cpu import cpu_env
from trainer.config import load_config
from trainer.log import logger as tk_logger
from trainer.profiling import (
    StepProfiler,
    check_profiling_config,
    comm_kind,
    exposed_length,
    kernel_category,
    main as profiling_main,
    summarize_trace,
    total_length,
    union_intervals,
)

ROOT = Path(__file__).resolve().parents[2]


# ---- interval arithmetic ---------------------------------------------------------------------
def _cells(intervals):
    """Brute force on integer endpoints: the set of unit cells [i, i+1) the intervals cover."""
    return {c for s, e in intervals for c in range(s, e)}


def test_exposed_comm_hand_cases():
    # Disjoint: all comm is exposed.
    assert exposed_length([(0, 10)], [(20, 30)]) == 10
    # Comm entirely under one compute kernel: hidden.
    assert exposed_length([(12, 18)], [(10, 20)]) == 0
    # Partial overlaps on both sides, and a compute gap inside the comm interval.
    assert exposed_length([(0, 100)], [(-5, 20), (30, 40), (90, 120)]) == 100 - 20 - 10 - 10
    # Overlapping comm kernels (two streams) count once; overlapping compute counts once.
    assert exposed_length([(0, 10), (5, 15)], [(2, 4), (3, 6)]) == 15 - 4
    # Touching intervals: no double counting at the shared endpoint.
    assert exposed_length([(0, 5), (5, 10)], [(5, 7)]) == 8
    assert exposed_length([], [(0, 1)]) == 0
    assert exposed_length([(3, 7)], []) == 4


def test_union_and_exposed_match_brute_force_on_random_intervals():
    rng = random.Random(1234)
    for _ in range(300):
        comm = [(s, s + rng.randint(0, 15)) for s in (rng.randint(0, 80) for _ in range(rng.randint(0, 8)))]
        comp = [(s, s + rng.randint(0, 15)) for s in (rng.randint(0, 80) for _ in range(rng.randint(0, 8)))]
        u = union_intervals(comm)
        assert all(a[1] < b[0] for a, b in zip(u, u[1:])), u  # sorted, disjoint, not touching
        assert _cells(u) == _cells(comm)
        assert total_length(comm) == len(_cells(comm))
        assert exposed_length(comm, comp) == len(_cells(comm) - _cells(comp))


# ---- classification and the summary of a GPU trace ------------------------------------------
@pytest.mark.parametrize("name, category, kind", [
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "comm", "all-gather"),
    ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "comm",
     "reduce-scatter"),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "comm", "all-reduce"),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "comm", "send/recv"),
    ("c10d::_allgather_base_", "comm", "all-gather"),
    ("c10d::alltoall_base_", "comm", "all-to-all"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1", "GEMM", None),
    ("nvjet_tst_256x128_64x4_1x2_h_bz_coopA_TNT", "GEMM", None),
    ("triton_tem_fused_mm_0", "GEMM", None),
    ("aten::mm", "GEMM", None),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4> >(Flash_fwd_params)",
     "attention", None),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128", "attention", None),
    ("triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_0", "elementwise/norm/other", None),
    ("aten::addcmul_", "elementwise/norm/other", None),
])
def test_kernel_names_are_classified(name, category, kind):
    assert kernel_category(name) == category
    if kind is not None:
        assert comm_kind(name) == kind


def _x(cat, name, ts, dur, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur, "args": args}


def _gpu_trace():
    """Two steps of 1000 us on device 0: GEMM, attention, a norm, FSDP comm partly under compute,
    and optimizer kernels launched inside the CPU 'optimizer' region (correlation ids link them)."""
    ev = []
    corr = iter(range(1, 1000))
    for step, t0 in enumerate((0.0, 1000.0)):
        ev.append(_x("user_annotation", f"ProfilerStep#{step}", t0, 1000))
        ev.append(_x("user_annotation", "data", t0, 50))
        ev.append(_x("user_annotation", "forward_backward", t0 + 50, 600))
        ev.append(_x("user_annotation", "optimizer", t0 + 700, 100))

        def kernel(name, start, dur, launch):
            c = next(corr)
            ev.append(_x("cuda_runtime", "cudaLaunchKernel", launch, 5, correlation=c))
            ev.append(_x("kernel", name, start, dur, device=0, stream=7, correlation=c))

        kernel("sm90_xmma_gemm_bf16bf16", t0 + 100, 300, t0 + 60)          # 100-400
        kernel("flash_fwd_kernel", t0 + 400, 100, t0 + 70)                 # 400-500
        kernel("triton_per_fused_rsqrt_mean", t0 + 500, 50, t0 + 80)       # 500-550
        # All-gather 50-150: 50 us before the GEMM starts are exposed.
        kernel("ncclDevKernel_AllGather_RING_LL", t0 + 50, 100, t0 + 55)
        # Reduce-scatter 520-620: hidden until 550, then 70 us exposed.
        kernel("ncclDevKernel_ReduceScatter_Sum_f32", t0 + 520, 100, t0 + 90)
        kernel("multi_tensor_apply_kernel", t0 + 800, 40, t0 + 710)        # optimizer (launched in region)
        kernel("sm90_xmma_gemm_bf16bf16", t0 + 850, 10, t0 + 720)          # a GEMM in the optimizer
        ev.append(_x("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", t0 + 10, 20, device=0))
    ev.append(_x("cpu_op", "aten::mm", 0, 3))  # CPU ops are ignored once CUDA kernels exist
    return {"traceEvents": ev}


def _row(text: str, label: str) -> float:
    m = re.search(r"^\| [^|]*" + re.escape(label) + r"[^|]* \| ([0-9.,]+) \|", text, re.M)
    assert m, f"no row {label!r} in\n{text}"
    return float(m.group(1).replace(",", ""))


def test_summary_of_a_gpu_trace_splits_the_step():
    text = summarize_trace(_gpu_trace(), "synthetic")
    assert "Average step time: 1.00 ms over 2 traced step(s)." in text
    assert "## Where the time goes on cuda:0 (per step)" in text
    assert _row(text, "compute: GEMM") == pytest.approx(0.300)
    assert _row(text, "compute: attention") == pytest.approx(0.100)
    assert _row(text, "compute: elementwise/norm/other") == pytest.approx(0.050)
    assert _row(text, "optimizer (kernels") == pytest.approx(0.050)
    assert _row(text, "communication (union") == pytest.approx(0.200)
    assert _row(text, "exposed communication") == pytest.approx(0.120)
    assert _row(text, "memcpy/memset") == pytest.approx(0.020)
    assert _row(text, "data loading (CPU") == pytest.approx(0.050)
    # Busy: 50-620 (comm and compute chained) + 800-840 + 850-860 + the 20 us memcpy at 10-30.
    assert _row(text, "device busy") == pytest.approx(0.640)
    assert _row(text, "device idle") == pytest.approx(0.360)
    assert re.search(r"\| all-gather \| 1 \| 0\.10 \| 0\.05 \|", text), text
    assert re.search(r"\| reduce-scatter \| 1 \| 0\.10 \| 0\.07 \|", text), text
    top = text.split("## Top")[1]
    assert top.index("sm90_xmma_gemm_bf16bf16") < top.index("flash_fwd_kernel")


def test_work_queued_before_the_window_is_left_out():
    """The GPU runs behind the CPU: when the window opens it still executes the previous step's
    optimizer, whose launches are not in the trace. That work is not charged to the traced steps."""
    trace = _gpu_trace()
    before = summarize_trace(trace, "synthetic")
    # The previous step's fused AdamW and a GEMM, running during step 0; launched before the window.
    trace["traceEvents"] += [_x("kernel", "multi_tensor_apply_kernel<FusedAdamMathFunctor>", 0, 40,
                                device=0, stream=7, correlation=5000),
                             _x("kernel", "sm90_xmma_gemm_bf16bf16", 40, 20, device=0, stream=7,
                                correlation=5001)]
    after = summarize_trace(trace, "synthetic")
    assert "Left out: 2 kernels/copies (0.06 ms) launched before the traced window" in after
    for label in ("compute: GEMM", "compute: elementwise", "optimizer (kernels", "device busy"):
        assert _row(after, label) == _row(before, label)
    assert "FusedAdamMathFunctor" not in after.split("## Top")[1]
    assert "Cut off" not in after
    # A launch whose kernel never ran inside the trace (it stopped first) is reported.
    trace["traceEvents"].append(_x("cuda_runtime", "cudaLaunchKernel", 1990, 5, correlation=6000))
    assert "Cut off: 1 kernel launches of the traced steps ran after the trace stopped" in \
        summarize_trace(trace, "synthetic")


def test_fsdp_copies_are_told_apart_by_the_thread_and_region_that_launched_them():
    """Kernels launched inside FSDP2's "FSDP::..." regions (copy-in, casts, copy-out, the
    reduce-scatter's chunk_cat) are FSDP's own, shown as a part of the elementwise time; a kernel
    that another thread launches while such a region is open is not."""
    trace = _gpu_trace()
    before = summarize_trace(trace, "synthetic")
    assert _row(before, "of which FSDP's copies") == 0
    ev = trace["traceEvents"]

    def launched(name, start, dur, launch, tid, corr):
        ev.append({**_x("cuda_runtime", "cudaLaunchKernel", launch, 2, correlation=corr), "tid": tid})
        ev.append(_x("kernel", name, start, dur, device=0, stream=9, correlation=corr))

    for step, t0 in enumerate((0.0, 1000.0)):
        ev.append(_x("user_annotation", "FSDP::all_gather", t0 + 51, 5))  # main thread (tid 7)
        ev.append({**_x("user_annotation", "FSDP::post_backward_reduce", t0 + 85, 10), "tid": 9})
        launched("multi_tensor_apply_kernel<CopyFunctor>", t0 + 560, 10, t0 + 52, 7, 7000 + step)
        launched("chunk_cat_cuda_kernel<float, BFloat16>", t0 + 570, 20, t0 + 88, 9, 7100 + step)
        launched("triton_poi_fused_add", t0 + 590, 10, t0 + 53, 11, 7200 + step)  # other thread
    after = summarize_trace(trace, "synthetic")
    assert _row(after, "of which FSDP's copies") == pytest.approx(0.030)
    assert _row(after, "compute: elementwise/norm/other") == pytest.approx(0.090)
    # Comm kernels launched in the same regions stay communication.
    assert _row(after, "communication (union") == _row(before, "communication (union")


def test_fsdp_copies_under_compute_are_told_apart_from_those_the_step_waits_for():
    """FSDP work beside a GEMM (its side streams) is hidden; FSDP work with no other compute kernel
    running (a one-rank mesh casts on the compute stream) is what the step pays, memcpys included."""
    trace = _gpu_trace()
    assert _row(summarize_trace(trace, "synthetic"), "FSDP's copies, casts and memcpys") == 0
    ev = trace["traceEvents"]

    def launched(cat, name, start, dur, launch, corr, api="cudaLaunchKernel"):
        ev.append(_x("cuda_runtime", api, launch, 2, correlation=corr))
        ev.append(_x(cat, name, start, dur, device=0, stream=9, correlation=corr))

    for step, t0 in enumerate((0.0, 1000.0)):
        ev.append(_x("user_annotation", "FSDP::all_gather", t0 + 51, 8))
        launched("kernel", "bfloat16_copy_kernel_cuda", t0 + 200, 20, t0 + 52, 8000 + step)  # under the GEMM
        launched("kernel", "bfloat16_copy_kernel_cuda", t0 + 560, 30, t0 + 53, 8100 + step)  # alone
        launched("gpu_memcpy", "Memcpy DtoD (Device -> Device)", t0 + 540, 20, t0 + 54, 8200 + step,
                 api="cudaMemcpyAsync")  # 10 us beside the norm (500-550), 10 us alone
        launched("kernel", "triton_poi_fused_add", t0 + 580, 20, t0 + 60, 8300 + step)  # not FSDP's
    text = summarize_trace(trace, "synthetic")
    assert _row(text, "of which FSDP's copies") == pytest.approx(0.050)
    # Alone: the memcpy's 550-560 and the cast's 560-580 (the add covers 580-590).
    assert _row(text, "FSDP's copies, casts and memcpys") == pytest.approx(0.030)


def test_summary_rejects_a_trace_without_steps():
    with pytest.raises(ValueError, match="ProfilerStep"):
        summarize_trace({"traceEvents": [_x("kernel", "k", 0, 1)]}, "t.json")


def test_profiling_window_past_the_run_is_a_config_error():
    cfg = load_config(["--training.steps=4", "--lr_scheduler.warmup_steps=1", "--profiling.enable_profiling",
                       "--profiling.profile_start_step=3", "--profiling.profile_steps=3"])
    with pytest.raises(ValueError, match=r"profiling.profile_start_step = 3 .* training.steps = 4"):
        check_profiling_config(cfg)


def test_profiling_window_error_names_where_its_keys_were_set(tmp_path):
    """Was: the one config error without its source (file or command line) in front."""
    from trainer.config import ConfigError, validate_config

    toml = tmp_path / "prof.toml"
    toml.write_text("[profiling]\nenable_profiling = true\nprofile_start_step = 8\n")
    cfg = load_config(["--config", str(toml), "--training.steps=4", "--lr_scheduler.warmup_steps=1"])
    with pytest.raises(ConfigError) as exc:
        validate_config(cfg, 1)
    assert str(exc.value).startswith(f"{toml} (enable_profiling, profile_start_step) and command line "
                                     "(steps): profiling.profile_start_step = 8 with")


def _tiny_steps(profiler: StepProfiler, first: int, last: int) -> None:
    """Train steps first..last of a small MLP, with the Trainer's regions, reporting each step."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(first, last + 1):
        with torch.profiler.record_function("data"):
            x = torch.randn(16, 32)
        with torch.profiler.record_function("forward_backward"):
            model(x).pow(2).mean().backward()
        with torch.profiler.record_function("optimizer"):
            opt.step()
            opt.zero_grad()
        profiler.step(step)


def test_a_run_that_ends_inside_the_window_saves_what_was_traced(tmp_path, caplog):
    cfg = load_config(["--training.steps=10", "--lr_scheduler.warmup_steps=1", "--profiling.enable_profiling",
                       "--profiling.profile_start_step=3", "--profiling.profile_steps=4"])
    tk_logger.propagate = True  # let caplog see the project logger
    try:
        with caplog.at_level("WARNING", logger="titankit"):
            profiler = StepProfiler(cfg, tmp_path, rank=0, world_size=1, device=torch.device("cpu"))
            _tiny_steps(profiler, 1, 4)  # a preemption after step 4: steps 3 and 4 were traced
            profiler.close()
    finally:
        tk_logger.propagate = False
    assert any("inside the profiling window 3-6" in r.getMessage() for r in caplog.records)
    summary = (tmp_path / "profile_traces" / "step-4" / "summary.md").read_text()
    assert "# Profile of steps 3-4" in summary and "over 2 traced step(s)" in summary


def test_a_run_resumed_past_the_window_profiles_nothing(tmp_path):
    cfg = load_config(["--training.steps=10", "--lr_scheduler.warmup_steps=1", "--profiling.enable_profiling",
                       "--profiling.profile_start_step=2", "--profiling.profile_steps=2"])
    profiler = StepProfiler(cfg, tmp_path, rank=0, world_size=1, device=torch.device("cpu"), current_step=5)
    _tiny_steps(profiler, 6, 7)
    profiler.close()
    assert not (tmp_path / "profile_traces").exists()


# ---- a real profiled run ---------------------------------------------------------------------
def test_profiling_a_cpu_run_writes_trace_and_summary(tmp_path, capsys):
    cmd = [sys.executable, "-m", "trainer.train", "--config", "configs/debug.toml",
           "--model.overrides.n_layers=2", "--model.overrides.dim=64", "--training.seq_len=32",
           "--training.local_batch_size=2", "--training.steps=4", "--lr_scheduler.warmup_steps=1",
           f"--run.dump_folder={tmp_path}", "--run.name=prof", f"--data.cache_dir={tmp_path / 'cache'}",
           "--profiling.enable_profiling", "--profiling.profile_start_step=2", "--profiling.profile_steps=2"]
    env = cpu_env(OMP_NUM_THREADS="1")
    env.pop("RANK", None)
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    folder = tmp_path / "prof" / "profile_traces" / "step-3"
    assert sorted(p.name for p in folder.iterdir()) == ["rank0_trace.json.gz", "summary.md"]  # no temp files
    with gzip.open(folder / "rank0_trace.json.gz", "rt") as f:
        trace = json.load(f)
    names = [e["name"] for e in trace["traceEvents"] if e.get("cat") == "user_annotation"]
    # Exactly the two configured steps were traced, with the trainer's three regions in each.
    assert sum(n.startswith("ProfilerStep#") for n in names) == 2
    for region in ("data", "forward_backward", "optimizer"):
        assert names.count(region) == 2, (region, names)
    summary = (folder / "summary.md").read_text()
    for heading in ("# Profile of steps 2-3, rank 0 of 1 (cpu)", "## CPU regions (wall time per step)",
                    "## Where the time goes on cpu (per step)", "## Top "):
        assert heading in summary, summary
    assert _row(summary, "compute: GEMM") > 0 and _row(summary, "optimizer (kernels") > 0
    assert _row(summary, "of which FSDP's copies") == 0  # one rank: no FSDP units
    assert summary.isascii()
    # The saved trace can be summarised again offline, to the same text.
    assert profiling_main([str(folder / "rank0_trace.json.gz")]) == 0
    again = capsys.readouterr().out
    assert again.split("\n", 1)[1] == summary.split("\n", 1)[1]


def test_kernel_labels_tell_foreach_and_optimizer_kernels_apart():
    """The top-kernel table must say which multi_tensor_apply kernel is the optimizer, the grad norm
    or the clip (on 2 x H200 four such rows were cut to the same 90 characters)."""
    from trainer.profiling import kernel_label

    adam = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
            "namespace)::FusedOptimizerTensorListMetadata<4>, at::native::(anonymous namespace)::"
            "FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, double*, double, double, "
            "double, double, double, double, bool, float const*, float const*>(...)")
    norm = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
            "namespace)::TensorListMetadata<1>, at::native::(anonymous namespace)::LpNormFunctor<float, "
            "(at::native::(anonymous namespace)::NormType)1, float, float>, float*, int>(...)")
    mul = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
           "namespace)::TensorListScalarListMetadata<float, 1>, at::native::(anonymous namespace)::"
           "BinaryOpScalarFunctor<float, 1, 1, 0>, std::multiplies<float>, float>(...)")
    labels = [kernel_label(n) for n in (adam, norm, mul)]
    assert labels == ["multi_tensor_apply_kernel<FusedAdamMathFunctor>",
                      "multi_tensor_apply_kernel<LpNormFunctor>",
                      "multi_tensor_apply_kernel<BinaryOpScalarFunctor, std::multiplies>"]
    assert kernel_label("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT") == \
        "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
    assert kernel_label("a|b") == "a/b" and len(kernel_label("x" * 300)) == 90
