"""The typed schema of a titankit run: the only place config keys are defined.

Each field's docstring (the string literal under it) is its help text; `python -m trainer.config
--help` prints them. Key names follow torchtitan v0.2.2 where the concept is the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Run:
    name: str = "debug"
    """Run name; the run folder is {dump_folder}/{name}/."""
    dump_folder: str = "./outputs"
    """Parent folder of run folders (config.toml, metrics.jsonl, checkpoint/, wandb/, tb/)."""
    seed: int = 0
    """Seed for weights, data order and every rank's RNG."""
    deterministic: bool = False
    """Deterministic kernels (torch.use_deterministic_algorithms); needed for bitwise resume."""
    deterministic_fill: bool = True
    """Under deterministic: torch writes NaN into every new tensor first
    (torch.utils.deterministic.fill_uninitialized_memory), so that a kernel reading memory it never
    wrote stays reproducible. false skips those writes: 3-4% more tokens/s on an 8-layer Llama-3 8B
    on one H200 (docs/benchmarks.md 4l). The run stays bitwise reproducible while every kernel
    writes what it reads (the resume tests check ours)."""


@dataclass
class Model:
    name: str = "llama3"
    """Model family: llama3 or moe."""
    flavor: str = "debug"
    """Size preset of the family (llama3: debug, 1B, 8B, 70B, 405B; moe: moe_debug, moe_16b)."""
    attention: str = "sdpa"
    """Attention backend: sdpa, triton or thunderkittens."""
    overrides: dict[str, Any] = field(default_factory=dict)
    """Fields of the flavor's model args to replace, e.g. {n_layers = 4} (CLI --model.overrides.n_layers=4)."""


@dataclass
class Training:
    local_batch_size: int = 8
    """Sequences per micro-batch on each data-parallel rank."""
    global_batch_size: int = -1
    """Sequences per optimizer step over all DP ranks; -1 = local_batch_size x dp (no accumulation)."""
    seq_len: int = 256
    """Tokens per sequence."""
    steps: int = 50
    """Optimizer steps to train."""
    max_norm: float = 1.0
    """Gradient clipping by global L2 norm; 0 disables clipping."""
    mixed_precision_param: str = "bfloat16"
    """Parameter dtype inside FSDP compute on CUDA (float32 on CPU always): bfloat16 or float32."""
    mixed_precision_reduce: str = "float32"
    """Gradient reduce-scatter dtype: float32 or bfloat16."""
    gc_freq: int = 50
    """Run Python's garbage collector every this many steps (automatic GC is disabled); 0 = automatic."""


@dataclass
class Parallelism:
    data_parallel_replicate_degree: int = 1
    """HSDP replicate degree (1 = plain FSDP)."""
    data_parallel_shard_degree: int = -1
    """FSDP shard degree; -1 takes the ranks left by the other degrees."""
    tensor_parallel_degree: int = 1
    """Tensor (and sequence) parallel degree."""
    context_parallel_degree: int = 1
    """Context parallel degree (sequence split across ranks)."""
    expert_parallel_degree: int = 1
    """Expert parallel degree (MoE only), taken from the dp_shard x cp ranks."""
    enable_async_tensor_parallel: bool = False
    """Overlap TP communication with matmuls (CUDA, needs compile.enable)."""
    context_parallel_method: str = "ring"
    """Context parallel attention: ring (pass K/V around) or allgather (gather K/V, Llama-3 paper)."""
    fsdp_reshard_after_forward: str = "default"
    """default (reshard all but the last unit), always, or never."""
    fsdp_prefetch: int = 1
    """Blocks whose parameters FSDP all-gathers ahead: 1 = FSDP2's own schedule (the next block);
    N > 1 = the next N in forward and the previous N in backward (more memory, more overlap when
    all-gathers are exposed, e.g. across nodes)."""
    fsdp_grad_sync: str = "auto"
    """With gradient accumulation: every_micro_batch (reduce-scatter after each micro-batch),
    last_micro_batch (keep unsharded gradients in the reduce dtype until the last micro-batch, then
    reduce once: fewer collectives and copies, one unsharded gradient copy more memory per rank),
    every_N_micro_batches (the same, reducing after every N micro-batches and after the last), or auto:
    last_micro_batch where FSDP has a single rank and an fp32 reduce (one GPU, or tensor parallelism
    alone; nothing to communicate, the same sums bit for bit), else every_micro_batch."""
    fsdp_reshard_after_backward: str = "every_micro_batch"
    """With gradient accumulation: every_micro_batch (free the unsharded parameters after each
    micro-batch's backward) or last_micro_batch (keep them until the step's last backward: the
    next micro-batch skips its all-gathers and their copies; with fsdp_reshard_after_forward =
    never this costs no extra peak memory, otherwise one unsharded copy of the model per rank)."""
    fsdp_all_gather: str = "nccl"
    """nccl (NCCL's all-gather kernels) or copy_engine: gather into NCCL symmetric memory under
    NCCL's zero-CTA policy, so that within a node the GPUs' copy engines can move the shards and every
    SM stays with the compute the gathers overlap (CUDA, NCCL >= 2.28; reduce-scatters stay kernels)."""
    fsdp_reduce_scatter: str = "nccl"
    """nccl or symmetric_memory: FSDP's gradient reduce-scatter buffers come from NCCL symmetric
    memory, so that within a node NCCL can run its symmetric-memory kernels (CUDA, NCCL >= 2.28)."""
    enable_loss_parallel: bool = True
    """With TP, compute the loss on the vocab-sharded logits instead of gathering them."""


