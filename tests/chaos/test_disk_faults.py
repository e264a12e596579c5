"""The file-level faults on sample store directories: the power-loss cut by the fsync log,
bit flips in sealed segments only, segment loss; and the failpoints that feed them."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from ledgermq import failpoints
from ledgermq.chaos import disk
from ledgermq.clock import SkewFile, SystemClock

SEG = 4096


def segment(directory: Path, base: int, data: bytes, size: int = SEG) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{base:020d}"
    path.write_bytes(data + b"\0" * (size - len(data)))
    return path


@pytest.fixture
def fsync_log(tmp_path: Path) -> Path:
    """Record ``failpoints.synced`` calls into a file, as a broker with LEDGERMQ_FSYNC_LOG does."""
    log = tmp_path / "fsync.log"
    failpoints.open_fsync_log(str(log))
    yield log
    failpoints.open_fsync_log(None)


def test_power_loss_keeps_exactly_what_was_synced(tmp_path: Path, fsync_log: Path) -> None:
    store = tmp_path / "store"
    a = segment(store / "commitlog", 0, b"\x01" * SEG)
    b = segment(store / "commitlog", SEG, b"\x02" * 3000)
    cq = segment(store / "consumequeue" / "T" / "0", 0, b"\x03" * 200)
    never = segment(store / "consumequeue" / "T" / "1", 0, b"\x04" * 100)
    other = store / "config" / "topics.json"
    other.parent.mkdir(parents=True)
    other.write_text("{}")
    failpoints.synced(a, SEG)
    failpoints.synced(b, 1000)
    failpoints.synced(b, 2000)  # the last flush wins
    failpoints.synced(cq, 120)

    info = disk.power_loss(store, fsync_log)

    assert a.read_bytes() == b"\x01" * SEG
    assert b.read_bytes() == b"\x02" * 2000 + b"\0" * (SEG - 2000)
    assert cq.read_bytes() == b"\x03" * 120 + b"\0" * (SEG - 120)
    assert never.read_bytes() == b"\0" * SEG  # never synced: all of it gone
    assert all(p.stat().st_size == SEG for p in (a, b, cq, never))
    assert other.read_text() == "{}"  # not a data file
    assert info == {"durable_end": SEG + 2000, "files_cut": 3, "log_bytes_lost": 1000}


def test_a_cut_lowers_the_durable_position_and_a_new_file_starts_at_zero(tmp_path: Path, fsync_log: Path) -> None:
    store = tmp_path / "store"
    a = segment(store / "commitlog", 0, b"\x01" * 3000)
    failpoints.synced(a, 3000)
    failpoints.synced(a, 1000, cut=True)  # recovery cut the tail; what follows was rewritten, not synced
    failpoints.synced(a, 5000, cut=True)  # a cut never makes anything durable
    b = segment(store / "commitlog", SEG, b"\x02" * 100)
    failpoints.synced(b, 100)
    failpoints.synced(b, 0)  # the file was made again
    with open(fsync_log, "a") as f:
        f.write(f"{b}\t12")  # a line torn by the SIGKILL is ignored
    durable = disk.read_fsync_log(fsync_log)
    assert durable == {str(a.resolve()): 1000, str(b.resolve()): 0}
    disk.power_loss(store, fsync_log)
    assert a.read_bytes()[:1000] == b"\x01" * 1000 and a.read_bytes()[1000:].count(0) == SEG - 1000
    assert b.read_bytes() == b"\0" * SEG


def test_dledger_files_are_cut_and_their_data_is_the_log(tmp_path: Path, fsync_log: Path) -> None:
    store = tmp_path / "store"
    data = segment(store / "dledger-n0" / "data", 0, b"\x05" * 500)
    index = segment(store / "dledger-n0" / "index", 0, b"\x06" * 64)
    failpoints.synced(data, 300)
    failpoints.synced(index, 32)
    assert disk.log_dir(store) == store / "dledger-n0" / "data"
    info = disk.power_loss(store, fsync_log)
    assert info["durable_end"] == 300 and info["log_bytes_lost"] == 200
    assert index.read_bytes()[:33] == b"\x06" * 32 + b"\0"


def test_the_real_mapped_file_reports_its_fsyncs(tmp_path: Path, fsync_log: Path) -> None:
    from ledgermq.store.mapped_file import MappedFile

    mf = MappedFile(tmp_path / f"{0:020d}", SEG, create=True)
    try:
        mf.append(b"x" * 100)
        mf.flush()
        mf.append(b"y" * 50)  # written, never synced
        assert disk.read_fsync_log(fsync_log) == {str(mf.path.resolve()): 100}
        mf.truncate_to(40)
        assert disk.read_fsync_log(fsync_log) == {str(mf.path.resolve()): 40}
    finally:
        mf.mm.close()
        os.close(mf.fd)


def test_bit_flips_land_in_sealed_segments_only(tmp_path: Path) -> None:
    store = tmp_path / "store"
    sealed = [segment(store / "commitlog", i * SEG, bytes([i + 1]) * (SEG - 100)) for i in range(3)]
    newest = segment(store / "commitlog", 3 * SEG, b"\x09" * 10)
    assert disk.sealed_segments(store) == sealed
    before = {p: p.read_bytes() for p in [*sealed, newest]}
    target = disk.pick(disk.sealed_segments(store), 0.5)
    assert target == sealed[1]
    flips = disk.flip_bytes(target, disk.flip_picks([0.0, 0.0, 0.999, 0.5, 0.5, 1.0]))
    end = SEG - 100  # the last non-zero byte + 1: flips land before it, never in the zero tail
    assert [f["offset"] for f in flips] == [SEG, SEG + int(0.999 * end), SEG + end // 2]
    after = target.read_bytes()
    changed = [i for i in range(SEG) if after[i] != before[target][i]]
    assert changed == [0, end // 2, int(0.999 * end)]
    assert all(f["new"] != f["old"] for f in flips)
    assert all(p.read_bytes() == before[p] for p in [*sealed, newest] if p != target)


def test_no_sealed_segment_when_only_one_exists(tmp_path: Path) -> None:
    segment(tmp_path / "commitlog", 0, b"\x01")
    assert disk.sealed_segments(tmp_path) == []


def test_segment_loss_deletes_or_truncates(tmp_path: Path) -> None:
    a = segment(tmp_path / "commitlog", 0, b"\x01" * SEG)
    assert disk.lose_segment(a, "truncate", 0.25) == {
        "segment": a.name, "mode": "truncate", "size": SEG, "kept": SEG // 4,
    }  # fmt: skip
    assert a.stat().st_size == SEG // 4
    assert disk.lose_segment(a, "delete", 0.0)["mode"] == "delete" and not a.exists()
    with pytest.raises(ValueError, match="segment-loss mode"):
        disk.lose_segment(segment(tmp_path / "commitlog", SEG, b""), "shred", 0.0)


def test_stall_if_sleeps_while_the_flag_exists(tmp_path: Path) -> None:
    flag = tmp_path / "slow.flag"
    stall = failpoints._stall_while(str(flag))
    t0 = time.monotonic()
    stall()
    assert time.monotonic() - t0 < 0.05  # no flag, no stall
    flag.touch()
    threading.Timer(0.3, flag.unlink).start()
    t0 = time.monotonic()
    stall()
    assert 0.25 <= time.monotonic() - t0 < 2.0


def test_stall_if_is_armed_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    flag = tmp_path / "slow.flag"
    monkeypatch.setenv("LEDGERMQ_FAILPOINTS", f"test.stall={failpoints.STALL_IF}{flag}")
    monkeypatch.delenv(failpoints.FSYNC_LOG_ENV, raising=False)
    try:
        failpoints.arm_from_env()
        flag.touch()
        threading.Timer(0.2, flag.unlink).start()
        t0 = time.monotonic()
        failpoints.failpoint("test.stall")
        assert time.monotonic() - t0 >= 0.15
    finally:
        failpoints.disarm("test.stall")


def test_the_wall_clock_follows_the_skew_file_polled_not_read_per_call(tmp_path: Path) -> None:
    skew_path = tmp_path / "clock-skew"
    skew = SkewFile(str(skew_path), poll_s=0.05)
    clock = SystemClock(skew)
    assert abs(clock.wall_ms() - time.time() * 1000) < 1000  # absent: no skew
    skew_path.write_text("90000\n")
    assert abs(clock.wall_ms() - time.time() * 1000) < 1000  # not read again before the poll interval
    time.sleep(0.06)
    assert abs(clock.wall_ms() - time.time() * 1000 - 90_000) < 1000
    skew_path.write_text("-120000")
    time.sleep(0.06)
    assert abs(clock.wall_ms() - time.time() * 1000 + 120_000) < 1000
    skew_path.write_text("soon")  # malformed: the last offset is kept (and logged)
    time.sleep(0.06)
    assert abs(clock.wall_ms() - time.time() * 1000 + 120_000) < 1000
    skew_path.unlink()
    time.sleep(0.06)
    assert abs(clock.wall_ms() - time.time() * 1000) < 1000
