"""scripts/project_hardware.py: the B200 (or any GPU) projection calibrated on measured runs."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("project_hardware", ROOT / "scripts" / "project_hardware.py")
proj = importlib.util.module_from_spec(_spec)
sys.modules["project_hardware"] = proj
_spec.loader.exec_module(proj)

HEAD = ("| variant | model | layout | precision | compile | AC | local batch | seq | tokens/s/GPU | TFLOP/s | MFU "
        "| max active / reserved GiB |\n" + "|---|" * 12)


def _profile(step, gemm=0.0, attention=0.0, elementwise=0.0, optimizer=0.0, comm=0.0, exposed=0.0, idle=0.0):
    rows = [("compute: GEMM", gemm), ("compute: attention", attention),
            ("compute: elementwise/norm/other", elementwise),
            ("optimizer (kernels launched in the optimizer region)", optimizer),
            ("communication (union of comm kernels)", comm),
            ("**exposed communication** (comm with no compute kernel running)", exposed),
            ("memcpy/memset", 0.0), ("device idle (step time - busy)", idle)]
    body = "\n".join(f"| {k} | {v:,.2f} | x% |" for k, v in rows)
    return f"# Profile\n\nAverage step time: {step:,.2f} ms over 1 traced step(s).\n\n| part | ms/step | % |\n|---|---|---|\n{body}\n"


ENV = "Environment: python 3.12.3, torch 2.11.0+cu130, 2 x NVIDIA H200, driver 580.159.04, CUDA 13.0"


def _bench(tmp_path, rows, env=ENV):
    """rows: (variant, model cell, precision cell, tps, max active GiB, profile text)."""
    lines = [HEAD]
    (tmp_path / "b").mkdir()
    for name, model, prec, tps, mem, prof in rows:
        lines.append(f"| {name} | {model} | fsdp2 | {prec} | on | selective (op) | 1 | 8192 | {tps:,.0f} | 1 | 1% "
                     f"| {mem:.1f} / {mem + 10:.1f} |")
        (tmp_path / "b" / (name.replace(" ", "_") + ".profile.md")).write_text(prof)
    (tmp_path / "b.md").write_text(env + "\n\n" + "\n".join(lines) + "\n")
    return tmp_path / "b.md"


def test_same_gpu_same_layout_projects_the_measurement(tmp_path, capsys):
    prof = _profile(1000, gemm=600, attention=150, elementwise=200, optimizer=20, comm=300, exposed=30, idle=5)
    b = _bench(tmp_path, [("v 4", "llama3 70B (4 layers)", "bfloat16, attn sdpa", 17264, 63.0, prof),
                          ("v 8", "llama3 70B (8 layers)", "bfloat16, attn sdpa", 9971, 94.1, prof)])
    assert proj.main(["--bench", str(b), "--target", "h200", "--fsdp", "2", "--tc-efficiency", "1"]) == 0
    out = capsys.readouterr().out
    assert "| v 4 | 17,264 | 17,264 |" in out and "| v 8 | 9,971 | 9,971 |" in out
    assert "measured-based 1,159; projected (tc-eff 1) 1,159" in out


def test_each_part_scales_by_its_own_bound():
    src, dst = proj.GPUS["h200"], proj.GPUS["b200"]
    gemm_only = proj.parse_profile_text(_profile(100, gemm=100))
    assert proj.time_ratio(gemm_only, src, dst, False, 2, 2, 1.0) == pytest.approx(989 / 2250)
    assert proj.time_ratio(gemm_only, src, dst, True, 2, 2, 1.0) == pytest.approx(1979 / 4500)
    assert proj.time_ratio(gemm_only, src, dst, False, 2, 2, 0.5) == pytest.approx(2 * 989 / 2250)
    mem_only = proj.parse_profile_text(_profile(100, elementwise=100))
    assert proj.time_ratio(mem_only, src, dst, False, 2, 2, 1.0) == pytest.approx(4.8 / 8.0)
    idle = proj.parse_profile_text(_profile(100, gemm=50, idle=50))
    assert proj.time_ratio(idle, src, dst, False, 2, 2, 1.0) == pytest.approx((50 * 989 / 2250 + 50) / 100)


def test_communication_that_no_longer_hides_under_compute_becomes_exposed():
    src, dst = proj.GPUS["h200"], proj.GPUS["b200"]
    # 100 ms of GEMM hid 80 ms of comm on the source. On the target compute takes 43.96 ms; FSDP 8 moves
    # 1.75x the bytes per GPU over a link twice as fast: 70 ms of comm, 26.04 ms of it now exposed.
    p = proj.parse_profile_text(_profile(100, gemm=100, comm=80))
    compute = 100 * 989 / 2250
    assert proj.time_ratio(p, src, dst, False, 2, 8, 1.0) == pytest.approx(80 * 1.75 / 2 / 100)
    # At FSDP 2 the same bytes take 40 ms on the faster link: hidden under the 43.96 ms of compute.
    assert proj.time_ratio(p, src, dst, False, 2, 2, 1.0) == pytest.approx(compute / 100)


def test_memory_check_splits_state_from_activations(tmp_path, capsys):
    p0, pl = proj.params_per_layer("llama3", "70B")
    assert pl == 855_638_016 + 2 * 8192 and p0 == 2 * 128256 * 8192 + 8192
    prof = _profile(1000, gemm=1000)
    act, rest = 1.5 * proj.GIB, 16.0 * proj.GIB
    mem = [(rest + 16 * p0 / 2 + n * (act + 16 * pl / 2)) / proj.GIB for n in (4, 8)]
    b = _bench(tmp_path, [("a", "llama3 70B (4 layers)", "bfloat16, attn sdpa", 100, mem[0], prof),
                          ("b", "llama3 70B (8 layers)", "bfloat16, attn sdpa", 60, mem[1], prof)])
    proj.main(["--bench", str(b), "--target", "b200", "--fsdp", "8", "--layers", "80"])
    out = capsys.readouterr().out
    assert "1.50 GiB per layer, 16.0 GiB outside the layers" in out  # to the rounding of the table's GiB
    state = 16 * (p0 + 80 * pl)
    need = rest + 80 * act + state / 8
    assert f"{need / proj.GIB:.0f} GiB per GPU against 168 GiB on B200 (HGX): does NOT fit; FSDP >= " in out
    proj.main(["--bench", str(b), "--target", "b200", "--fsdp", "8", "--layers", "8"])
    assert "B200 (HGX): fits." in capsys.readouterr().out


def _error(capsys, *argv):
    """The one-line error main() exits with (argparse style: usage, then 'prog: error: ...')."""
    with pytest.raises(SystemExit) as exc:
        proj.main(list(argv))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


def test_bad_inputs_name_the_file(tmp_path, capsys):
    (tmp_path / "x.md").write_text("no table here\n")
    assert _error(capsys, "--bench", str(tmp_path / "x.md"), "--target", "b200").endswith(
        "x.md: no bench_train table (a line starting '| variant |')")
    assert "nope.md: no such file" in _error(capsys, "--bench", str(tmp_path / "nope.md"), "--target", "b200")
    assert f"--bench {tmp_path}: is a folder; pass the X.md" in _error(capsys, "--bench", str(tmp_path), "--target", "b200")
    b = _bench(tmp_path, [("v", "llama3 70B (4 layers)", "bfloat16, attn sdpa", 1, 1.0, "# nothing\n")])
    assert "v.profile.md: no 'Average step time'" in _error(capsys, "--bench", str(b), "--target", "b200")
    (tmp_path / "b" / "v.profile.md").unlink()
    assert "v.profile.md: missing; run bench_train" in _error(capsys, "--bench", str(b), "--target", "b200")


def _one_row(tmp_path, env=ENV):
    tmp_path.mkdir(exist_ok=True)
    prof = _profile(1000, gemm=600, elementwise=400)
    return _bench(tmp_path, [("v", "llama3 70B (4 layers)", "bfloat16, attn sdpa", 1000, 63.0, prof)], env)


def test_source_gpu_is_read_from_the_bench_file(tmp_path, capsys):
    b = _one_row(tmp_path, ENV.replace("H200", "H100 80GB HBM3"))
    assert proj.main(["--bench", str(b), "--target", "b200"]) == 0
    assert "from H100 SXM to B200 (HGX)" in capsys.readouterr().out
    assert proj.main(["--bench", str(b), "--target", "b200", "--source", "h100"]) == 0  # agrees: accepted
    capsys.readouterr()
    assert _error(capsys, "--bench", str(b), "--target", "b200", "--source", "h200").endswith(
        f"--source h200: {b} was measured on H100 SXM; drop --source or pass --source h100")


def test_cpu_or_unknown_gpu_bench_is_refused(tmp_path, capsys):
    cpu = _one_row(tmp_path / "c",
                   "Environment: python 3.11.7, torch 2.11.0, CPU (2 cores)")
    assert f"{cpu}: the Environment line names a CPU (python 3.11.7, torch 2.11.0, CPU (2 cores)); a projection " \
        "needs a bench measured on one of: H100 SXM" in _error(capsys, "--bench", str(cpu), "--target", "b200")
    pcie = _one_row(tmp_path / "p", ENV.replace("H200", "H100 PCIe"))
    assert "the bench ran on 'NVIDIA H100 PCIe', which has no datasheet figures here" in _error(
        capsys, "--bench", str(pcie), "--target", "b200")
    none = tmp_path / "n.md"
    none.write_text(cpu.read_text().replace("Environment:", "Env:"))
    assert "n.md: no 'Environment:' line" in _error(capsys, "--bench", str(none), "--target", "b200")


def test_tc_efficiency_must_be_a_fraction(tmp_path, capsys):
    b = _one_row(tmp_path)
    for bad in ("5", "0", "-0.5"):
        assert _error(capsys, "--bench", str(b), "--target", "b200", "--tc-efficiency", bad).endswith(
            f"argument --tc-efficiency: {bad} is not a fraction in (0, 1] (1.0 = the source's share of peak)")


def test_out_creates_its_folder_and_is_checked_first(tmp_path, capsys):
    b = _one_row(tmp_path)
    out = tmp_path / "new" / "dir" / "p.md"
    assert proj.main(["--bench", str(b), "--target", "b200", "--out", str(out)]) == 0
    assert out.read_text().startswith("Projection (a model, not a measurement) from H200 SXM")
    capsys.readouterr()
    (tmp_path / "afile").write_text("x")
    # checked before the bench is read: the bench here does not exist
    assert "--out " + str(tmp_path / "afile" / "p.md") + ": cannot create its folder" in _error(
        capsys, "--bench", "nope.md", "--target", "b200", "--out", str(tmp_path / "afile" / "p.md"))


def test_profiles_are_found_under_every_name_bench_train_has_given_them(tmp_path):
    """Now: only [A-Za-z0-9._-]; before 2026-12-01: commas kept; some folders renamed for transfer."""
    variant = "70B full AC, accum 4, 4 layers bf16"
    for name in ("70B_full_AC_accum_4_4_layers_bf16", "70B_full_AC,_accum_4,_4_layers_bf16",
                 "70B_full_AC__accum_4__4_layers_bf16"):
        folder = tmp_path / name
        folder.mkdir()
        (folder / f"{name}.profile.md").write_text("x")
        (folder / "70B_full_AC_accum_4_8_layers_bf16.profile.md").write_text("x")  # another depth
        assert proj.profile_file(folder, variant) == folder / f"{name}.profile.md"
    missing = tmp_path / "empty"
    missing.mkdir()
    assert proj.profile_file(missing, variant).name == "70B_full_AC_accum_4_4_layers_bf16.profile.md"
    both = tmp_path / "both"
    both.mkdir()
    for name in ("a,_b", "a_b"):
        (both / f"{name}.profile.md").write_text("x")
    with pytest.raises(ValueError, match="all match variant 'a, b'"):
        proj.profile_file(both, "a, b")
