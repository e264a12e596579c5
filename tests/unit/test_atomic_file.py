"""write_atomic: every write has its own temp file, so two writers of one file never mix."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ledgermq import atomic_file
from ledgermq.atomic_file import temp_files, write_atomic
from ledgermq.failpoints import armed


def test_a_second_writer_between_anothers_write_and_rename_does_not_mix_or_fail(tmp_path: Path) -> None:
    # Writer A has written and synced its temp file; writer B writes the same target in
    # full before A renames. With one temp name per target B truncated and renamed A's temp
    # file under it, and A's rename then failed (or renamed B's half-written bytes).
    target = tmp_path / "checkpoint"
    first, second = b"A" * 5000, b"B" * 100
    nested: list[bool] = []

    def other_writer() -> None:
        if not nested:
            nested.append(True)
            write_atomic(target, second)
            assert target.read_bytes() == second

    with armed("atomic_file.before_rename", other_writer):
        write_atomic(target, first)
    assert nested
    assert target.read_bytes() == first  # the last rename wins, whole
    assert temp_files(target) == []


def test_temp_files_of_dead_writers_are_removed_and_live_ones_kept(tmp_path: Path) -> None:
    target = tmp_path / "topics.json"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True)
    dead_pid = int(dead.stdout)
    leftover = tmp_path / f"topics.json.{dead_pid}.0.tmp"  # a crash between write and rename
    leftover.write_bytes(b"half")
    live = tmp_path / f"topics.json.{os.getppid()}.7.tmp"  # another process writing right now
    live.write_bytes(b"in progress")
    unrelated = tmp_path / "topics.json.bak.tmp"
    unrelated.write_bytes(b"not ours")
    atomic_file._swept.discard(target)
    write_atomic(target, b"{}")
    assert not leftover.exists()
    assert live.exists() and unrelated.exists()
    assert target.read_bytes() == b"{}"
    assert temp_files(target) == [live]
