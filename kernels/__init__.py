"""titankit kernels: Triton and ThunderKittens kernels registered as torch custom ops.

One folder per op family (attention/, fp8/, norm/, ...), each with an eager `reference.py` that is the
spec. This package never imports `trainer`.
"""
