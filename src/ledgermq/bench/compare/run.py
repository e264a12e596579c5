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
    DRAIN_LITE,
    DRAIN_PULL,
    DRAIN_PUSH,
    FACADE_ASYNC,
    FACADE_SYNC,
    INFLIGHT,
    JETSTREAM_R3,
    LEDGERMQ,
    LEDGERMQ_CONTROLLER,
    LEDGERMQ_DLEDGER,
    LEDGERMQ_SYNC_FLUSH,
    LEDGERMQ_SYNC_MASTER,
    SYNC,
    CompareSettings,
    SystemRunner,
)
from ledgermq.bench.compare.schedule import Results, Round, run_schedule
from ledgermq.bench.replication_bench import MIB


def ledgermq_workloads(settings: CompareSettings) -> tuple[str, ...]:
    """The master-slave pair's workloads: the chosen send patterns, then the drains."""
    drains = (DRAIN_PUSH, DRAIN_LITE) if settings.drains else ()
    return (*settings.send_workloads(), *drains)


def jetstream_workloads(settings: CompareSettings, drains: bool) -> tuple[str, ...]:
    """JetStream runs every chosen pattern but the blocking facade's (nats-py has none)."""
    sends = tuple(w for w in settings.send_workloads() if w not in (FACADE_SYNC, FACADE_ASYNC))
    return (*sends, DRAIN_PULL) if drains and settings.drains else sends


def run_compare(
    settings: CompareSettings,
    workdir: Path | None = None,
    on_round: Callable[[Round], None] | None = None,
    nats_binary: str | None = None,
) -> Results:
    """Start the systems ``settings`` asks for (``layouts``), run the schedule, stop them all."""
    base = workdir or Path(tempfile.mkdtemp(prefix="ledgermq-bench-compare-"))
    layouts = settings.layouts
    try:
        with contextlib.ExitStack() as stack:
            runners: list[SystemRunner] = []
            if settings.nats:
                from ledgermq.bench.compare.nats_side import JetStreamRunner

                assert nats_binary is not None, "ensure_nats_server() first"
                if "pair" in layouts or "controller" in layouts:
                    js = JetStreamRunner(
                        settings, nats_binary, base / "nats", workloads=jetstream_workloads(settings, "pair" in layouts)
                    )
                    runners.append(stack.enter_context(js))
                if "dledger" in layouts:
                    r3 = JetStreamRunner(
                        settings, nats_binary, base / "nats-r3", name=JETSTREAM_R3, replicas=3,
                        workloads=jetstream_workloads(settings, False),
                    )  # fmt: skip
                    runners.append(stack.enter_context(r3))
            runners += _ledgermq_runners(settings, base, stack)
            return run_schedule(runners, settings.cycles, on_round=on_round)
    finally:
        if workdir is None:
            shutil.rmtree(base, ignore_errors=True)


def _ledgermq_runners(settings: CompareSettings, base: Path, stack: contextlib.ExitStack) -> list[SystemRunner]:
    from ledgermq.bench.controller_bench import ControllerPair
    from ledgermq.bench.replication_bench import DLedgerTrio

    layouts, sends = settings.layouts, settings.send_workloads()
    systems: list[tuple[str, str, str, tuple[str, ...]]] = []
    if "pair" in layouts:
        systems.append((LEDGERMQ, "ASYNC_MASTER", "ASYNC_FLUSH", ledgermq_workloads(settings)))
    if "variants" in layouts and settings.variants:
        systems += [
            (LEDGERMQ_SYNC_MASTER, "SYNC_MASTER", "ASYNC_FLUSH", tuple(w for w in (SYNC, INFLIGHT) if w in sends)),
            (LEDGERMQ_SYNC_FLUSH, "ASYNC_MASTER", "SYNC_FLUSH", tuple(w for w in (INFLIGHT,) if w in sends)),
        ]
    runners: list[SystemRunner] = []
    for name, role, flush, workloads in systems:
        if workloads:
            work = base / name.replace(" ", "-")
            runners.append(stack.enter_context(LedgermqRunner(name, role, flush, settings, workloads, work)))
    groups: list[tuple[str, DLedgerTrio | ControllerPair]] = []
    if "dledger" in layouts:
        groups.append((LEDGERMQ_DLEDGER, DLedgerTrio(base / "dledger", 256 * MIB)))
    if "controller" in layouts:
        groups.append((LEDGERMQ_CONTROLLER, ControllerPair(base / "controller", 256 * MIB)))
    for name, group in groups:
        work = base / name.replace(" ", "-")
        runner = LedgermqRunner(name, "", "", settings, sends, work, group=group)
        runners.append(stack.enter_context(runner))
    return runners
