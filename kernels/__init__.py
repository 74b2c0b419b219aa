"""titankit kernels: Triton and ThunderKittens kernels registered as torch custom ops.

One folder per op family (attention/, fp8/, norm/, ...), each with an eager `reference.py` that is the
spec. This package never imports `trainer`.
"""


class BackendUnavailable(ValueError):
    """A kernel backend that cannot run here or has no kernel for the input (a CUDA-only kernel given
    CPU tensors, a head dim or dtype it was not built for). A ValueError, as every refusal of a
    kernel's inputs is, but its own type: a caller can say "this backend cannot run here" in one
    line for it without hiding a real error as the same."""
