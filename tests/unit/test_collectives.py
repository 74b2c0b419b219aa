"""The collectives and the timeout setter under the names the running PyTorch prefers: correct
results and no deprecation warning (torch 2.14 warns on the names 2.11 still needs)."""

from __future__ import annotations

import types
import warnings

import torch
from torch.distributed import ReduceOp

from tests.helpers.one_rank import one_rank_group
from trainer.config.schema import Comm
from trainer.distributed import set_train_timeout
from trainer.parallel.collectives import all_gather_single, reduce_scatter_single


def test_single_tensor_collectives_run_without_deprecation_warnings():
    with one_rank_group(), warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        warnings.simplefilter("error", DeprecationWarning)
        group = torch.distributed.group.WORLD
        out = torch.zeros(4)
        all_gather_single(out, torch.arange(4.0), group=group)
        assert torch.equal(out, torch.arange(4.0))
        dst = torch.zeros(3)
        reduce_scatter_single(dst, torch.full((3,), 2.0), op=ReduceOp.SUM, group=group)
        assert torch.equal(dst, torch.full((3,), 2.0))


def test_the_training_timeout_is_set_without_deprecation_warnings():
    mesh = types.SimpleNamespace(get_all_groups=lambda: [torch.distributed.group.WORLD])
    with one_rank_group(), warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        warnings.simplefilter("error", DeprecationWarning)
        set_train_timeout(Comm(train_timeout_seconds=30), mesh)
