"""ParallelDims: the one owner of the run's topology.

A validated set of degrees (dp_replicate, dp_shard, cp, tp, ep) that builds one named DeviceMesh
["dp_replicate", "dp_shard", "cp", "tp"] and its flattened views:
  "dp"          = dp_replicate x dp_shard   (data loading: which samples a rank gets)
  "dp_shard_cp" = dp_shard x cp             (FSDP shards parameters over these ranks)
  "dp_cp"       = dp_replicate x dp_shard x cp (the loss is reduced over these)
Expert parallelism borrows its ranks from dp_shard x cp (see trainer/parallel/expert.py); it adds no
mesh axis of its own here, so the dense layout is unchanged by it.

Nothing else in titankit reads WORLD_SIZE or creates process groups for the model.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import torch
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

MESH_AXES = ("dp_replicate", "dp_shard", "cp", "tp")


def env_world_size() -> int:
    """World size as torchrun sets it (1 when run as a plain process, or when it is empty). A stray
    value is a ValueError naming it: int() would give a bare traceback for "abc", and "0" would
    check a config for no ranks at all."""
    text = os.environ.get("WORLD_SIZE", "").strip()
    if text == "":
        return 1
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"WORLD_SIZE={os.environ['WORLD_SIZE']!r} (from the environment): expected an "
                         "integer >= 1")
    return int(text)


def env_rank() -> int:
    return int(os.environ.get("RANK", "0"))


def env_local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


@dataclass
class ParallelDims:
    dp_replicate: int
    dp_shard: int
    cp: int
    tp: int
    ep: int
    world_size: int
    _mesh: DeviceMesh | None = field(default=None, repr=False)
    _views: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._validate()

    @classmethod
    def from_config(cls, par, world_size: int | None = None) -> "ParallelDims":
        """Build from a `[parallelism]` config section; raises ValueError naming the bad degree."""
        return cls(
            dp_replicate=par.data_parallel_replicate_degree,
            dp_shard=par.data_parallel_shard_degree,
            cp=par.context_parallel_degree,
            tp=par.tensor_parallel_degree,
            ep=par.expert_parallel_degree,
            world_size=env_world_size() if world_size is None else world_size,
        )

    def _validate(self) -> None:
        names = {
            "dp_replicate": "parallelism.data_parallel_replicate_degree",
            "cp": "parallelism.context_parallel_degree",
            "tp": "parallelism.tensor_parallel_degree",
            "ep": "parallelism.expert_parallel_degree",
        }
        for attr, key in names.items():
            if getattr(self, attr) < 1:
                raise ValueError(f"{key} = {getattr(self, attr)}: must be >= 1 (1 turns it off)")
        if self.dp_shard == 0 or self.dp_shard < -1:
            raise ValueError(
                f"parallelism.data_parallel_shard_degree = {self.dp_shard}: must be >= 1, or -1 for "
                "the ranks left by the other degrees"
            )
        others = self.dp_replicate * self.cp * self.tp
        if self.dp_shard == -1:
            if self.world_size % others != 0:
                raise ValueError(
                    f"world size {self.world_size} is not divisible by data_parallel_replicate_degree "
                    f"x context_parallel_degree x tensor_parallel_degree = {self.dp_replicate} x "
                    f"{self.cp} x {self.tp} = {others}, so data_parallel_shard_degree = -1 has no "
                    f"valid value; {self._tp_choices()}; or run on a multiple of {others} ranks"
                )
            self.dp_shard = self.world_size // others
        product = others * self.dp_shard
        if product != self.world_size:
            if self.world_size % others == 0:
                fix = (f"set parallelism.data_parallel_shard_degree = {self.world_size // others} "
                       "(or -1 to take the rest)")
            else:
                rest_fits = self.world_size % (self.dp_replicate * self.cp) == 0
                fix = (f"dp_replicate x cp x tp = {others} does not divide it either: "
                       f"{self._tp_choices()}"
                       f"{' (and data_parallel_shard_degree -1, the rest)' if rest_fits else ''}; "
                       f"or run on {product} ranks")
            raise ValueError(
                f"parallel degrees multiply to {product} (dp_replicate {self.dp_replicate} x dp_shard "
                f"{self.dp_shard} x cp {self.cp} x tp {self.tp}) but the world size is "
                f"{self.world_size}; {fix}"
            )
        if self.ep > 1:
            borrow = self.dp_shard * self.cp
            if borrow % self.ep != 0 and (borrow * self.tp) % self.ep != 0:
                raise ValueError(
                    f"parallelism.expert_parallel_degree = {self.ep} must divide dp_shard x cp = "
                    f"{borrow} (or dp_shard x cp x tp = {borrow * self.tp}); valid: "
                    f"{_listing(_divisors(borrow * self.tp))}"
                )

    def _tp_choices(self) -> str:
        """For a message: the tensor_parallel_degree values that fit the world size."""
        w, rest = self.world_size, self.dp_replicate * self.cp
        if w % rest == 0:
            return (f"with dp_replicate and cp unchanged, tensor_parallel_degree can be "
                    f"{_listing(_divisors(w // rest))}")
        return f"no tensor_parallel_degree fits while dp_replicate x cp = {rest} does not divide {w}"

    def validate_for_model(self, n_heads: int, n_kv_heads: int, seq_len: int) -> None:
        """Checks that need the model shape: TP splits heads, CP (load-balanced) splits seq in 2cp."""
        if n_heads % self.tp != 0 or n_kv_heads % self.tp != 0:
            raise ValueError(
                f"parallelism.tensor_parallel_degree = {self.tp} must divide the model's query heads "
                f"({n_heads}) and KV heads ({n_kv_heads}); valid: "
                f"{_listing(_divisors(math.gcd(n_heads, n_kv_heads)))}"
            )
        div = 2 * self.cp * self.tp if self.cp > 1 else self.tp
        if seq_len % div != 0:
            raise ValueError(
                f"training.seq_len = {seq_len} must be divisible by "
                + (f"2 x context_parallel_degree x tensor_parallel_degree = {div}" if self.cp > 1
                   else f"tensor_parallel_degree = {div}")
                + (" (each CP rank holds two load-balanced chunks; SP splits them across TP)"
                   if self.cp > 1 else " (sequence parallelism splits each sequence across TP)")
            )

    # Degrees that other code asks about.
    @property
    def dp(self) -> int:
        return self.dp_replicate * self.dp_shard

    @property
    def fsdp_enabled(self) -> bool:
        return self.dp_shard * self.cp > 1

    @property
    def hsdp_enabled(self) -> bool:
        return self.dp_replicate > 1

    @property
    def tp_enabled(self) -> bool:
        return self.tp > 1

    @property
    def cp_enabled(self) -> bool:
        return self.cp > 1

    @property
    def ep_enabled(self) -> bool:
        return self.ep > 1

    @property
    def dp_cp(self) -> int:
        """Ranks over which the loss (and its token count) is reduced."""
        return self.dp * self.cp

    def build_mesh(self, device_type: str) -> DeviceMesh:
        """Create the one DeviceMesh and its flattened views (needs an initialised process group)."""
        shape = (self.dp_replicate, self.dp_shard, self.cp, self.tp)
        mesh = init_device_mesh(device_type, shape, mesh_dim_names=MESH_AXES)
        # Keep the flattened meshes: slicing them back out of the root mesh is deprecated (2.11).
        self._views = {
            "dp": mesh[("dp_replicate", "dp_shard")]._flatten("dp"),
            "dp_shard_cp": mesh[("dp_shard", "cp")]._flatten("dp_shard_cp"),
            "dp_cp": mesh[("dp_replicate", "dp_shard", "cp")]._flatten("dp_cp"),
        }
        self._mesh = mesh
        return mesh

    def get_mesh(self, name: str | tuple[str, ...]) -> DeviceMesh:
        """A mesh axis ("tp", "cp", ...), a flattened view ("dp", "dp_shard_cp", "dp_cp"), or a tuple
        of axes and views, e.g. ("dp_replicate", "dp_shard_cp") for HSDP."""
        if isinstance(name, str):
            return self._views[name] if name in self._views else self.mesh[name]
        return self.mesh[name]

    @property
    def mesh(self) -> DeviceMesh:
        if self._mesh is None:
            raise RuntimeError("ParallelDims.build_mesh() has not been called")
        return self._mesh

    def __str__(self) -> str:
        return (f"dp_replicate={self.dp_replicate} dp_shard={self.dp_shard} cp={self.cp} "
                f"tp={self.tp} ep={self.ep} (world {self.world_size})")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _listing(values: list[int]) -> str:
    """'1, 2 or 4'."""
    words = [str(v) for v in values]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def device_type() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"
