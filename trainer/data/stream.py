"""The global sample stream: a world-size-independent, seeded order of fixed-length windows.

The concatenated tokens are cut into N = (n_tokens - 1) // seq_len windows of seq_len + 1 tokens
at stride seq_len (window w covers tokens [w * seq_len, w * seq_len + seq_len], so consecutive
windows share one token: the last label of one is the first input of the next).

Global sample i belongs to epoch e = i // N and is window perm_e(i % N), where perm_e is a seeded
pseudo-random permutation of range(N) computed on the fly (a Feistel network with cycle walking:
no O(N) table, identical on every machine and numpy version). Global sample i goes to DP rank
i % dp. A call to `next_batch()` consumes local_batch_size x dp global samples, so the state is
one integer (the next global index) shared by all ranks, and a run may resume on another dp.
"""

from __future__ import annotations

import numpy as np
import torch

_M64 = (1 << 64) - 1
_ROUNDS = 6


def _mix64_int(x: int) -> int:
    """splitmix64's finalizer on a Python int (mod 2**64): used to derive round keys."""
    x &= _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def _mix64(x: np.ndarray) -> np.ndarray:
    """The same finalizer over a uint64 array (numpy array arithmetic wraps mod 2**64 silently)."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def window_permutation(j: np.ndarray, n: int, seed: int, epoch: int) -> np.ndarray:
    """perm(j) for a seeded bijection perm of range(n); j: int array of values in [0, n).

    A balanced Feistel network permutes [0, 4**h) with 4**h >= n; values that land at or beyond
    n are mapped again until they fall inside ("cycle walking"), which keeps it a bijection of
    range(n). Expected work per value is < 4 network passes.
    """
    j = np.asarray(j, dtype=np.int64)
    if n <= 1:
        return np.zeros_like(j)
    half = max(1, ((n - 1).bit_length() + 1) // 2)
    mask = np.uint64((1 << half) - 1)
    base = _mix64_int((seed & _M64) * 0x9E3779B97F4A7C15 + _mix64_int(epoch & _M64))
    keys = [np.uint64(_mix64_int(base + r + 1)) for r in range(_ROUNDS)]

    def feistel(x: np.ndarray) -> np.ndarray:
        left, right = x >> np.uint64(half), x & mask
        for k in keys:
            left, right = right, left ^ (_mix64(right ^ k) & mask)
        return (left << np.uint64(half)) | right

    x = feistel(j.astype(np.uint64))
    out_of_range = x >= np.uint64(n)
    while out_of_range.any():
        x[out_of_range] = feistel(x[out_of_range])
        out_of_range = x >= np.uint64(n)
    return x.astype(np.int64)


class SampleStream:
    """Batches of this DP rank's share of the global sample stream.

    `next_batch()` -> {"tokens": (B, S) int64, "labels": (B, S) int64 (tokens shifted by one),
    "doc_ids": (B, S) int32 (document index inside the row: +1 after each EOS of the input),
    "indices": (B,) int64 (the global sample indices of the rows)} with B = local_batch_size,
    S = seq_len, as torch CPU tensors (pinned when pin_memory=True, for non-blocking copies).
    """

    def __init__(
        self,
        source,
        seq_len: int,
        seed: int,
        dp_rank: int,
        dp_size: int,
        local_batch_size: int,
        pin_memory: bool = False,
    ):
        for key, value in (("seq_len", seq_len), ("dp_size", dp_size), ("local_batch_size", local_batch_size)):
            if not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"SampleStream: {key} must be an integer >= 1, got {value!r}")
        if not 0 <= dp_rank < dp_size:
            raise ValueError(f"SampleStream: dp_rank must lie in [0, dp_size={dp_size}), got {dp_rank}")
        n_tokens = len(source)
        self.n_windows = (n_tokens - 1) // seq_len
        if self.n_windows < 1:
            name = getattr(source, "name", repr(source))
            raise ValueError(
                f"dataset {name} has {n_tokens} tokens, fewer than one sample of seq_len + 1 = {seq_len + 1} "
                f"tokens (training.seq_len = {seq_len}); use a shorter seq_len or a larger dataset"
            )
        self.source = source
        self.seq_len = int(seq_len)
        self.seed = int(seed)
        self.dp_rank = int(dp_rank)
        self.dp_size = int(dp_size)
        self.local_batch_size = int(local_batch_size)
        self.pin_memory = pin_memory
        self.eos_id = int(source.eos_id)
        self.next_index = 0

    @property
    def epoch(self) -> int:
        """The epoch of the next global sample."""
        return self.next_index // self.n_windows

    def windows(self, indices: np.ndarray) -> np.ndarray:
        """Global sample indices (int64 array) -> window numbers in [0, N)."""
        indices = np.asarray(indices, dtype=np.int64)
        epochs, pos = np.divmod(indices, self.n_windows)
        out = np.empty_like(indices)
        for e in np.unique(epochs):  # a batch spans at most two epochs in practice
            sel = epochs == e
            out[sel] = window_permutation(pos[sel], self.n_windows, self.seed, int(e))
        return out

    def rank_indices(self, start: int) -> np.ndarray:
        """This rank's global indices among [start, start + B * dp): those i with i % dp == rank."""
        first = start + (self.dp_rank - start) % self.dp_size
        return np.arange(first, start + self.local_batch_size * self.dp_size, self.dp_size, dtype=np.int64)

    def next_batch(self) -> dict[str, torch.Tensor]:
        indices = self.rank_indices(self.next_index)
        # rows: (B, S + 1) tokens of each window, read with one vectorised gather.
        rows = self.source.gather(self.windows(indices) * self.seq_len, self.seq_len + 1).astype(np.int64)
        tokens, labels = rows[:, :-1], rows[:, 1:]
        is_eos = (tokens == self.eos_id).astype(np.int32)
        # Exclusive cumulative count of EOS: the EOS itself belongs to the document it ends.
        doc_ids = np.cumsum(is_eos, axis=1, dtype=np.int32) - is_eos
        self.next_index += self.local_batch_size * self.dp_size
        batch = {
            "tokens": torch.from_numpy(np.ascontiguousarray(tokens)),
            "labels": torch.from_numpy(np.ascontiguousarray(labels)),
            "doc_ids": torch.from_numpy(doc_ids),
            "indices": torch.from_numpy(indices),
        }
        if self.pin_memory:
            batch = {k: v.pin_memory() for k, v in batch.items()}
        return batch

    def state_dict(self) -> dict[str, int]:
        """{"next_index": int}: identical on every rank; enough to resume on any dp size, as long as
        the dataset, seq_len, seed and global batch stay (a checkpoint records them beside this and
        checks them on resume: trainer/data/identity.py)."""
        return {"next_index": int(self.next_index)}

    def load_state_dict(self, state: dict) -> None:
        value = state.get("next_index") if isinstance(state, dict) else None
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            value = int(value.item())
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0:
            raise ValueError(f"SampleStream.load_state_dict: expected {{'next_index': int >= 0}}, got {state!r}")
        self.next_index = int(value)

    def __repr__(self) -> str:
        return (
            f"SampleStream({getattr(self.source, 'name', '?')}, seq_len={self.seq_len}, windows={self.n_windows}, "
            f"dp {self.dp_rank}/{self.dp_size}, local_batch_size={self.local_batch_size}, next_index={self.next_index})"
        )
