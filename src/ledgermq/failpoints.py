"""Named crash points at every durability step.

Production code calls ``failpoint("name")``; it costs one dict lookup when nothing is
armed. Tests arm a point to raise (simulating an I/O error) or to kill the process
(``os._exit``) so recovery can be tested phase by phase, as Kafka and bbolt do.
"""

from __future__ import annotations

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
    """
    spec = os.environ.get("LEDGERMQ_FAILPOINTS", "")
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, how = item.partition("=")
        how, _, nth = how.partition("@")
        if how == "exit":
            arm(name, _exit_on_hit(int(nth or 1)))
        elif how == "raise":
            arm(name, _raise_for(name))
        else:
            raise ValueError(f"LEDGERMQ_FAILPOINTS: {item!r} is not name=exit[@N] or name=raise")


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


@contextmanager
def armed(name: str, action: Callable[[], None]) -> Iterator[None]:
    arm(name, action)
    try:
        yield
    finally:
        disarm(name)
