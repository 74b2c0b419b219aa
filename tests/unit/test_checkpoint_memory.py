"""Host memory of async saves: a node that cannot hold the staging copy saves blocking instead of
being killed mid-write, and says why."""

from __future__ import annotations

import torch

from trainer.checkpoint_memory import async_shortfall, filesystem_type, mem_available, mount_of, state_bytes

GB = 10**9


def test_mem_available_reads_kib(tmp_path):
    f = tmp_path / "meminfo"
    f.write_text("MemTotal:       263000000 kB\nMemFree:  1000 kB\nMemAvailable:   250000000 kB\n")
    assert mem_available(f) == 250000000 * 1024
    f.write_text("MemTotal: 5 kB\n")
    assert mem_available(f) is None
    assert mem_available(tmp_path / "missing") is None


def test_filesystem_type_takes_the_longest_mount_point(tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text("/dev/vda / ext4 rw 0 0\ntmpfs /dev/shm tmpfs rw 0 0\n"
                      "tmpfs /dev/shm/my\\040dir tmpfs rw 0 0\n/dev/vdb /data xfs rw 0 0\n")
    assert filesystem_type("/dev/shm/run/checkpoint", mounts) == "tmpfs"
    assert filesystem_type("/dev/shm/my dir/x", mounts) == "tmpfs"
    assert filesystem_type("/dev/shmx/run", mounts) == "ext4"  # a prefix of the name is not a mount
    assert filesystem_type("/data/run", mounts) == "xfs"
    assert filesystem_type("/work/run", mounts) == "ext4"
    assert mount_of("/dev/shm/run", mounts)[:2] == ("/dev/shm", "tmpfs")


def test_state_bytes_counts_nested_tensors():
    state = {"model": {"w": torch.randn(4, 8), "b": torch.randn(8, dtype=torch.bfloat16)},
             "optimizer": {"state": {0: {"exp_avg": torch.randn(4, 8), "step": torch.tensor(3.0)}}},
             "lr_scheduler": b"pickled", "train": {"step": 3}, "list": [torch.randn(2)]}
    assert state_bytes(state) == 4 * 32 + 2 * 8 + 4 * 32 + 4 + 4 * 2


def test_shortfall_counts_every_local_rank_and_ram_folders():
    # Llama-3 8B on 2 ranks: 48 GB of state per rank, 96 GB per node.
    assert async_shortfall(48 * GB, 2, 250 * GB, folder_in_ram=False) is None
    why = async_shortfall(48 * GB, 2, 200 * GB, folder_in_ram=True)  # 192 GB + headroom > 200
    assert why is not None
    assert "96.0 GB of host staging for 2 rank(s)" in why and "RAM-backed" in why
    assert "200.0 GB available" in why
    assert async_shortfall(48 * GB, 2, 100 * GB, folder_in_ram=False) is not None  # 96 + headroom
    assert async_shortfall(48 * GB, 2, None, folder_in_ram=True) is None  # unknown: no verdict


def test_writer_process_needs_shared_memory_and_file_descriptors():
    from trainer.checkpoint_memory import storage_count, writer_process_shortfall

    state = {"model": {"w": torch.zeros(4), "b": torch.zeros(2)}, "optimizer": [torch.zeros(1)] * 3,
             "train": {"step": 3}}
    assert storage_count(state) == 5
    # 48 GB per rank, 2 ranks: 96 GB + 10% must fit in /dev/shm.
    assert writer_process_shortfall(48 * GB, 2, 120 * GB, 900, 20000, 50) is None
    why = writer_process_shortfall(48 * GB, 2, 64 * 10**6, 900, 20000, 50)  # Docker's default 64 MB
    assert why is not None and "/dev/shm" in why and "105.6 GB" in why and "0.1 GB free" in why
    assert "--shm-size" in why
    # One open file per staged tensor: 900 tensors + 50 open + spare do not fit under 1024.
    why = writer_process_shortfall(GB, 1, 120 * GB, 900, 1024, 50)
    assert why is not None and "900 tensors" in why and "1024" in why and "ulimit -n" in why
    assert writer_process_shortfall(GB, 1, 120 * GB, 900, None, 50) is None  # no limit
    assert "no shared-memory filesystem" in writer_process_shortfall(GB, 1, None, 9, None, 0)
