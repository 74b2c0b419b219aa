"""scripts/compare_losses.py: the loss-curve comparison used for backends, FP8 and layouts."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import compare_losses  # noqa: E402
from compare_losses import compare  # noqa: E402
from tests.helpers.cpu import cpu_env


def _rows(losses):
    return [{"step": i + 1, "loss_metrics/global_avg_loss": v} for i, v in enumerate(losses)]


def test_compare_reports_max_and_tail_difference():
    a = _rows([10.0, 8.0, 6.0, 5.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0])
    b = _rows([10.0, 8.0, 6.3, 5.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.04])
    c = compare(a, b)
    assert c["max_rel"] == pytest.approx(0.05) and c["max_rel_step"] == 3
    assert c["tail_mean_rel"] == pytest.approx(0.01)  # last 10% of 10 steps = step 10


@pytest.mark.slow
def test_same_config_twice_gives_identical_curves_on_cpu():
    """Two runs of one config on the same data agree exactly on CPU: the comparison is sound."""
    tiny = ("--model.overrides.n_layers=1 --model.overrides.dim=32 --model.overrides.n_heads=2 "
            "--model.overrides.n_kv_heads=1 --training.seq_len=32 --training.local_batch_size=2 "
            "--lr_scheduler.warmup_steps=1")
    proc = subprocess.run(
        [sys.executable, "scripts/compare_losses.py", "--config", "configs/debug.toml", "--steps", "3",
         "--ngpu", "2", "--common", tiny, "--a=--training.max_norm=1.0",
         "--b=--training.max_norm=1.0"],
        cwd=ROOT, env=cpu_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "max relative difference" in proc.stdout
    rel = float(proc.stdout.split("max relative difference ")[1].split()[0])
    assert rel == 0.0  # same config, same data, CPU: bitwise the same run


def test_files_mode_compares_common_steps_of_runs_of_different_length(tmp_path):
    """--files compares saved metrics: a 50-step run against the first 50 steps of a 200-step one."""
    import json

    from compare_losses import main

    long = [{**r, "throughput(tps)": 100.0, "time_metrics/end_to_end(s)": 1.0} for r in _rows([5.0] * 20)]
    short = [{**r, "throughput(tps)": 90.0, "time_metrics/end_to_end(s)": 1.0} for r in _rows([5.05] * 10)]
    fa, fb = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    fa.write_text("".join(json.dumps(r) + "\n" for r in long))
    fb.write_text("".join(json.dumps(r) + "\n" for r in [{"step": 0, "note": "no loss"}] + short))
    out = tmp_path / "report.md"
    assert main(["--files", str(fa), str(fb), "--warmup", "0", "--out", str(out)]) == 0
    text = out.read_text()
    assert "max relative difference 1.00e-02 (step 1)" in text
    assert "A 100, B 90" in text
    assert "A: steps 1-20 (20 rows), B: steps 1-10 (10 rows); compared: steps 1-10 (10 rows)" in text
    assert "warning: the runs logged different steps" in text


def _write(path, rows, tail=""):
    import json

    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + tail)
    return str(path)


def _timed(losses):
    return [{**r, "throughput(tps)": 100.0, "time_metrics/end_to_end(s)": 1.0} for r in _rows(losses)]


def _files(capsys, *argv):
    rc = compare_losses.main(["--files", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_files_torn_last_line_is_skipped_with_a_warning_naming_file_and_line(tmp_path, capsys):
    fa = _write(tmp_path / "a.jsonl", _timed([5.0] * 4), tail='{"step": 5, "loss_metrics/gl')
    fb = _write(tmp_path / "b.jsonl", _timed([5.0] * 4))
    rc, out, err = _files(capsys, fa, fb)
    assert rc == 0 and "max relative difference 0.00e+00" in out
    assert f"warning: {fa}:5: 1 line(s) that are not JSON rows skipped" in err


def test_files_torn_line_in_the_middle_is_skipped_as_the_trainer_leaves_it(tmp_path, capsys):
    """After a crash mid-write and a resume, the trainer keeps the torn line where it was, so a
    resumed run's metrics.jsonl can hold one before later rows: skipped, named, not an error."""
    fa = tmp_path / "a.jsonl"
    _write(fa, _timed([5.0] * 4))
    lines = fa.read_text().splitlines()
    lines[1] = lines[1][:20]
    fa.write_text("\n".join(lines) + "\n")
    rc, out, err = _files(capsys, str(fa), str(fa))
    assert rc == 0 and f"warning: {fa}:2: 1 line(s) that are not JSON rows skipped" in err, err
    assert "steps 1-4 (3 rows)" in out, out


