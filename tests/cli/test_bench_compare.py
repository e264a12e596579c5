"""``ledgermq bench compare``: the ABBA order, the CPU arithmetic and the report with fake
systems (no server), and one tiny real run of the ledgermq side."""

from __future__ import annotations

import dataclasses
import json
from io import StringIO

import pytest
from rich.console import Console

from ledgermq.bench.compare.model import (
    ASYNC_CAPACITY,
    ASYNC_GATHER,
    DRAIN_PULL,
    DRAIN_PUSH,
    FACADE_ASYNC,
    FACADE_SYNC,
    INFLIGHT,
    JETSTREAM,
    JETSTREAM_R3,
    LEDGERMQ,
    LEDGERMQ_CONTROLLER,
    LEDGERMQ_DLEDGER,
    LEDGERMQ_SYNC_MASTER,
    QUICK,
    SYNC,
    CompareSettings,
    Figures,
    Measured,
    cpu_delta,
    cpu_per_message,
)
from ledgermq.bench.compare.report import build_rows, document, render
from ledgermq.bench.compare.schedule import abba_order, run_schedule


def test_abba_order_two_systems_one_cycle() -> None:
    assert abba_order(["A", "B"]) == ["A", "B", "B", "A"]


def test_abba_order_three_systems_two_cycles() -> None:
    assert abba_order(["A", "B", "C"], 2) == ["A", "B", "C", "C", "B", "A"] * 2


def test_abba_order_needs_a_cycle() -> None:
    with pytest.raises(ValueError):
        abba_order(["A", "B"], 0)


def test_cpu_per_message() -> None:
    assert cpu_per_message(2.0, 1000) == pytest.approx(0.002)
    assert cpu_per_message(1.0, 0) == 0.0


def test_cpu_delta_sums_every_process_and_ignores_gone_ones() -> None:
    before = {1: 10.0, 2: 5.0, 3: 1.0, 4: -1.0}
    after = {1: 10.5, 2: 5.25, 3: -1.0, 4: 7.0}  # 3 died, 4 unreadable before
    assert cpu_delta(before, after) == pytest.approx(0.75)


def test_figures_sum_rounds() -> None:
    f = Figures()
    f.add(Measured(100, 0.5, (1.0,) * 100), 0.01)
    f.add(Measured(100, 1.5, (3.0,) * 100), 0.03)
    assert f.rate == pytest.approx(100.0)
    assert f.cpu_us_per_msg == pytest.approx(200.0)
    assert f.percentile(50) == pytest.approx(2.0)
    assert f.percentile(99) == pytest.approx(3.0)


class FakeRunner:
    """A system that takes ``seconds`` per run and says which rounds it ran in."""

    def __init__(self, name: str, workloads: tuple[str, ...], seconds: float, pid: int, log: list[str]) -> None:
        self.name = name
        self._workloads = workloads
        self.seconds = seconds
        self.pid = pid
        self.log = log

    def workloads(self) -> tuple[str, ...]:
        return self._workloads

    def server_pids(self) -> list[int]:
        return [self.pid]

    def prepare(self, workload: str, round_no: int) -> None:
        self.log.append(f"prep {self.name} {workload} {round_no}")

    def run(self, workload: str, round_no: int) -> Measured:
        self.log.append(f"run {self.name} {workload} {round_no}")
        return Measured(1000, self.seconds, (self.seconds,) * 1000)


def _fake_results(log: list[str]) -> tuple[object, CompareSettings]:
    settings = dataclasses.replace(QUICK, batches=())
    js = FakeRunner(JETSTREAM, (SYNC, INFLIGHT, DRAIN_PULL), 1.0, 1, log)
    ours = FakeRunner(LEDGERMQ, (SYNC, INFLIGHT, DRAIN_PUSH), 0.5, 2, log)
    sm = FakeRunner(LEDGERMQ_SYNC_MASTER, (SYNC,), 2.0, 3, log)
    ticks = {1: 0.0, 2: 0.0, 3: 0.0}

    def cpu(pid: int) -> float:  # between two readings pid 1 used 0.05 s, pid 2 0.025 s, pid 3 0.1 s
        ticks[pid] += {1: 0.05, 2: 0.025, 3: 0.1}[pid]
        return ticks[pid]

    loads = iter(float(i) for i in range(100))
    results = run_schedule([js, ours, sm], 1, cpu=cpu, load=lambda: next(loads))
    return results, settings


