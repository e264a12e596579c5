"""Crash-safe small-file writes: temp file, fsync, rename, fsync of the directory.

A reader after any crash sees either the old content or the new one, never a torn mix,
which RocketMQ's in-place mmap checkpoint cannot promise.
"""

from __future__ import annotations

import os
from pathlib import Path

from ledgermq.failpoints import failpoint


def write_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            failpoint("atomic_file.before_fsync")
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a full disk must not also be left holding half a file
        raise
    failpoint("atomic_file.before_rename")
    os.replace(tmp, target)
    fsync_dir(target.parent)


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Make a rename or create in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