@pytest.mark.parametrize("bad", [None, float("nan"), float("inf")])
def test_files_null_nan_or_inf_loss_is_reported_as_divergence_at_the_first_such_step(bad, tmp_path, capsys):
    losses = [5.0] * 10
    losses[4] = losses[6] = bad
    fa = _write(tmp_path / "a.jsonl", _timed([5.0] * 10))
    fb = _write(tmp_path / "b.jsonl", _timed(losses))
    out_file = tmp_path / "report.md"
    rc, out, err = _files(capsys, fa, fb, "--out", str(out_file))
    assert "DIVERGED at step 5 " in out, out
    assert "max relative difference inf (step 5)" in out
    assert "0.00e+00 (step" not in out
    # A gate: exit 1, the report printed and saved all the same, the verdict its last line.
    assert rc == 1 and out.splitlines()[-1] == "FAIL: diverged at step 5 (a null, NaN or inf loss)"
    assert out_file.read_text() == out


def _differ_by_25_percent_at_step_3(tmp_path):
    """Two runs whose largest relative difference is 0.25 (exact in binary) at step 3."""
    fa = _write(tmp_path / "a.jsonl", _timed([5.0, 4.5, 4.0, 3.9]))
    fb = _write(tmp_path / "b.jsonl", _timed([5.0, 4.5, 5.0, 3.9]))
    return fa, fb


def test_max_rel_diff_exceeded_fails_with_exit_1_and_a_last_line_saying_by_how_much(tmp_path, capsys):
    fa, fb = _differ_by_25_percent_at_step_3(tmp_path)
    out_file = tmp_path / "report.md"
    rc, out, err = _files(capsys, fa, fb, "--max-rel-diff", "0.01", "--out", str(out_file))
    assert rc == 1, err
    assert out.splitlines()[-1] == "FAIL: max relative difference 2.50e-01 (step 3) > --max-rel-diff 1.00e-02"
    assert "| step | A | B | rel. diff |" in out and out_file.read_text() == out  # the report comes first


@pytest.mark.parametrize("limit", ["0.3", "0.25"])
def test_max_rel_diff_within_passes_with_exit_0(limit, tmp_path, capsys):
    """Within means not above: a difference equal to the limit passes."""
    fa, fb = _differ_by_25_percent_at_step_3(tmp_path)
    rc, out, err = _files(capsys, fa, fb, "--max-rel-diff", limit)
    assert rc == 0, err
    assert out.splitlines()[-1] == (f"PASS: max relative difference 2.50e-01 (step 3) <= --max-rel-diff "
                                    f"{float(limit):.2e}")


def test_without_max_rel_diff_a_difference_has_no_verdict_and_exits_0(tmp_path, capsys):
    fa, fb = _differ_by_25_percent_at_step_3(tmp_path)
    rc, out, err = _files(capsys, fa, fb)
    assert rc == 0 and "PASS" not in out and "FAIL" not in out
    assert out.splitlines()[-1].startswith("tokens/s/GPU")


