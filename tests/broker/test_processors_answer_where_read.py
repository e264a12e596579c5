"""A broker processor that awaits nothing is a plain function, answered where its frame is
read. Declared ``async def`` it would run from a task and hold one of its connection's
in-flight slots into a later loop turn: a producer whose async sends fill the others (its
budget is the broker's per-connection limit) then had a send refused SYSTEM_BUSY because
its heartbeat came in the same read (tests/broker/test_flush_failures.py shows the race)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import ledgermq.broker.processors as package


def _async_defs_without_await() -> list[str]:
    found = []
    for path in sorted(Path(inspect.getfile(package)).parent.glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.AsyncFunctionDef) and not any(
                isinstance(x, ast.Await | ast.AsyncFor | ast.AsyncWith) for x in ast.walk(node)
            ):
                found.append(f"{path.name}:{node.lineno} {node.name}")
    return found


def test_no_processor_is_async_without_awaiting_something() -> None:
    assert _async_defs_without_await() == [], "answered from a task for nothing: make them plain functions"
