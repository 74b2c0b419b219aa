"""Run training layouts in spawned gloo worlds, one world per world size, and cache the results.

A layout is (world size, config overrides). Every layout of one world size runs in the same spawned
world (spawning and importing torch costs more than the tiny training itself); the single-rank
reference is the layout named "single".
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch

CP_KEY = "--parallelism.context_parallel_degree"
TP_KEY = "--parallelism.tensor_parallel_degree"


def local_batch(world: int, overrides: list[str], global_batch: int = 8) -> int:
    """local_batch_size = global batch / dp, with dp = world / (cp x tp): every layout sees the same
    samples per step."""
    cp = tp = 1
    for o in overrides:
        key, _, value = o.partition("=")
        cp = int(value) if key == CP_KEY else cp
        tp = int(value) if key == TP_KEY else tp
    return global_batch // (world // (cp * tp))


class LayoutRuns:
    """`get(name)` runs (once) every layout of `name`'s world size with `worker`, and returns the
    dict the worker saved for `name`. A failure of the world is raised for each of its layouts.

    worker(rank, world, jobs) gets jobs = [(name, argv, out_file)] and must torch.save one result
    per job from rank 0.
    """

    def __init__(self, tmp: Path, layouts: dict[str, tuple[int, list[str]]], base: list[str],
                 worker: Callable, spawn: Callable):
        self.tmp, self.layouts, self.base, self.worker, self.spawn = tmp, layouts, base, worker, spawn
        self.done: dict[str, object] = {}

    def get(self, name: str) -> dict:
        if name not in self.done:
            world = 1 if name == "single" else self.layouts[name][0]
            names = [name] if world == 1 else [n for n, (w, _) in self.layouts.items() if w == world]
            jobs = []
            for n in names:
                overrides = [] if n == "single" else self.layouts[n][1]
                # A layout that sets its own local batch accumulates gradients up to the global one.
                own = any(o.startswith("--training.local_batch_size=") for o in overrides)
                batch = [] if own else [f"--training.local_batch_size={local_batch(world, overrides)}"]
                argv = self.base + overrides + batch + [f"--run.dump_folder={self.tmp}", f"--run.name={n}"]
                jobs.append((n, argv, str(self.tmp / f"{n}.pt")))
            try:
                self.spawn(world, self.worker, jobs)
            except Exception as exc:  # one failure fails the whole world: report it for each
                for n in names:
                    self.done[n] = exc
            else:
                for n in names:
                    self.done[n] = torch.load(self.tmp / f"{n}.pt")
        if isinstance(self.done[name], Exception):
            raise self.done[name]
        return self.done[name]
