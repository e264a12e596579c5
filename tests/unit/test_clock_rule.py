"""The clock rule (src/ledgermq/clock.py): time is read only through ``ledgermq.clock``. Where
time decides behaviour (timeouts, intervals, deadlines, stored timestamps) the code takes a
``Clock``, so a test can drive it; where work is only measured it reads ``perf_seconds``.

A time read is a call or reference of the ``time`` module's clocks (``time.time``,
``monotonic``, ``perf_counter``, their ``_ns`` forms, ...), one imported from it by name,
an event loop's ``.time()``, and ``datetime``'s ``now``/``utcnow``/``today``. Sleeping is not
a read. Modules may read time directly only when listed below, each for a stated reason."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.unit.test_layering import SRC

TIME_READS = {
    "time",
    "time_ns",
    "monotonic",
    "monotonic_ns",
    "perf_counter",
    "perf_counter_ns",
    "process_time",
    "process_time_ns",
    "thread_time",
    "thread_time_ns",
    "clock_gettime",
    "clock_gettime_ns",
}
NOW_WITHOUT_ARGUMENT = {"localtime", "gmtime", "ctime"}  # with a timestamp they only convert
DATETIME_NOW = {"now", "utcnow", "today"}

# Modules (paths under src/ledgermq; a trailing "/" covers a package) that may read time.
ALLOWED = {
    "clock.py": "the one place that reads the system's clocks for everyone else",
    "bench/": "benchmarks measure real elapsed time of real processes; the figures are the product",
    "chaos/": "the chaos harness drives real child processes for real durations (a fake clock cannot "
    "make them go faster) and stamps its own log; nothing it times runs inside a broker",
    "net/connection.py": "request deadlines are a heap served by loop.call_at timers, and a connection's "
    "idle stamp is compared with them: they must be on the loop's own clock, which tests drive with a "
    "virtual-time loop (tests/virtual_time.py)",
    "net/server.py": "the idle-connection sweep compares connection idle stamps (loop time, see above)",
    "ha/readiness.py": "turns a caller's timeout (on its injected clock) into a loop timer (call_at), "
    "which runs on the loop's time",
    "client/producer/send_budget.py": "the queued async sends' deadlines share one loop.call_at timer, and "
    "the sweep compares them with the loop's time when it fires: loop time, as the connection's deadlines",
    "util/ratelog.py": "util/ is stdlib-only (it cannot import ledgermq.clock); the limiter takes its "
    "clock as a parameter and defaults to time.monotonic",
}


def time_reads(source: str, filename: str = "<source>") -> list[str]:
    """``line: what`` for every time read in ``source``."""
    tree = ast.parse(source, filename=filename)
    time_names = {"time"}  # names the time module is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            time_names.update(a.asname for a in node.names if a.name == "time" and a.asname)
    found: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        what = _read(node, time_names)
        if what:
            found.append((getattr(node, "lineno", 0), getattr(node, "col_offset", 0), what))
    return [f"{line}: {what}" for line, _, what in sorted(found)]


def _read(node: ast.AST, time_names: set[str]) -> str | None:
    if isinstance(node, ast.ImportFrom) and node.module == "time":
        names = [a.name for a in node.names if a.name in TIME_READS]
        return f"from time import {', '.join(names)}" if names else None
    if isinstance(node, ast.Attribute) and _names(node.value, time_names) and node.attr in TIME_READS:
        return f"{ast.unparse(node)}"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        func = node.func
        bare = not node.args and not node.keywords
        if bare and func.attr in NOW_WITHOUT_ARGUMENT and _names(func.value, time_names):
            return f"{ast.unparse(func)}()"
        if bare and func.attr == "time" and not _names(func.value, time_names):
            return f"{ast.unparse(func.value)}.time()"  # an event loop's clock
        if func.attr in DATETIME_NOW and ast.unparse(func.value).split(".")[-1] in ("datetime", "date"):
            return f"{ast.unparse(func)}()"
    return None


def _names(node: ast.expr, names: set[str]) -> bool:
    return isinstance(node, ast.Name) and node.id in names


def _allowed(rel: str) -> bool:
    """An entry ending in ``.py`` names one module; any other is a prefix (a package)."""
    return any(rel == e if e.endswith(".py") else rel.startswith(e) for e in ALLOWED)


def test_time_is_read_only_through_the_clock() -> None:
    bad: dict[str, list[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if not _allowed(rel) and (reads := time_reads(path.read_text(), rel)):
            bad[rel] = reads
    assert not bad, f"time read outside ledgermq.clock (take a Clock, or perf_seconds to measure): {bad}"


def test_the_check_sees_planted_time_reads(tmp_path: Path) -> None:
    planted = tmp_path / "bad.py"
    planted.write_text(
        "import asyncio, time as t\n"
        "import datetime as dt\n"
        "from time import monotonic, sleep\n"
        "def f(loop, clock=t.monotonic):\n"
        "    t.sleep(1)\n"
        "    a = t.perf_counter()\n"
        "    b = asyncio.get_running_loop().time() + loop.time()\n"
        "    return dt.datetime.now(dt.UTC), time_of_day.time(3), t.localtime(0), t.gmtime()\n"
    )
    assert time_reads(planted.read_text()) == [
        "3: from time import monotonic",
        "4: t.monotonic",
        "6: t.perf_counter",
        "7: asyncio.get_running_loop().time()",
        "7: loop.time()",
        "8: dt.datetime.now()",
        "8: t.gmtime()",
    ]
    assert not time_reads("from ledgermq.clock import SYSTEM_CLOCK, perf_seconds\nx = SYSTEM_CLOCK.monotonic()\n")
    assert _allowed("bench/store_bench.py") and _allowed("net/connection.py")
    assert not _allowed("broker/processors/send_answer.py") and not _allowed("net/connection_pool.py")


def test_every_allowance_is_still_needed() -> None:
    """An entry whose module no longer reads time goes: the list names only what must read it."""
    unused = []
    for entry in ALLOWED:
        paths = [SRC / entry] if entry.endswith(".py") else sorted((SRC / entry).rglob("*.py"))
        if not any(p.exists() and time_reads(p.read_text(), entry) for p in paths):
            unused.append(entry)
    assert not unused, f"ALLOWED entries with no time read left: {unused}"
