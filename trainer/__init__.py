"""titankit's trainer. It imports titankit's kernel package by its import name, `kernels`."""
import importlib.util
from pathlib import Path


def _check_kernel_package() -> None:
    """Fail at once, with the fix, when `import kernels` would not load titankit's kernel package.

    Hugging Face's `kernels` distribution has the same import name, and transformers >= 5.25
    installs it. With titankit installed in editable mode, that copy in site-packages comes before
    ours on the import path except when Python starts in the checkout, and every
    `from kernels.fp8 import ...` in trainer's modules would fail with a bare ModuleNotFoundError.
    A non-editable install puts both distributions' files into one site-packages folder, which
    this check cannot tell apart. find_spec of a top-level name imports nothing."""
    ours = Path(__file__).resolve().parent.parent / "kernels"
    if not ours.is_dir():  # trainer without kernels beside it: no layout titankit installs
        return
    spec = importlib.util.find_spec("kernels")
    found = [Path(p).resolve() for p in (spec.submodule_search_locations or [])] if spec else []
    if ours not in found:
        where = spec.origin if spec is not None else "nowhere"
        raise ImportError(
            f"titankit: `import kernels` loads {where}, not titankit's kernel package {ours}. "
            "Hugging Face's `kernels` distribution (installed with transformers >= 5.25) uses the "
            "same import name. Run from the titankit checkout (its root then comes first on the "
            "import path), or remove the other package from this environment: "
            "`pip uninstall kernels` (transformers < 5.25 does not need it)")


_check_kernel_package()
