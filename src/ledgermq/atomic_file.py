"""Crash-safe small-file writes: temp file, fsync, rename, fsync of the directory.

A reader after any crash sees either the old content or the new one, never a torn mix,
which RocketMQ's in-place mmap checkpoint cannot promise.

Each write has a temp file of its own (``<name>.<pid>.<n>.tmp``): with one temp name per
target, two writers of the same file (two threads, or two processes given one path) could
write into the same temp file at once and rename a mix of both. A temp file a crash left
behind is removed by the next write of its target in a later process (its writer's pid is
gone); one left by a live process is left alone.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

from ledgermq.failpoints import failpoint

_serial = itertools.count()
_swept: set[Path] = set()  # targets whose leftover temp files this process looked for


def write_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    target = Path(path)
    if target not in _swept:
        _swept.add(target)
        remove_stale_temps(target)
    tmp = target.with_name(f"{target.name}.{os.getpid()}.{next(_serial)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
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


def temp_files(target: Path) -> list[Path]:
    """The temp files of ``write_atomic`` calls for ``target`` that have not been renamed
    (in progress, or left by a crash)."""
    prefix = target.name + "."
    try:
        names = os.listdir(target.parent)
    except FileNotFoundError:
        return []
    ours = (n for n in names if n.startswith(prefix) and n.endswith(".tmp"))
    return [target.with_name(n) for n in ours if _writer_pid(target, n) is not None]


def remove_stale_temps(target: Path) -> None:
    """Remove ``target``'s temp files whose writing process no longer runs."""
    for tmp in temp_files(target):
        pid = _writer_pid(target, tmp.name)
        if pid is not None and pid != os.getpid() and not _alive(pid):
            tmp.unlink(missing_ok=True)


def _writer_pid(target: Path, name: str) -> int | None:
    """The pid in ``<target>.<pid>.<n>.tmp``, or None for any other name."""
    parts = name[len(target.name) + 1 : -len(".tmp")].split(".")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        return None
    return int(parts[0])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True
