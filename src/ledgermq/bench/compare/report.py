"""Pairs of (system, workload) figures as ratios, a rich table and a JSON document.

A ratio is always "measured / baseline" of the same run: ledgermq / JetStream, and for the
ledgermq-only variants SYNC_MASTER / ASYNC_MASTER and SYNC_FLUSH / ASYNC_FLUSH.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

from ledgermq.bench.compare.model import (
    ASYNC_CAPACITY,
    ASYNC_GATHER,
    BATCH,
    DRAIN_LITE,
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
    LEDGERMQ_SYNC_FLUSH,
    LEDGERMQ_SYNC_MASTER,
    SYNC,
    CompareSettings,
    Figures,
)
from ledgermq.bench.compare.schedule import Results


@dataclass(frozen=True, slots=True)
class Comparison:
    label: str
    system: str
    workload: str
    base_system: str
    base_workload: str


def _pattern_rows(settings: CompareSettings, ours: str, theirs: str, tag: str) -> list[Comparison]:
    """One row per send pattern, ``ours`` against ``theirs`` (``tag`` names the layout)."""
    n = settings.inflight
    rows = [
        Comparison(f"{tag}sync send, 1 sender", ours, SYNC, theirs, SYNC),
        Comparison(f"{tag}{n} sends in flight (tasks awaiting send)", ours, INFLIGHT, theirs, INFLIGHT),
        Comparison(f"{tag}send_async in a loop, then gather", ours, ASYNC_GATHER, theirs, ASYNC_GATHER),
        Comparison(f"{tag}send_async + wait_for_async_capacity", ours, ASYNC_CAPACITY, theirs, ASYNC_CAPACITY),
    ]
    for b in settings.batches:
        label = f"{tag}batch of {b} (JetStream: {b} async publishes, await all acks)"
        rows.append(Comparison(label, ours, BATCH.format(b), theirs, BATCH.format(b)))
    return rows


def comparisons(settings: CompareSettings) -> list[Comparison]:
    """The rows the issue asks for, in table order (rows whose sides did not run are
    dropped by ``build_rows``)."""
    n = settings.inflight
    rows = _pattern_rows(settings, LEDGERMQ, JETSTREAM, "")
    rows += _pattern_rows(settings, LEDGERMQ_DLEDGER, JETSTREAM_R3, "DLedger x3 vs JetStream R3: ")
    rows += _pattern_rows(settings, LEDGERMQ_CONTROLLER, JETSTREAM, "controller mode vs JetStream R1: ")
    rows += [
        Comparison("ledgermq: send_async in a loop / tasks awaiting send", LEDGERMQ, ASYNC_GATHER, LEDGERMQ, INFLIGHT),
        Comparison("ledgermq: send_async + capacity / tasks awaiting send", LEDGERMQ, ASYNC_CAPACITY,
                   LEDGERMQ, INFLIGHT),
        Comparison("ledgermq: blocking facade send / asyncio sync send", LEDGERMQ, FACADE_SYNC, LEDGERMQ, SYNC),
        Comparison("ledgermq: blocking facade send_async in a loop / tasks awaiting send", LEDGERMQ, FACADE_ASYNC,
                   LEDGERMQ, INFLIGHT),
    ]  # fmt: skip
    drain = f"drain {settings.backlog:,} backlog"
    rows += [
        Comparison(f"{drain}: push consumer vs pull", LEDGERMQ, DRAIN_PUSH,
                   JETSTREAM, DRAIN_PULL),
        Comparison(f"{drain}: lite pull vs pull", LEDGERMQ,
                   DRAIN_LITE, JETSTREAM, DRAIN_PULL),
        Comparison("SYNC_MASTER / ASYNC_MASTER: sync send", LEDGERMQ_SYNC_MASTER, SYNC, LEDGERMQ, SYNC),
        Comparison(f"SYNC_MASTER / ASYNC_MASTER: {n} in flight", LEDGERMQ_SYNC_MASTER, INFLIGHT, LEDGERMQ, INFLIGHT),
        Comparison(f"SYNC_FLUSH / ASYNC_FLUSH: {n} in flight", LEDGERMQ_SYNC_FLUSH, INFLIGHT, LEDGERMQ, INFLIGHT),
    ]  # fmt: skip
    return rows


def _ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


def _side(f: Figures) -> dict[str, Any]:
    p50, p99 = f.percentile(50), f.percentile(99)
    return {
        "count": f.count,
        "seconds": round(f.seconds, 4),
        "per_s": round(f.rate, 1),
        "p50_ms": None if p50 is None else round(p50, 3),
        "p99_ms": None if p99 is None else round(p99, 3),
        "server_cpu_s": round(f.cpu_seconds, 3),
        "server_cpu_us_per_msg": round(f.cpu_us_per_msg, 2),
        "client_cpu_us_per_msg": round(f.client_cpu_us_per_msg, 2),
    }


def build_rows(results: Results, settings: CompareSettings) -> list[dict[str, Any]]:
    """One dict per comparison both sides of which ran (a skipped system drops its rows)."""
    rows = []
    for c in comparisons(settings):
        a, b = results.get(c.system, c.workload), results.get(c.base_system, c.base_workload)
        if a is None or b is None:
            continue
        rate_ratio = _ratio(a.rate, b.rate)
        cpu_ratio = _ratio(a.cpu_us_per_msg, b.cpu_us_per_msg)
        rows.append(
            {
                "workload": c.label,
                "system": f"{c.system} ({c.workload})",
                "baseline": f"{c.base_system} ({c.base_workload})",
                "ids": {
                    "system": c.system,
                    "workload": c.workload,
                    "base_system": c.base_system,
                    "base_workload": c.base_workload,
                },
                "measured": _side(a),
                "base": _side(b),
                "rate_ratio": None if rate_ratio is None else round(rate_ratio, 3),
                "cpu_ratio": None if cpu_ratio is None else round(cpu_ratio, 3),
            }
        )
    return rows


def document(results: Results, settings: CompareSettings, command: str, *, date: str | None = None) -> dict[str, Any]:
    """Everything the table shows, for ``--json`` and the plot. Each row's ``ids`` name its
    two sides by the model's system and workload keys, so a reader (the plot's goal table)
    never has to parse the display text; ``date`` is when the run ended (the caller reads
    the clock)."""
    return {
        "settings": {
            "messages": settings.messages,
            "backlog": settings.backlog,
            "size": settings.size,
            "inflight": settings.inflight,
            "batches": list(settings.batches),
            "cycles": settings.cycles,
            "cap_s": settings.cap_s,
            "patterns": list(settings.patterns),
            "layouts": list(settings.layouts),
        },
        "rounds": [
            {"index": r.index, "system": r.system, "load_1m": round(r.load_1m, 2), "seconds": round(r.seconds, 2)}
            for r in results.rounds
        ],
        "rows": build_rows(results, settings),
        "figures": [
            {"system": system, "workload": workload, **_side(f)} for (system, workload), f in results.figures.items()
        ],
        "command": command,
        "date": date,
    }


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _client(side: dict[str, Any]) -> str:
    """Client CPU per message (documents saved before it was measured have none)."""
    v = side.get("client_cpu_us_per_msg")
    return "-" if v is None else f"{v:,.1f}"


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def render(doc: dict[str, Any], console: Console, notes: Sequence[str] = ()) -> None:
    """The comparison table (each comparison a measured row and its baseline row, the
    ratios on the first), the rounds with their load average, then the command line."""
    s = doc["settings"]
    t = Table(title=f"ledgermq bench compare: {s['size']} B messages, {s['messages']:,} per workload and round")
    columns = ("workload", "system", "msgs/s", "p50 ms", "p99 ms", "CPU µs/msg", "client µs/msg", "rate ratio",
               "CPU ratio")  # fmt: skip
    for col in columns:
        t.add_column(col, justify="left" if col in ("workload", "system") else "right")
    for r in doc["rows"]:
        m, b = r["measured"], r["base"]
        t.add_row(
            r["workload"], r["system"], f"{m['per_s']:,.0f}", _ms(m["p50_ms"]), _ms(m["p99_ms"]),
            f"{m['server_cpu_us_per_msg']:,.0f}", _client(m), _x(r["rate_ratio"]), _x(r["cpu_ratio"]),
        )  # fmt: skip
        t.add_row(
            "", r["baseline"], f"{b['per_s']:,.0f}", _ms(b["p50_ms"]), _ms(b["p99_ms"]),
            f"{b['server_cpu_us_per_msg']:,.0f}", _client(b), "", "", end_section=True,
        )  # fmt: skip
    if doc["rows"]:
        console.print(t)
    else:  # one side did not run (--no-nats): the figures alone, without ratios
        figures = Table(title=f"ledgermq bench compare: {s['size']} B messages (no comparison ran)")
        for col in ("system", "workload", "msgs/s", "p50 ms", "p99 ms", "CPU µs/msg", "client µs/msg"):
            figures.add_column(col, justify="left" if col in ("system", "workload") else "right")
        for f in doc["figures"]:
            figures.add_row(
                f["system"], f["workload"], f"{f['per_s']:,.0f}", _ms(f["p50_ms"]), _ms(f["p99_ms"]),
                f"{f['server_cpu_us_per_msg']:,.0f}", _client(f),
            )  # fmt: skip
        console.print(figures)
    rounds = Table(title="rounds (ABBA order)")
    for col in ("round", "system", "load 1m at start", "seconds"):
        rounds.add_column(col)
    for r in doc["rounds"]:
        rounds.add_row(str(r["index"] + 1), r["system"], f"{r['load_1m']:.2f}", f"{r['seconds']:.1f}")
    console.print(rounds)
    for note in notes:
        console.print(note, soft_wrap=True)
    console.print(f"command: {doc['command']}", soft_wrap=True)