def test_with_max_rel_diff_a_divergence_is_still_named_as_such(tmp_path, capsys):
    """A divergence is named as such, not as an infinite relative difference over the limit."""
    fa = _write(tmp_path / "a.jsonl", _timed([5.0, 4.0, 3.0]))
    fb = _write(tmp_path / "b.jsonl", _timed([5.0, None, 3.0]))
    rc, out, err = _files(capsys, fa, fb, "--max-rel-diff", "0.5")
    assert rc == 1 and out.splitlines()[-1] == "FAIL: diverged at step 2 (a null, NaN or inf loss)"


@pytest.mark.parametrize("value", ["0", "-0.01", "nan", "inf", "1%"])
def test_max_rel_diff_must_be_a_finite_number_above_0(value, tmp_path, monkeypatch, capsys):
    """Refused by argparse, before a run trains or a file is read: exit 2 and one error line."""
    monkeypatch.setattr(compare_losses.tempfile, "mkdtemp", _no_process)
    with pytest.raises(SystemExit) as exc:
        compare_losses.main(["--config", "configs/debug.toml", "--max-rel-diff", value])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert err.splitlines()[-1].endswith(f": error: argument --max-rel-diff: {value!r}: must be a finite "
                                         "number > 0, e.g. 0.01 for 1%"), err


@pytest.mark.parametrize("case, message", [
    ("empty", "empty file"), ("missing", "no such file"), ("emptydir", "a folder without metrics.jsonl")])
def test_files_empty_missing_or_folder_is_a_one_line_error(case, message, tmp_path, capsys):
    fa = _write(tmp_path / "a.jsonl", _timed([5.0]))
    bad = tmp_path / case
    if case == "empty":
        bad.write_text("\n")
    elif case == "emptydir":
        bad.mkdir()
    rc, out, err = _files(capsys, fa, str(bad))
    assert rc == 2 and err == f"error: {bad}: {message}" + err.split(message, 1)[1] and err.count("\n") == 1, err


