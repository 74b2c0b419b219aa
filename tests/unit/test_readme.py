"""The README's first two commands are the project's promise: keep them and CI in step."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].strip() for line in block.strip().splitlines()]


def test_readme_starts_with_exactly_two_commands():
    cmds = _readme_commands()
    assert len(cmds) == 2
    assert "scripts/train.sh" in cmds[0]
    assert "pytest" in cmds[1]


def test_ci_runs_the_readme_test_command():
    test_cmd = _readme_commands()[1].split("&&")[-1].strip()
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_cmd in ci, f"{test_cmd!r} is not what .ci/run runs"
    assert "pip install -q torch==2.13.0" in ci  # the CPU wheel before anything that needs torch
