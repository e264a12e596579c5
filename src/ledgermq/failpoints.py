"""Named crash points at every durability step.

Production code calls ``failpoint("name")``; it costs one dict lookup when nothing is
armed. Tests arm a point to raise (simulating an I/O error) or to kill the process
(``os._exit``) so recovery can be tested phase by phase, as Kafka and bbolt do.

``synced(path, position)`` is the one hook of another kind: the store calls it after each
fsync of a data file (and ``cut=True`` when it cuts one), and, when the process runs with
``LEDGERMQ_FSYNC_LOG=<file>``, it appends "path<TAB>position[<TAB>cut]" to that file, so a
chaos run can make a simulated power loss cost exactly what was never made durable. Unset,
it costs one global read.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ledgermq.clock import SYSTEM_CLOCK

_armed: dict[str, Callable[[], None]] = {}
_fsync_log_fd: int | None = None
FSYNC_LOG_ENV = "LEDGERMQ_FSYNC_LOG"
ENOSPC_IF = "enospc-if:"
STALL_IF = "stall-if:"
CUT_MARK = "\tcut"
STALL_POLL_S = 0.02
STALL_MAX_S = 300.0  # a forgotten flag file must not hang a flush thread for ever
log = logging.getLogger(__name__)


def failpoint(name: str) -> None:
    """Run the action armed for ``name``, if any."""
    action = _armed.get(name)
    if action is not None:
        action()


def is_armed(name: str) -> bool:
    """Whether ``name`` has an action armed: a writer that batches the steps a point falls
    between takes its step-by-step path while one is (a torn write must stay possible)."""
    return name in _armed


def synced(path: object, position: int, *, cut: bool = False) -> None:
    """Record that ``path`` is durable up to byte ``position`` (nothing beyond it is), or with
    ``cut`` that nothing at or beyond ``position`` is any more, when an fsync log is open.
    One unbuffered O_APPEND write: it survives a SIGKILL right after."""
    fd = _fsync_log_fd
    if fd is not None:
        os.write(fd, f"{path}\t{position}{CUT_MARK if cut else ''}\n".encode())


def open_fsync_log(path: str | None) -> None:
    """Start (a path) or stop (None) recording ``synced`` calls."""
    global _fsync_log_fd
    old, _fsync_log_fd = _fsync_log_fd, None
    if old is not None:
        os.close(old)
    if path:
        _fsync_log_fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


def arm(name: str, action: Callable[[], None]) -> None:
    _armed[name] = action


def disarm(name: str) -> None:
    _armed.pop(name, None)


def arm_from_env() -> None:
    """Arm points from LEDGERMQ_FAILPOINTS, e.g. "a=exit,b=exit@20,c=raise" (child processes).

    ``exit@N`` kills the process on the N-th time the point is reached.
    ``enospc-if:PATH`` raises OSError(ENOSPC) each time the point is reached while the file
    PATH exists (a full disk that a test fills and frees by creating and removing PATH; the
    path runs to the end of the item, so it may hold ``@`` and ``=`` but not a comma).
    ``stall-if:PATH`` sleeps while PATH exists (a disk whose fsyncs stall; at most
    STALL_MAX_S per hit). ``LEDGERMQ_FSYNC_LOG=<file>`` opens the fsync log (``synced``).
    """
    open_fsync_log(os.environ.get(FSYNC_LOG_ENV) or None)
    spec = os.environ.get("LEDGERMQ_FAILPOINTS", "")
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, how = item.partition("=")
        if how.startswith(ENOSPC_IF) and len(how) > len(ENOSPC_IF):
            arm(name, _enospc_while(how[len(ENOSPC_IF) :]))
            continue
        if how.startswith(STALL_IF) and len(how) > len(STALL_IF):
            arm(name, _stall_while(how[len(STALL_IF) :]))
            continue
        how, _, nth = how.partition("@")
        if how == "exit":
            arm(name, _exit_on_hit(int(nth or 1)))
        elif how == "raise":
            arm(name, _raise_for(name))
        else:
            raise ValueError(
                f"LEDGERMQ_FAILPOINTS: {item!r} is not name=exit[@N], name=raise, name={ENOSPC_IF}PATH "
                f"or name={STALL_IF}PATH"
            )


def _exit_on_hit(nth: int) -> Callable[[], None]:
    hits = 0

    def action() -> None:
        nonlocal hits
        hits += 1
        if hits >= nth:
            os._exit(137)

    return action


def _raise_for(name: str) -> Callable[[], None]:
    def action() -> None:
        raise OSError(f"failpoint {name} armed")

    return action


def _enospc_while(flag: str) -> Callable[[], None]:
    def action() -> None:
        if os.path.exists(flag):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), flag)

    return action


def _stall_while(flag: str, max_s: float = STALL_MAX_S) -> Callable[[], None]:
    def action() -> None:
        if not os.path.exists(flag):
            return
        deadline = SYSTEM_CLOCK.monotonic() + max_s
        while os.path.exists(flag):
            if SYSTEM_CLOCK.monotonic() >= deadline:
                log.error("failpoint stall: %s still exists after %.0fs; going on", flag, max_s)
                return
            time.sleep(STALL_POLL_S)

    return action


@contextmanager
def armed(name: str, action: Callable[[], None]) -> Iterator[None]:
    arm(name, action)
    try:
        yield
    finally:
        disarm(name)