@dataclass
class ActivationCheckpoint:
    mode: str = "none"
    """none, full, selective, or memory_budget (the compiler picks what to recompute; needs compile)."""
    selective_ac_option: str = "op"
    """With mode=selective: 'op' (save every matmul and attention output, recompute the rest),
    'op_every_other_mm' (torchtitan's per-op rule: every other dense matmul output is recomputed too;
    less memory, more compute) or an integer N (full AC on every N-th block). torchtitan's 'op' is
    titankit's 'op_every_other_mm'."""
    memory_budget: float = 0.5
    """With mode=memory_budget: the share of the no-AC activation memory the compiled blocks may keep
    (1 = recompute nothing, 0 = recompute all it can); the compiler recomputes the cheapest ops first."""


@dataclass
class Compile:
    enable: bool = False
    """torch.compile each transformer block, and the loss unless TP shards the logits."""


@dataclass
class Checkpoint:
    enable: bool = False
    """Save DCP checkpoints into {run folder}/{folder}/step-N/ and resume from them."""
    folder: str = "checkpoint"
    """Checkpoint folder inside the run folder."""
    interval: int = 500
    """Save every this many steps (and at the last step)."""
    keep_latest_k: int = 10
    """Keep this many complete checkpoints (>= 2); 0 keeps all. 10 is torchtitan's default too."""
    async_mode: str = "disabled"
    """disabled (blocking save) or async (save in the background on its own gloo group)."""
    async_writer: str = "thread"
    """With async_mode = async, what writes the staged copy: "thread" (a thread of the training
    process) or "process" (one writer process per rank, started at the first async save, reading the
    copy from shared memory, so the write does not compete with the training loop for the GIL)."""
    initial_load_path: str = ""
    """Start a new run from this checkpoint folder (step-N) when the run has none of its own."""
    initial_load_model_only: bool = True
    """With initial_load_path, load only model weights (not optimizer, data or step)."""
    load_step: int = -1
    """Resume from this step instead of the newest complete one (-1 = newest)."""
    allow_data_change: bool = False
    """A resume (or initial_load_path with initial_load_model_only = false) refuses a checkpoint saved
    with another data.dataset, data.tokenizer, training.seq_len, resolved training.global_batch_size
    or run.seed. true continues anyway, on purpose: the saved step, optimizer and sample index go on
    in the new stream, and a warning lists what changed."""
    verify_checksums: bool = True
    """Before a load reads a checkpoint (a resume, load_step or initial_load_path), check its files
    against the CRC32 checksums recorded when it was saved: damaged bytes stop the run naming each
    file. It reads the whole checkpoint once more, split across the ranks; false skips this on slow
    filesystems, and damage then goes unseen (DCP may fail or load wrong numbers). Saves always
    record the checksums."""


@dataclass
class Metrics:
    log_freq: int = 10
    """Log metrics every this many steps, at the last step, and at each launch's first step (step 1,
    or the first after a resume: its warm-up gets a row of its own)."""
    enable_wandb: bool = False
    """Log to wandb on rank 0 (offline when no API key is configured)."""
    wandb_project: str = "titankit"
    """wandb project name."""
    enable_tensorboard: bool = False
    """Write TensorBoard events into {run folder}/tb/."""
    peak_tflops: float = 0.0
    """Peak bf16 dense TFLOP/s of one device for MFU; 0 = look the device up in the peak table."""
    gpu_sample_interval: float = 0.2
    """Seconds between readings of rank 0's GPU SM clock and power draw (NVML, in a background
    thread), logged per log step as gpu/sm_clock(MHz) and gpu/power(W); 0 = off. CUDA with
    nvidia-ml-py only."""


