"""DESIGN.md principle 1: model code is single-device PyTorch; parallelism is applied from outside."""

import ast
from pathlib import Path

MODELS = Path(__file__).resolve().parents[2] / "trainer" / "models"
FORBIDDEN = ("torch.distributed", "trainer.parallel")


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return names


def test_nothing_under_models_imports_distributed_code():
    files = sorted(MODELS.glob("*.py"))
    assert files, "no model files found"
    bad = {f.name: m for f in files for m in _imports(f) if m.startswith(FORBIDDEN)}
    assert not bad, f"model code imports distributed code: {bad}"
    # Nor reach distributed types by name (comments and docstrings may mention them).
    used = {n.id if isinstance(n, ast.Name) else n.attr
            for f in files for n in ast.walk(ast.parse(f.read_text()))
            if isinstance(n, (ast.Name, ast.Attribute))}
    assert not used & {"DTensor", "DeviceMesh", "distributed"}
