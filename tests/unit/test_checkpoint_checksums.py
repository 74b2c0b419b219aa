"""Checksums of checkpoint files (trainer/checkpoint_checksums.py) on one in-process gloo rank.

What a user relies on: every save records a CRC32 of each file it wrote; a resume whose files were
damaged in place (same length, other bytes) stops before loading, naming each file, what was saved
and what was found, and the checkpoint to resume instead, without changing anything on disk; a
folder without (readable) checksums still loads, with a warning naming it; verify_checksums = false
skips the check (and then a flipped byte loads as a wrong weight); every record is in place before
the folder's .metadata; async saves record them in the background; retention and set-aside move or
remove them with their folder; the offline check (python -m trainer.checkpoint_verify) says the same
per file.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import threading
import zlib
from pathlib import Path

import pytest
import torch

import trainer.checkpoint_checksums as checksums_module
from tests.helpers.cpu import cpu_env
from tests.helpers.one_rank import one_rank_group
from tests.unit.test_checkpoint import SlowWriter, captured_warnings, folder_bytes, run, start, steps_on_disk
from trainer.checkpoint_checksums import (
    CHECKSUM_DIR,
    check_files,
    expected_checksums,
    file_crc32,
    share,
)
from trainer.checkpoint_errors import CheckpointReadError, CheckpointWriteError, damage_failure
from trainer.checkpoint_folders import read_metadata, shard_lengths
from trainer.checkpoint_verify import verify

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def process_group():
    with one_rank_group():
        yield


def record(step_dir: Path, rank: int = 0) -> dict:
    return json.loads((step_dir / CHECKSUM_DIR / f"rank-{rank}.json").read_text())


def stamped(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under `folder` with its bytes and modification time."""
    return {name: (data, (folder / name).stat().st_mtime_ns) for name, data in folder_bytes(folder).items()}


def flip_inside(path: Path, data: bytes) -> int:
    """Flip one bit in the middle of `data`'s bytes as stored in file `path` (a tensor's raw bytes),
    keeping the length; returns the offset."""
    content = bytearray(path.read_bytes())
    at = content.find(data)
    assert at >= 0, "the tensor's bytes are not stored raw in the shard"
    at += len(data) // 2
    content[at] ^= 0x01
    path.write_bytes(bytes(content))
    return at


