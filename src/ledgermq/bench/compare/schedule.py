"""The ABBA order: systems alternate so a load that drifts during the run (other work on
the host, page cache, thermal) weighs on every system alike rather than on whichever ran
last."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ledgermq.bench.compare.model import Figures, SystemRunner, cpu_delta
from ledgermq.bench.procstat import cpu_seconds, load_average


def abba_order(systems: Sequence[str], cycles: int = 1) -> list[str]:
    """Forward then backward, ``cycles`` times: A B B A (two systems), A B C C B A (three).
    Every system runs twice per cycle, once in each half."""
    if cycles < 1:
        raise ValueError("cycles must be at least 1")
    forward = list(systems)
    return (forward + forward[::-1]) * cycles


@dataclass(frozen=True, slots=True)
class Round:
    index: int
    system: str
    load_1m: float  # the host's 1-minute load average when the round started
    seconds: float  # wall time of the round, preparation included


@dataclass(slots=True)
class Results:
    rounds: list[Round] = field(default_factory=list)
    figures: dict[tuple[str, str], Figures] = field(default_factory=dict)

    def get(self, system: str, workload: str) -> Figures | None:
        return self.figures.get((system, workload))


def run_schedule(
    runners: Sequence[SystemRunner],
    cycles: int = 1,
    *,
    cpu: Callable[[int], float] = cpu_seconds,
    load: Callable[[], float] = load_average,
    client_cpu: Callable[[], float] = time.process_time,
    clock: Callable[[], float] | None = None,
    on_round: Callable[[Round], None] | None = None,
) -> Results:
    """Every runner's workloads, runner by runner in ABBA order; each workload's server CPU
    (and the client's: this process, every thread) is read around its measured run only
    (its preparation is not counted)."""
    now = clock or time.monotonic
    by_name = {r.name: r for r in runners}
    results = Results()
    for index, name in enumerate(abba_order([r.name for r in runners], cycles)):
        runner = by_name[name]
        started, load_1m = now(), load()
        for workload in runner.workloads():
            runner.prepare(workload, index)
            pids = runner.server_pids()
            before = {pid: cpu(pid) for pid in pids}
            client_before = client_cpu()
            measured = runner.run(workload, index)
            client_used = client_cpu() - client_before
            after = {pid: cpu(pid) for pid in pids}
            figures = results.figures.setdefault((name, workload), Figures())
            figures.add(measured, cpu_delta(before, after), client_used)
        done = Round(index, name, load_1m, now() - started)
        results.rounds.append(done)
        if on_round is not None:
            on_round(done)
    return results
