"""One compare run: every system started, the ABBA schedule, every process stopped.

All systems are up for the whole run (an idle system's timers cost little CPU and it is
not measured then), so no system's start-up falls between two rounds of another. The
ExitStack stops each system's processes by pid whatever ends the run: an error, Ctrl-C.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from ledgermq.bench.compare.ledgermq_side import LedgermqRunner
from ledgermq.bench.compare.model import (
    BATCH,
    DRAIN_LITE,
    DRAIN_PUSH,
    INFLIGHT,
    LEDGERMQ,
    LEDGERMQ_SYNC_FLUSH,
    LEDGERMQ_SYNC_MASTER,
    SYNC,
    CompareSettings,
    SystemRunner,
)
from ledgermq.bench.compare.schedule import Results, Round, run_schedule


def ledgermq_workloads(settings: CompareSettings) -> tuple[str, ...]:
    return (SYNC, INFLIGHT, *(BATCH.format(b) for b in settings.batches), DRAIN_PUSH, DRAIN_LITE)


def run_compare(
    settings: CompareSettings,
    workdir: Path | None = None,
    on_round: Callable[[Round], None] | None = None,
    nats_binary: str | None = None,
) -> Results:
    """Start the systems ``settings`` asks for, run the schedule, stop them all."""
    base = workdir or Path(tempfile.mkdtemp(prefix="ledgermq-bench-compare-"))
    try:
        with contextlib.ExitStack() as stack:
            runners: list[SystemRunner] = []
            if settings.nats:
                from ledgermq.bench.compare.nats_side import JetStreamRunner

                assert nats_binary is not None, "ensure_nats_server() first"
                runners.append(stack.enter_context(JetStreamRunner(settings, nats_binary, base / "nats")))
            systems = [(LEDGERMQ, "ASYNC_MASTER", "ASYNC_FLUSH", ledgermq_workloads(settings))]
            if settings.variants:
                systems += [
                    (LEDGERMQ_SYNC_MASTER, "SYNC_MASTER", "ASYNC_FLUSH", (SYNC, INFLIGHT)),
                    (LEDGERMQ_SYNC_FLUSH, "ASYNC_MASTER", "SYNC_FLUSH", (INFLIGHT,)),
                ]
            for name, role, flush, workloads in systems:
                work = base / name.replace(" ", "-")
                runners.append(stack.enter_context(LedgermqRunner(name, role, flush, settings, workloads, work)))
            return run_schedule(runners, settings.cycles, on_round=on_round)
    finally:
        if workdir is None:
            shutil.rmtree(base, ignore_errors=True)