def test_a_save_records_every_file_it_wrote_and_a_resume_verifies_them(tmp_path, caplog):
    t, mgr = start(tmp_path, interval=2)
    with caplog.at_level("INFO", logger="titankit"):
        run(t, 2, mgr)
    mgr.close()
    step = tmp_path / "checkpoint" / "step-2"
    rec = record(step)
    assert (rec["version"], rec["algorithm"], rec["rank"]) == (1, "crc32", 0)
    # DCP's naming, __{rank}_{i}.distcp, is what the record relies on: on this torch, rank 0's
    # record holds exactly the shard files the metadata references, plus .metadata.
    assert set(rec["files"]) == {".metadata", *shard_lengths(read_metadata(step))}
    for name, entry in rec["files"].items():
        data = (step / name).read_bytes()
        assert entry == {"bytes": len(data), "crc32": zlib.crc32(data)}, name
    assert sorted(p.name for p in (step / CHECKSUM_DIR).iterdir()) == ["rank-0.json"]  # no temp file
    assert any("for the checksums of rank 0's 2 files" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with captured_warnings() as warned, caplog.at_level("INFO", logger="titankit"):
        t2, mgr2 = start(tmp_path, interval=2)
    assert t2.step == 2 and warned == []
    assert any("2 files" in r.getMessage() and f"of {step} match their checksums" in r.getMessage()
               for r in caplog.records)
    mgr2.close()


def test_a_flipped_byte_stops_the_resume_naming_the_file_and_changes_nothing(tmp_path):
    t, mgr = start(tmp_path, interval=2, keep_latest_k=0)
    run(t, 6, mgr)
    mgr.close()
    ckpt = tmp_path / "checkpoint"
    step6 = ckpt / "step-6"
    saved = record(step6)["files"]["__0_0.distcp"]
    shard = step6 / "__0_0.distcp"
    flip_inside(shard, t.model[0].weight.detach().numpy().tobytes())
    found = zlib.crc32(shard.read_bytes())
    before = stamped(ckpt)
    with pytest.raises(CheckpointReadError) as err:
        start(tmp_path, interval=2)
    msg = str(err.value)
    n = saved["bytes"]
    assert msg.startswith(
        f"checkpoint {step6} is damaged: 1 of its 2 files differ from the checksums recorded when it "
        f"was saved (__0_0.distcp: saved {n:,} bytes with CRC32 {saved['crc32']:08x}, found {n:,} "
        f"bytes with CRC32 {found:08x}). The run stops before reading it and nothing on disk was "
        "changed."), msg
    assert (f"set checkpoint.load_step = 4 (complete ones in {ckpt}: [2, 4, 6]), or move step-6 "
            f"out of {ckpt}; a relaunch then continues from step-4") in msg
    assert "\n" not in msg
    assert stamped(ckpt) == before  # bytes and modification times, and no file added
    t2, mgr2 = start(tmp_path, interval=2, load_step=4)  # the advice works
    assert t2.step == 4
    mgr2.close()
    with pytest.raises(CheckpointReadError, match=r"is damaged: .*Pass another checkpoint as "
                       r"checkpoint\.initial_load_path$"):
        start(tmp_path / "other", initial_load_path=str(step6))


def test_verify_checksums_false_loads_the_flipped_byte_as_a_wrong_weight(tmp_path, caplog):
    # The user's choice on a slow filesystem: nothing checks the bytes, and DCP loads what is there.
    t, mgr = start(tmp_path, interval=2)
    run(t, 2, mgr)
    mgr.close()
    weight = t.model[0].weight.detach().clone()
    flip_inside(tmp_path / "checkpoint" / "step-2" / "__0_0.distcp", weight.numpy().tobytes())
    with caplog.at_level("INFO", logger="titankit"):
        t2, mgr2 = start(tmp_path, interval=2, verify_checksums=False)
    assert t2.step == 2
    assert not torch.equal(t2.model[0].weight, weight)
    assert any("checkpoint.verify_checksums = false" in r.getMessage() for r in caplog.records)
    mgr2.close()


def test_a_folder_without_checksums_loads_with_one_warning_naming_it(tmp_path):
    t, mgr = start(tmp_path, interval=2)
    run(t, 2, mgr)
    mgr.close()
    step = tmp_path / "checkpoint" / "step-2"
    for p in (step / CHECKSUM_DIR).iterdir():  # as saved before checksums, or cut off before them
        p.unlink()
    (step / CHECKSUM_DIR).rmdir()
    with captured_warnings() as warned:
        t2, mgr2 = start(tmp_path, interval=2)
    assert t2.step == 2
    assert warned == [f"checkpoint {step} has no checksums (.checksums/): it was saved before "
                      "titankit recorded them, or its save stopped before writing them; its 2 files "
                      "are loaded without verifying their bytes"]
    mgr2.close()


@pytest.mark.parametrize("damage", ["truncated", "bad entry", "outside name"])
def test_an_unreadable_checksum_record_is_named_and_its_files_load_unverified(tmp_path, damage):
    t, mgr = start(tmp_path, interval=2)
    run(t, 2, mgr)
    mgr.close()
    step = tmp_path / "checkpoint" / "step-2"
    path = step / CHECKSUM_DIR / "rank-0.json"
    text = path.read_text()
    if damage == "truncated":
        path.write_text(text[: len(text) // 2])
    else:
        rec = json.loads(text)
        if damage == "bad entry":
            rec["files"]["__0_0.distcp"]["crc32"] = "0x1234"
        else:
            rec["files"]["../../elsewhere"] = {"bytes": 1, "crc32": 1}
        path.write_text(json.dumps(rec))
    with captured_warnings() as warned:
        t2, mgr2 = start(tmp_path, interval=2)
    assert t2.step == 2
    assert len(warned) == 2, warned
    assert warned[0].startswith(f"checksum record {path} is unreadable (")
    assert warned[0].endswith("); the files it lists are loaded without verifying their bytes")
    assert warned[1] == (f"checkpoint {step}: 2 of its 2 files have no readable checksum (.metadata, "
                         "__0_0.distcp) and are loaded without verifying their bytes")
    mgr2.close()


def test_files_a_record_leaves_out_are_named_and_the_rest_still_checked(tmp_path):
    # As when one rank's record is missing: what is listed is checked, the rest is named.
    t, mgr = start(tmp_path, interval=2)
    run(t, 2, mgr)
    mgr.close()
    step = tmp_path / "checkpoint" / "step-2"
    path = step / CHECKSUM_DIR / "rank-0.json"
    rec = json.loads(path.read_text())
    del rec["files"][".metadata"]
    path.write_text(json.dumps(rec))
    with captured_warnings() as warned:
        t2, mgr2 = start(tmp_path, interval=2)
    mgr2.close()
    assert warned == [f"checkpoint {step}: 1 of its 2 files have no readable checksum (.metadata) and "
                      "are loaded without verifying their bytes"]
    flip_inside(step / "__0_0.distcp", t.model[0].weight.detach().numpy().tobytes())
    with pytest.raises(CheckpointReadError, match=r"is damaged: 1 of its 1 files differ .*\(__0_0\.distcp: "):
        start(tmp_path, interval=2)


def test_an_async_save_records_its_checksums_off_the_training_thread(tmp_path, monkeypatch):
    threads: list[str] = []
    real = checksums_module.record_files

    def recording(folder, rank, files):
        threads.append(threading.current_thread().name)
        return real(folder, rank, files)

    monkeypatch.setattr(checksums_module, "record_files", recording)
    t, mgr = start(tmp_path, interval=2, async_mode="async", async_writer="thread")
    mgr.writer_factory = SlowWriter
    run(t, 3, mgr)  # step 3 trains while step 2 is written and hashed
    mgr.close()
    main = threading.main_thread().name
    assert threads and all(name != main for name in threads), threads
    step = tmp_path / "checkpoint" / "step-2"
    assert set(record(step)["files"]) == {".metadata", "__0_0.distcp"}
    t2, mgr2 = start(tmp_path, interval=2)
    assert t2.step == 2
    mgr2.close()


class CutOff(RuntimeError):
    """The process ends here (kill -9, a node failure): nothing after this point runs."""


@pytest.mark.parametrize("async_mode", ["disabled", "async"])
def test_a_save_cut_off_as_its_metadata_appears_has_every_checksum_already(tmp_path, async_mode):
    """The earliest moment a folder counts as complete is the rename of DCP's .metadata into place;
    a crash right then (or a rank killed then, its records never written) used to leave a folder
    that resumed unverified with only a warning. Each record is written before .metadata now."""
    t, mgr = start(tmp_path, interval=2, async_mode=async_mode, async_writer="thread")

    class CutOffAfterMetadata(mgr.writer_factory):  # the writer the run uses, stopped right there
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            put_in_place = self.fs.rename

            def rename(path, new_path):
                put_in_place(path, new_path)
                if Path(new_path).name == ".metadata":
                    raise CutOff("the process ends right after .metadata is in place")

            self.fs.rename = rename

    mgr.writer_factory = CutOffAfterMetadata
    with pytest.raises(CheckpointWriteError, match="CutOff"):
        run(t, 2, mgr)
        mgr.close()  # an async save fails here
    step = tmp_path / "checkpoint" / "step-2"
    assert (step / ".metadata").is_file()
    assert set(record(step)["files"]) == {".metadata", *shard_lengths(read_metadata(step))}
    with captured_warnings() as warned:
        t2, mgr2 = start(tmp_path, interval=2)
    assert t2.step == 2 and warned == []  # every file verified: no "loaded without verifying"
    mgr2.close()


def test_retention_and_set_aside_take_the_checksums_with_their_folder(tmp_path):
    t, mgr = start(tmp_path, interval=1, keep_latest_k=2)
    run(t, 5, mgr)
    mgr.close()
    ckpt = tmp_path / "checkpoint"
    assert steps_on_disk(tmp_path) == ["step-4", "step-5"]  # older folders gone, checksums and all
    assert all((ckpt / s / CHECKSUM_DIR / "rank-0.json").is_file() for s in ("step-4", "step-5"))
    t2, mgr2 = start(tmp_path, interval=1, keep_latest_k=2, load_step=4)
    run(t2, 1, mgr2)  # saves step 5 again: the old step-5 is set aside with its record
    mgr2.close()
    aside = ckpt / "step-5.superseded"
    assert set(record(aside)["files"]) == {".metadata", "__0_0.distcp"}
    assert check_files(aside, expected_checksums(aside).files, [".metadata", "__0_0.distcp"]) == []


def test_the_ranks_share_the_files_once_between_them():
    names = [f"__{r}_{i}.distcp" for r in range(3) for i in range(2)] + [".metadata"]
    for world in (1, 2, 3, 4, 8):
        shares = [share(names, r, world) for r in range(world)]
        assert sorted(n for s in shares for n in s) == sorted(names)  # each file once
        for r, mine in enumerate(shares):
            assert mine == [n for i, n in enumerate(sorted(names)) if i % world == r]


def test_file_crc32_reads_in_chunks_and_matches_zlib(tmp_path):
    data = bytes(range(256)) * 1000 + b"tail"
    path = tmp_path / "f"
    path.write_bytes(data)
    assert file_crc32(path, chunk_bytes=4096) == (len(data), zlib.crc32(data))
    path.write_bytes(b"")
    assert file_crc32(path) == (0, 0)


def test_many_damaged_files_are_listed_up_to_eight(tmp_path):
    damaged = [(f"__{r}_0.distcp", "saved 1 bytes with CRC32 00000001, the file is missing")
               for r in range(10)]
    msg = damage_failure(tmp_path, tmp_path / "elsewhere" / "step-3", damaged, 11)
    assert msg.count("the file is missing") == 8 and "; and 2 more)" in msg
    assert "10 of its 11 files differ" in msg


def test_the_offline_check_prints_each_file_and_exits_1_on_damage(tmp_path):
    t, mgr = start(tmp_path, interval=2)
    run(t, 2, mgr)
    mgr.close()
    step = tmp_path / "checkpoint" / "step-2"
    cmd = [sys.executable, "-m", "trainer.checkpoint_verify", str(tmp_path / "checkpoint")]
    proc = subprocess.run(cmd, cwd=ROOT, env=cpu_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("ok         .metadata     ") and lines[1].startswith("ok         __0_0.distcp ")
    assert lines[2].startswith(f"{step}: 2 files, 2 ok, 0 damaged, 0 unverified (")
    flip_inside(step / "__0_0.distcp", t.model[0].weight.detach().numpy().tobytes())
    out = io.StringIO()
    assert verify(step, out) == 1
    assert "DAMAGED    __0_0.distcp  saved " in out.getvalue() and "1 ok, 1 damaged" in out.getvalue()
    (step / CHECKSUM_DIR / "rank-0.json").unlink()
    out = io.StringIO()
    assert verify(step, out) == 1
    assert "UNVERIFIED .metadata     no readable checksum" in out.getvalue()
    assert "0 ok, 0 damaged, 2 unverified" in out.getvalue()
    out = io.StringIO()
    assert verify(tmp_path / "nothing", out) == 1
    assert out.getvalue().startswith(f"error: {tmp_path / 'nothing'}: no such folder")
