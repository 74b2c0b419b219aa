"""scripts/train.sh's own arguments: NGPU and NNODES, and the config file given as CONFIG or as
--config (torchrun's form). A stand-in python records what train.sh would run; nothing trains."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

FAKE_PYTHON = """#!/usr/bin/env bash
# Records each call's arguments, one call per line; succeeds without running anything.
echo "$*" >> "$CALLS"
"""


def train_sh(tmp_path: Path, *args: str, **env: str) -> tuple[int, str, list[str]]:
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    calls = tmp_path / "calls.txt"
    calls.write_text("")
    e = {k: v for k, v in os.environ.items() if k not in ("CONFIG", "NGPU", "NNODES")}
    e.update({"PYTHON": str(fake), "CALLS": str(calls), "NGPU": "2", **env})
    proc = subprocess.run(["bash", str(REPO / "scripts" / "train.sh"), *args], env=e, capture_output=True,
                          text=True, timeout=60)
    return proc.returncode, proc.stderr, calls.read_text().splitlines()


def torchrun_call(calls: list[str]) -> str:
    (line,) = [c for c in calls if c.startswith("-m torch.distributed.run")]
    return line


@pytest.mark.parametrize("form", [["--config", "configs/llama3_8b.toml"], ["--config=configs/llama3_8b.toml"]])
def test_config_given_as_an_argument_is_the_runs_file(tmp_path, form):
    """Was: "--config given twice ('configs/debug.toml' and ...)", though the user gave it once."""
    rc, err, calls = train_sh(tmp_path, *form, "--training.steps=2")
    assert rc == 0, err
    check = [c for c in calls if c.startswith("-m trainer.config")]
    assert check == ["-m trainer.config --config configs/llama3_8b.toml --training.steps=2 --world-size 2"]
    assert torchrun_call(calls).endswith("-m trainer.train --config configs/llama3_8b.toml --training.steps=2")


def test_config_from_the_environment_and_the_default(tmp_path):
    assert torchrun_call(train_sh(tmp_path, CONFIG="configs/llama3_70b.toml")[2]).endswith(
        "-m trainer.train --config configs/llama3_70b.toml")
    assert torchrun_call(train_sh(tmp_path)[2]).endswith("-m trainer.train --config configs/debug.toml")
    # The same file both ways is one file.
    rc, _, calls = train_sh(tmp_path, "--config", "configs/debug.toml", CONFIG="configs/debug.toml")
    assert rc == 0 and torchrun_call(calls).endswith("--config configs/debug.toml")


def test_two_different_config_files_are_refused(tmp_path):
    rc, err, calls = train_sh(tmp_path, "--config", "configs/llama3_8b.toml", CONFIG="configs/debug.toml")
    assert rc == 2 and calls == []
    assert err.strip() == ("error: two config files: CONFIG=configs/debug.toml and --config "
                           "configs/llama3_8b.toml; give one (to combine files, write include = [...] in the TOML)")
    rc, err, calls = train_sh(tmp_path, "--config")
    assert (rc, err.strip(), calls) == (2, "error: --config needs a file", [])


@pytest.mark.parametrize("form", [["--config="], ["--config", ""]])
def test_an_empty_config_argument_is_refused(tmp_path, form):
    """Was: --config=$CFG with CFG unset trained configs/debug.toml, the default, without a word."""
    rc, err, calls = train_sh(tmp_path, *form, "--training.steps=2")
    assert (rc, err.strip(), calls) == (2, "error: --config is empty; pass a TOML file", [])


def test_a_config_file_from_the_environment_that_is_not_there_is_named_as_such(tmp_path):
    """Was: "command line: config file 'missing.toml' not found", though it came from CONFIG."""
    rc, err, calls = train_sh(tmp_path, CONFIG="missing.toml")
    assert (rc, calls) == (2, [])
    assert err.strip() == ("error: CONFIG=missing.toml (from the environment): config file not found "
                           f"(looked for {REPO / 'missing.toml'}: a relative path starts at the repository root, "
                           "where train.sh runs)")
    rc, err, calls = train_sh(tmp_path, CONFIG="configs")
    assert (rc, calls) == (2, [])
    assert err.strip() == ("error: CONFIG=configs (from the environment) is a folder, not a TOML file "
                           f"(looked at {REPO / 'configs'}: a relative path starts at the repository root, "
                           "where train.sh runs)")
    rc, err, calls = train_sh(tmp_path, CONFIG=str(tmp_path / "nope.toml"))  # absolute: no note
    assert (rc, err.strip(), calls) == (2, f"error: CONFIG={tmp_path / 'nope.toml'} (from the environment): "
                                           f"config file not found (looked for {tmp_path / 'nope.toml'})", [])


@pytest.mark.parametrize("env", [{"NGPU": "0"}, {"NGPU": "two"}, {"NGPU": "1.5"}, {"NNODES": "x"}])
def test_a_bad_process_count_is_one_line_before_anything_starts(tmp_path, env):
    """Was: an error about --world-size (a flag the user never gave), bash's 'unbound variable', or
    torchrun's traceback after a bash arithmetic error."""
    rc, err, calls = train_sh(tmp_path, "--training.steps=2", **env)
    assert rc == 2 and calls == [], err
    assert err.startswith("error: NGPU=") and "must be a whole number >= 1" in err and len(err.splitlines()) == 1