def test_schedule_runs_abba_and_prepares_before_each_run() -> None:
    log: list[str] = []
    results, _ = _fake_results(log)
    systems = [r.system for r in results.rounds]  # type: ignore[attr-defined]
    assert systems == [JETSTREAM, LEDGERMQ, LEDGERMQ_SYNC_MASTER, LEDGERMQ_SYNC_MASTER, LEDGERMQ, JETSTREAM]
    assert [r.load_1m for r in results.rounds] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]  # type: ignore[attr-defined]
    assert log[:2] == [f"prep {JETSTREAM} {SYNC} 0", f"run {JETSTREAM} {SYNC} 0"]
    assert log[-1] == f"run {JETSTREAM} {DRAIN_PULL} 5"


def test_rows_carry_ratios_and_cpu_per_message() -> None:
    results, settings = _fake_results([])
    rows = {r["workload"]: r for r in build_rows(results, settings)}  # type: ignore[arg-type]
    sync = rows["sync send, 1 sender"]
    assert sync["measured"]["per_s"] == pytest.approx(2000.0)
    assert sync["base"]["per_s"] == pytest.approx(1000.0)
    assert sync["rate_ratio"] == pytest.approx(2.0)
    assert sync["measured"]["server_cpu_us_per_msg"] == pytest.approx(25.0)  # 2 x 0.025 s / 2000
    assert sync["base"]["server_cpu_us_per_msg"] == pytest.approx(50.0)
    assert sync["cpu_ratio"] == pytest.approx(0.5)
    assert rows["SYNC_MASTER / ASYNC_MASTER: sync send"]["rate_ratio"] == pytest.approx(0.25)
    drain = [r for name, r in rows.items() if "push consumer" in name]
    assert drain and drain[0]["rate_ratio"] == pytest.approx(2.0)
    assert not [name for name in rows if "lite pull" in name or "SYNC_FLUSH" in name]  # neither side ran


def test_document_and_table() -> None:
    results, settings = _fake_results([])
    doc = document(results, settings, "ledgermq bench compare --quick")  # type: ignore[arg-type]
    json.dumps(doc)
    assert len(doc["rounds"]) == 6
    out = StringIO()
    render(doc, Console(file=out, width=250), ["a note"])
    text = out.getvalue()
    assert "2.00x" in text and "command: ledgermq bench compare --quick" in text and "a note" in text


@pytest.mark.timeout(120)
def test_ledgermq_side_tiny_real_run() -> None:
    from ledgermq.bench.compare.run import run_compare

    settings = CompareSettings(messages=200, backlog=200, inflight=16, cap_s=10.0, variants=False, nats=False)
    results = run_compare(settings)
    assert [r.system for r in results.rounds] == [LEDGERMQ, LEDGERMQ]
    for (_system, workload), f in results.figures.items():
        # two rounds of 200; batches round up to whole batches (7 x 32, 4 x 64)
        assert f.count == {"batch32": 448, "batch64": 512}.get(workload, 400), workload
        assert f.rate > 0
    assert results.figures[(LEDGERMQ, SYNC)].percentile(99) is not None
    # with no JetStream side only the ledgermq-only rows compare: the send patterns with each other
    rows = {r["workload"]: r for r in build_rows(results, settings)}
    assert set(rows) == {
        "ledgermq: send_async in a loop / tasks awaiting send",
        "ledgermq: send_async + capacity / tasks awaiting send",
    }
    assert all(r["measured"]["client_cpu_us_per_msg"] > 0 for r in rows.values())
    out = StringIO()
    render(document(results, settings, "ledgermq bench compare --no-nats"), Console(file=out, width=250))
    assert "send_async in a loop / tasks awaiting send" in out.getvalue()


def test_figures_without_any_comparison_are_shown() -> None:
    """Only the sync pattern and no JetStream: no row compares, the figures are shown alone."""
    f = Figures()
    f.add(Measured(100, 0.5, (1.0,) * 100), 0.01, 0.002)
    from ledgermq.bench.compare.schedule import Results

    results = Results(figures={(LEDGERMQ, SYNC): f})
    settings = dataclasses.replace(QUICK, patterns=("sync",))
    out = StringIO()
    render(document(results, settings, "ledgermq bench compare --no-nats"), Console(file=out, width=250))
    text = out.getvalue()
    assert "no comparison ran" in text and SYNC in text and "20.0" in text  # client µs/msg: 0.002 s / 100