@dataclass
class Optimizer:
    name: str = "AdamW"
    """Optimizer: AdamW."""
    lr: float = 8e-4
    """Peak learning rate."""
    eps: float = 1e-8
    """Adam epsilon."""
    weight_decay: float = 0.1
    """Decoupled weight decay (not applied to norms and biases)."""
    beta1: float = 0.9
    """Adam beta1."""
    beta2: float = 0.95
    """Adam beta2."""


@dataclass
class LRScheduler:
    warmup_steps: int = 10
    """Linear warm-up steps: step s <= warmup_steps runs at lr x s / warmup_steps (torchtitan's)."""
    decay_type: str = "linear"
    """Decay shape towards lr x min_lr_factor: linear, sqrt (1 - sqrt(progress)) or cosine."""
    decay_ratio: float = 1.0
    """The share of training.steps, at the end, that decays (0 < decay_ratio <= 1); the steps
    between warm-up and that decay stay at lr (warmup-stable-decay, arXiv 2404.06395). 1 (torchtitan's
    unset): decay over all steps after warm-up. Decay steps = round(decay_ratio x steps), at most
    steps - warmup_steps."""
    min_lr_factor: float = 0.0
    """The lr decays towards lr x min_lr_factor (reached one step after the last, as in torchtitan).
    decay_type, decay_ratio and min_lr_factor default to torchtitan v0.2.2's values, so a torchtitan
    TOML that leaves them out means the same decay here. warmup_steps does not (torchtitan: 200): the
    defaults of steps and seq_len are sized for a CPU run of the debug model, and so is this one."""


@dataclass
class Data:
    dataset: str = "embedded"
    """'embedded' (the Python standard library's sources, no download) or a folder of token shards."""
    tokenizer: str = "bytes"
    """'bytes' (built-in byte-level tokenizer) or the path of a HF tokenizer.json."""
    cache_dir: str = "~/.cache/titankit"
    """Where the embedded corpus is tokenized once and cached."""
    document_mask: bool = False
    """Mask attention across documents inside a packed sequence."""


@dataclass
class Float8:
    enable: bool = False
    """Train the large Linears in FP8 (e4m3) with dynamic scaling."""
    recipe: str = "tensorwise"
    """Scaling recipe: tensorwise or rowwise."""
    backend: str = "torch"
    """FP8 GEMM implementation: torch (torch._scaled_mm, emulated on CPU), triton or thunderkittens."""
    filter_fqns: list[str] = field(default_factory=lambda: ["output"])
    """Linears whose names contain any of these stay in bf16."""
    grad_weight_high_precision: bool = False
    """Compute grad_weight in bf16 instead of FP8."""


@dataclass
class Comm:
    init_timeout_seconds: int = 600
    """Collective timeout during start-up and the first step."""
    train_timeout_seconds: int = 120
    """Collective timeout after the first step."""
    trace_buf_size: int = 20000
    """NCCL flight-recorder entries kept per rank (dumped on timeout); 0 disables."""


@dataclass
class Profiling:
    enable_profiling: bool = False
    """Trace profile_steps steps with torch.profiler (CPU + CUDA) and write a time breakdown."""
    profile_start_step: int = 5
    """First traced step (1-based), after compile and warm-up; the step before it warms the profiler."""
    profile_steps: int = 3
    """Number of consecutive steps traced."""
    save_traces_folder: str = "profile_traces"
    """Folder in the run folder; step-N/ (N = last traced step) gets rank{r}_trace.json.gz, summary.md."""
    enable_memory_snapshot: bool = False
    """Record a CUDA memory snapshot over the same steps: rank{r}_memory_snapshot.pickle."""
    record_shapes: bool = False
    """Record operator input shapes in the trace (larger traces, more overhead)."""


@dataclass
class JobConfig:
    run: Run = field(default_factory=Run)
    model: Model = field(default_factory=Model)
    training: Training = field(default_factory=Training)
    parallelism: Parallelism = field(default_factory=Parallelism)
    activation_checkpoint: ActivationCheckpoint = field(default_factory=ActivationCheckpoint)
    compile: Compile = field(default_factory=Compile)
    checkpoint: Checkpoint = field(default_factory=Checkpoint)
    metrics: Metrics = field(default_factory=Metrics)
    optimizer: Optimizer = field(default_factory=Optimizer)
    lr_scheduler: LRScheduler = field(default_factory=LRScheduler)
    data: Data = field(default_factory=Data)
    float8: Float8 = field(default_factory=Float8)
    comm: Comm = field(default_factory=Comm)
    profiling: Profiling = field(default_factory=Profiling)
