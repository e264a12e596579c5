"""Named crash points at every durability step.

Production code calls ``failpoint("name")``; it costs one dict lookup when nothing is
armed. Tests arm a point to raise (simulating an I/O error) or to kill the process
(``os._exit``) so recovery can be tested phase by phase, as Kafka and bbolt do.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_armed: dict[str, Callable[[], None]] = {}


def failpoint(name: str) -> None:
    """Run the action armed for ``name``, if any."""
    action = _armed.get(name)
    if action is not None:
        action()


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
    """
    spec = os.environ.get("LEDGERMQ_FAILPOINTS", "")
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, how = item.partition("=")
        if how.startswith(ENOSPC_IF) and len(how) > len(ENOSPC_IF):
            arm(name, _enospc_while(how[len(ENOSPC_IF) :]))
            continue
        how, _, nth = how.partition("@")
        if how == "exit":
            arm(name, _exit_on_hit(int(nth or 1)))
        elif how == "raise":
            arm(name, _raise_for(name))
        else:
            raise ValueError(f"LEDGERMQ_FAILPOINTS: {item!r} is not name=exit[@N], name=raise or name={ENOSPC_IF}PATH")


ENOSPC_IF = "enospc-if:"


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


@contextmanager
def armed(name: str, action: Callable[[], None]) -> Iterator[None]:
    arm(name, action)
    try:
        yield
    finally:
        disarm(name)