def test_send_workloads_follow_the_patterns() -> None:
    settings = dataclasses.replace(QUICK, patterns=("facade-async", "facade", "batch", "gather"), batches=(32,))
    assert settings.send_workloads() == (ASYNC_GATHER, "batch32", FACADE_SYNC, FACADE_ASYNC)


def test_blocking_facade_patterns_tiny_real_run() -> None:
    """The facade's ``send`` and its ``send_async`` fired from one thread, against the pair,
    each compared with the asyncio patterns (JetStream has no blocking client)."""
    from ledgermq.bench.compare.run import run_compare

    settings = CompareSettings(
        messages=200, backlog=200, inflight=16, cap_s=10.0, variants=False, nats=False, drains=False,
        patterns=("sync", "tasks", "facade", "facade-async"),
    )  # fmt: skip
    results = run_compare(settings)
    for workload in (FACADE_SYNC, FACADE_ASYNC):
        f = results.figures[(LEDGERMQ, workload)]
        assert f.count == 400 and f.rate > 0 and f.client_cpu_seconds > 0, workload
        assert f.percentile(50) is not None, workload
    rows = {r["workload"]: r for r in build_rows(results, settings)}
    assert rows["ledgermq: blocking facade send_async in a loop / tasks awaiting send"]["rate_ratio"] > 0
    assert rows["ledgermq: blocking facade send / asyncio sync send"]["rate_ratio"] > 0


def _nats_ready() -> bool:
    import importlib.util
    import shutil

    return shutil.which("nats-server") is not None and importlib.util.find_spec("nats") is not None


@pytest.mark.skipif(not _nats_ready(), reason="needs nats-server on PATH and nats-py (pip install -e '.[bench]')")
@pytest.mark.timeout(240)
def test_layouts_jetstream_r3_dledger_and_controller_short_run() -> None:
    """Three clustered nats-servers (R3) against a 3-node DLedger group, controller mode
    against one nats-server, every pattern but batches once, a handful of messages."""
    from ledgermq.bench.compare.nats_side import ensure_nats_server
    from ledgermq.bench.compare.run import run_compare

    settings = CompareSettings(
        messages=60, backlog=60, inflight=8, cap_s=20.0, cycles=1, patterns=("sync", "gather", "capacity", "facade"),
        layouts=("dledger", "controller"), drains=False,
    )  # fmt: skip
    results = run_compare(settings, nats_binary=ensure_nats_server())
    systems = [r.system for r in results.rounds]
    assert sorted(set(systems)) == sorted([JETSTREAM, JETSTREAM_R3, LEDGERMQ_DLEDGER, LEDGERMQ_CONTROLLER])
    assert len(systems) == 8  # A B C D D C B A
    for system in (LEDGERMQ_DLEDGER, LEDGERMQ_CONTROLLER):
        figures = [results.figures[(system, w)] for w in (SYNC, ASYNC_GATHER, ASYNC_CAPACITY, FACADE_SYNC)]
        assert all(f.count == 120 and f.rate > 0 and f.client_cpu_seconds > 0 for f in figures), system
        assert sum(f.cpu_seconds for f in figures) > 0, system  # read in 10 ms ticks: one run may show none
    assert (JETSTREAM_R3, FACADE_SYNC) not in results.figures  # nats-py has no blocking client
    rows = {r["workload"]: r for r in build_rows(results, settings)}
    r3 = rows["DLedger x3 vs JetStream R3: send_async in a loop, then gather"]
    assert r3["rate_ratio"] > 0 and r3["base"]["client_cpu_us_per_msg"] > 0
    assert rows["controller mode vs JetStream R1: sync send, 1 sender"]["rate_ratio"] > 0


def test_missing_nats_py_says_which_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from ledgermq.bench.compare.nats_side import BenchSetupError, import_nats

    monkeypatch.setitem(sys.modules, "nats", None)
    with pytest.raises(BenchSetupError, match=r"pip install -e '\.\[bench\]'"):
        import_nats()


def test_missing_nats_server_without_apt_fails_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from ledgermq.bench.compare import nats_side

    monkeypatch.setattr(nats_side.shutil, "which", lambda _name: None)
    with pytest.raises(nats_side.BenchSetupError, match="apt-get is not available"):
        nats_side.ensure_nats_server()
