"""`import trainer` names the fix when another package owns the import name `kernels`.

Hugging Face's `kernels` distribution (a dependency of transformers >= 5.25) has the import name
of titankit's kernel package. Here a stand-in package comes first on the import path, as theirs
does in site-packages for an editable install run outside the checkout."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _import_trainer(cwd: Path, path: list[Path]) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(p) for p in path))
    return subprocess.run([sys.executable, "-c", "import trainer.config"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_a_foreign_kernels_package_stops_the_import_with_the_fix(tmp_path):
    other = tmp_path / "elsewhere" / "kernels"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("FOREIGN = True\n")
    r = _import_trainer(tmp_path, [other.parent, ROOT])
    assert r.returncode != 0
    err = r.stderr.strip().splitlines()[-1]
    assert err.startswith("ImportError: titankit: `import kernels` loads"), r.stderr
    assert str(other / "__init__.py") in err and str(ROOT / "kernels") in err
    assert "pip uninstall kernels" in err


def test_titankit_kernels_first_on_the_path_imports(tmp_path):
    r = _import_trainer(tmp_path, [ROOT])
    assert r.returncode == 0, r.stderr