def test_files_accepts_a_run_folder_holding_metrics_jsonl(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    _write(tmp_path / "run" / "metrics.jsonl", _timed([5.0] * 3))
    rc, out, err = _files(capsys, str(tmp_path / "run"), str(tmp_path / "run" / "metrics.jsonl"))
    assert rc == 0 and "max relative difference 0.00e+00" in out


def test_files_warmup_past_the_last_step_says_there_is_no_steady_step(tmp_path, capsys):
    fa = _write(tmp_path / "a.jsonl", _timed([5.0] * 10))
    rc, out, err = _files(capsys, fa, fa, "--warmup", "100")
    assert rc == 0 and "tokens/s/GPU over all compared steps (--warmup 100 leaves no step after warm-up)" in out
    assert "warning: --warmup 100 leaves no compared step" in err


def test_files_without_timing_columns_show_tokens_per_s_as_n_a(tmp_path, capsys):
    fa = _write(tmp_path / "a.jsonl", _rows([5.0] * 3))
    rc, out, err = _files(capsys, fa, fa, "--warmup", "0")
    assert rc == 0 and "tokens/s/GPU after warm-up: A n/a, B n/a" in out


def test_files_tokens_per_s_only_over_the_compared_steps(tmp_path, capsys):
    fast_tail = [{**r, "throughput(tps)": 1000.0} if r["step"] > 3 else r for r in _timed([5.0] * 10)]
    fa = _write(tmp_path / "a.jsonl", _timed([5.0] * 3))
    fb = _write(tmp_path / "b.jsonl", fast_tail)
    rc, out, err = _files(capsys, fa, fb, "--warmup", "0")
    assert "tokens/s/GPU after warm-up: A 100, B 100" in out


def test_out_creates_its_folder_and_an_unwritable_out_is_one_line(tmp_path, capsys):
    fa = _write(tmp_path / "a.jsonl", _timed([5.0] * 3))
    out = tmp_path / "new" / "dir" / "x.md"
    assert _files(capsys, fa, fa, "--out", str(out))[0] == 0 and "max relative" in out.read_text()
    (tmp_path / "file").write_text("")
    rc, _, err = _files(capsys, fa, fa, "--warmup", "0", "--out", str(tmp_path / "file" / "x.md"))
    assert rc == 2 and err.startswith(f"error: --out {tmp_path / 'file' / 'x.md'}: cannot create its folder")
    assert err.count("\n") == 1


def test_training_mode_checks_out_before_either_run(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    rc = compare_losses.main(["--config", "configs/debug.toml", "--steps", "2",
                              "--out", str(tmp_path / "file" / "x.md")])
    out, err = capsys.readouterr()
    assert rc == 2 and "run folders and logs" not in out, out
    assert err.startswith(f"error: --out {tmp_path / 'file' / 'x.md'}: cannot create its folder"), err


def test_files_refuses_the_training_arguments_it_would_ignore(tmp_path, capsys):
    fa = _write(tmp_path / "a.jsonl", _timed([5.0] * 3))
    rc, out, err = _files(capsys, fa, fa, "--config", "nope.toml", "--a=--bogus")
    assert rc == 2 and err == "error: --config, --a train runs; --files compares saved ones (leave them out)\n"


@pytest.mark.parametrize("flag, key, hint", [
    ("--a", "--training.steps=3", "use --steps"), ("--common", "--checkpoint.enable", "leave it out"),
    ("--b", "--run.dump_folder=/x", "leave it out"), ("--a", "--metrics.log_freq 5", "leave it out"),
    ("--b", "--run.name=z", "leave it out")])
def test_overrides_of_keys_compare_losses_sets_are_refused(flag, key, hint, monkeypatch, capsys):
    monkeypatch.setattr(compare_losses.tempfile, "mkdtemp", _no_process)
    rc = compare_losses.main(["--config", "configs/debug.toml", "--ngpu", "2", f"{flag}={key}"])
    err = capsys.readouterr().err
    name = key.split("=")[0].split()[0]
    assert rc == 2 and err == f"error: {flag} sets {name}, which compare_losses sets itself for both runs" + (
        f": {hint}\n" if hint.startswith("use") else f" ({hint})\n"), err


def test_unclosed_quote_names_the_flag(monkeypatch, capsys):
    monkeypatch.setattr(compare_losses.tempfile, "mkdtemp", _no_process)
    rc = compare_losses.main(["--config", "configs/debug.toml", "--ngpu", "2", "--a=--unclosed 'x"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: --a=\"--unclosed 'x\": No closing quotation") and err.count("\n") == 1, err


TINY = ["--common", "--model.overrides.n_layers=1 --training.seq_len=32 --training.local_batch_size=2 "
        "--lr_scheduler.warmup_steps=1"]


def _no_process(*args, **kwargs):
    raise AssertionError(f"a run was started: {args[0]}")


@pytest.mark.parametrize("which", ["a", "b"])
def test_a_typo_in_either_run_fails_before_any_run_starts(which, monkeypatch, capsys):
    """A bad override is refused in seconds, naming the run and the key, before run A trains."""
    monkeypatch.setattr(compare_losses, "run_group", _no_process)
    monkeypatch.setattr(compare_losses.tempfile, "mkdtemp", _no_process)
    rc = compare_losses.main(["--config", "configs/debug.toml", "--steps", "2", "--ngpu", "2", *TINY,
                              f"--{which}=--training.stepz=3"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith(f"error: run {which} (--{which} plus --common): command line: unknown key "
                          "training.stepz; did you mean training.steps?"), err


# What torchrun prints after a rank exits with a config error: its own traceback and failure table,
# longer than any fixed tail of characters.
TORCHRUN_NOISE = ("Traceback (most recent call last):\n  File \"run.py\", line 1019, in run\n"
                  "    elastic_launch(\n" + "  File \"api.py\", line 383\n" * 60
                  + "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
                  + "=" * 60 + "\ntrainer.train FAILED\n" + "  traceback : To enable traceback see\n" * 20)


@pytest.mark.parametrize("error", [
    "error: command line: unknown key training.stepz; did you mean training.steps?",
    "ValueError: dataset data/shards has 1 tokens, fewer than one sample",
    "[rank0] error: run folder /x/y is in use by another launch",
])
def test_a_failed_run_shows_its_error_line_and_log(error, tmp_path, monkeypatch, capsys):
    if "error: " in error:
        rank_output = f"{error}\n{error.replace('[rank0]', '[rank1]')}\n"  # both ranks print it
    else:
        rank_output = ("Traceback (most recent call last):\n  File \"trainer/train.py\", line 30\n"
                       f"    trainer.train()\n{error}\n")
    assert len(TORCHRUN_NOISE) > 2000

    def failed(cmd, log, **kwargs):  # as run_group with log=: the output goes to the log as printed
        output = "[rank0] INFO starting\n" + rank_output + TORCHRUN_NOISE
        with open(log, "a") as f:
            f.write(output)
        return subprocess.CompletedProcess(cmd, 1, stdout=output, stderr="")

    monkeypatch.setattr(compare_losses, "run_group", failed)
    monkeypatch.setattr(compare_losses.tempfile, "mkdtemp", lambda prefix: str(tmp_path))
    rc = compare_losses.main(["--config", "configs/debug.toml", "--steps", "2", "--ngpu", "2", *TINY])
    err = capsys.readouterr().err
    assert rc == 1
    assert err.startswith(f"error: run a failed (exit 1); its whole output: {tmp_path / 'a.log'}\n"
                          f"the error:\n  {error.removeprefix('[rank0] ')}\nthe last 25 lines of its output:\n"), err
    assert "ChildFailedError" not in err.split("the last 25 lines")[0]
    assert error in (tmp_path / "a.log").read_text()


@pytest.mark.parametrize("b_losses, limit, rc, last", [
    ([5.0, float("nan"), 3.0], None, 1, "FAIL: diverged at step 2 (a null, NaN or inf loss)"),
    ([5.0, 4.4, 3.0], "0.05", 1, "FAIL: max relative difference 1.00e-01 (step 2) > --max-rel-diff 5.00e-02"),
    ([5.0, 4.4, 3.0], "0.2", 0, "PASS: max relative difference 1.00e-01 (step 2) <= --max-rel-diff 2.00e-01"),
])
def test_training_mode_gates_like_files_mode(b_losses, limit, rc, last, tmp_path, monkeypatch, capsys):
    """The two trained runs stood in for by their metrics: the same verdict and exit status."""
    rows = {"a": _timed([5.0, 4.0, 3.0]), "b": _timed(b_losses)}
    monkeypatch.setattr(compare_losses, "run", lambda config, overrides, steps, ngpu, folder, name, timeout:
                        rows[name])
    monkeypatch.setattr(compare_losses.tempfile, "mkdtemp", lambda prefix: str(tmp_path))
    out_file = tmp_path / "report.md"
    argv = ["--config", "configs/debug.toml", "--steps", "3", "--ngpu", "2", *TINY, "--out", str(out_file)]
    assert compare_losses.main(argv + (["--max-rel-diff", limit] if limit else [])) == rc
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == last and out_file.read_text().splitlines()[-1] == last


def test_a_run_stopped_by_sigterm_leaves_its_log_with_the_command(tmp_path, monkeypatch):
    """run_group turns SIGTERM into SystemExit(143) once the ranks are gone: a.log must be there."""
    def stopped(cmd, **kwargs):
        assert "trainer.train" in (tmp_path / "a.log").read_text()  # written before the run starts
        raise SystemExit(143)

    monkeypatch.setattr(compare_losses, "run_group", stopped)
    monkeypatch.setattr(compare_losses.tempfile, "mkdtemp", lambda prefix: str(tmp_path))
    with pytest.raises(SystemExit):
        compare_losses.main(["--config", "configs/debug.toml", "--steps", "2", "--ngpu", "2", *TINY])
    assert "stopped from outside (SIGTERM, exit 143); the output above is all it printed" in (
        tmp_path / "a.log").read_text()
