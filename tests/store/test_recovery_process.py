"""Real crashes: a writer process is killed (SIGKILL or a failpoint's _exit) mid-stream.

After each crash the store must hold exactly a contiguous prefix of the numbered
messages, including every one the writer saw acknowledged (at most the one in flight
more), in the commit log and in every consume queue; and it must accept new messages
with queue offsets that continue without gaps. Seeds fix where the kill lands.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ledgermq.config import FlushDiskType
from ledgermq.store.message_store import open_message_store
from tests.conftest import small_config
from tests.store.recovery_helpers import assert_consistent_prefix, commitlog_seqs, put_numbered

WRITER = Path(__file__).with_name("crash_writer.py")


def _spawn(root: Path, flush: str, start: int, count: int, failpoints: str = "") -> subprocess.Popen[str]:
    env = {**os.environ, "LEDGERMQ_FAILPOINTS": failpoints}
    return subprocess.Popen(
        [sys.executable, str(WRITER), str(root), flush, str(start), str(count)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _read_acks(proc: subprocess.Popen[str], stop_after: int | None, timeout: float = 60) -> int:
    """Read acknowledged seqs; SIGKILL the writer after ``stop_after`` acks. Returns all acks."""
    acked = 0
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    try:
        # Keep reading after the kill: acks the writer printed before dying still count.
        for line in proc.stdout:
            if time.monotonic() > deadline:
                raise AssertionError("writer did not finish in time")
            word = line.strip()
            if word.isdigit():
                acked = int(word) + 1
                if stop_after is not None and acked >= stop_after and proc.poll() is None:
                    proc.send_signal(signal.SIGKILL)
            elif word.startswith("error"):
                raise AssertionError(f"writer failed: {word}")
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
    return acked


def _reopen_and_check(root: Path, acked: int) -> None:
    store = open_message_store(small_config(root))
    store.start()
    try:
        assert store.recovery is not None and store.recovery.abnormal
        recovered = len(commitlog_seqs(store))
        assert acked <= recovered <= acked + 1, (acked, recovered)
        assert_consistent_prefix(store, recovered)
        put_numbered(store, recovered, 8)
        assert_consistent_prefix(store, recovered + 8)
    finally:
        store.shutdown()


@pytest.mark.parametrize("flush", [FlushDiskType.ASYNC_FLUSH.value, FlushDiskType.SYNC_FLUSH.value])
@pytest.mark.parametrize("seed", [11, 22, 33])
def test_sigkill_mid_stream_keeps_a_complete_prefix(tmp_path: Path, flush: str, seed: int) -> None:
    kill_after = random.Random(seed).randrange(50, 900)  # several 64 KiB segments in
    proc = _spawn(tmp_path / "s", flush, 0, 100_000)
    acked = _read_acks(proc, kill_after)
    assert proc.returncode == -signal.SIGKILL
    assert acked >= kill_after
    _reopen_and_check(tmp_path / "s", acked)


@pytest.mark.parametrize(
    "failpoint",
    [
        "commitlog.before_append=exit@137",  # record encoded, nothing written
        "mapped_file.before_fsync=exit@5",  # written to the mapping, not yet fsynced
        "mapped_file_queue.before_create=exit@4",  # segment full, next not yet created
        "atomic_file.before_rename=exit@3",  # checkpoint temp written, not yet renamed
    ],
)
def test_crash_at_each_durability_step(tmp_path: Path, failpoint: str) -> None:
    proc = _spawn(tmp_path / "s", "SYNC_FLUSH", 0, 5_000, failpoints=failpoint)
    acked = _read_acks(proc, None)
    assert proc.returncode == 137, proc.stderr.read() if proc.stderr else ""
    _reopen_and_check(tmp_path / "s", acked)


def test_repeated_crashes_accumulate_nothing_wrong(tmp_path: Path) -> None:
    """Crash, recover, write more, crash again: each life continues the same numbering."""
    root = tmp_path / "s"
    rng = random.Random(7)
    total = 0
    for _life in range(3):
        proc = _spawn(root, "ASYNC_FLUSH", total, 100_000)
        acked = _read_acks(proc, total + rng.randrange(30, 300))
        store = open_message_store(small_config(root))
        store.start()
        try:
            total = len(commitlog_seqs(store))
            assert acked <= total <= acked + 1
            assert_consistent_prefix(store, total)
        finally:
            store.shutdown()
