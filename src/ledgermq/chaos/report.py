"""The run's report: rich tables on the console and a JSON summary file."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ledgermq.chaos.checker import Verdict


def render(summary: dict[str, Any], verdict: Verdict, console: Console | None = None) -> None:
    console = console or Console(width=None if sys.stdout.isatty() else 120)
    run = summary["run"]
    console.print(
        f"[bold]ledgermq chaos[/bold] layout={run['layout']} flush={run.get('flush', 'async')} "
        f"seed={run['seed']} cycles={run['cycles']} "
        f"faults={','.join(run['faults'])} duration={run['duration_s']:.1f}s"
    )
    outcomes = ", ".join(f"{k}={v}" for k, v in sorted(verdict.outcomes.items()))
    console.print(f"sends: {verdict.attempts} attempts, {verdict.acked} acknowledged ({outcomes})")
    abandoned = summary.get("client", {}).get("abandoned_attempts", 0)
    console.print(f"attempts abandoned for a new master (each may be a duplicate): {abandoned}")

    t = Table(title="what each source holds")
    cols = (
        "source",
        "records",
        "lost (acked)",
        "corrupt",
        "duplicates",
        "misplaced",
        "order",
        "unacked stored",
        "errors",
    )
    for col in cols:
        t.add_column(col, justify="right" if col != "source" else "left")
    for s in verdict.sources:
        t.add_row(
            s.source, str(s.records), _lost(s.lost, verdict.allowed), _bad(s.corrupt_served), str(len(s.duplicates)),
            _bad(len(s.misplaced)), _bad(len(s.order_violations)), str(s.unacked_stored), str(len(s.errors)),
        )  # fmt: skip
    console.print(t)

    if verdict.divergence:
        d = Table(title="master / replica divergence")
        for col in ("replica", "differing offsets", "replica ahead", "master ahead"):
            d.add_column(col, justify="right" if col != "replica" else "left")
        for x in verdict.divergence:
            d.add_row(x.replica, _bad(len(x.differing)), _bad(x.replica_ahead), str(x.master_ahead))
        console.print(d)

    w = Table(title="unavailability windows per fault (first failed send -> next SEND_OK; >= : never closed)")
    cols = (
        "fault",
        "count",
        "unavailable",
        "not recovered",
        "min s",
        "median s",
        "max s",
        "slowest send s",
        "resume s",
    )
    for col in cols:
        w.add_column(col, justify="right" if col != "fault" else "left")
    for ws in verdict.summaries:
        closed = ws.faults > ws.not_recovered
        cells = [f"{x:.2f}" if closed else "-" for x in (ws.min_s, ws.median_s, ws.max_s)]
        if ws.not_recovered:
            cells[2] = f"[red]>={ws.open_at_least_s:.1f}[/red]"  # a window that never closed
        resume = f"{ws.resume_min_s:.2f} / {ws.resume_median_s:.2f} / {ws.resume_max_s:.2f}" + (
            f" ({ws.not_resumed} none)" if ws.not_resumed else ""
        )
        w.add_row(
            ws.label,
            str(ws.faults),
            str(ws.unavailable),
            _bad(ws.not_recovered),
            *cells,
            f"{ws.slowest_send_s:.2f}",
            resume,
        )
    console.print(w)
    console.print(
        "resume s: min / median / max, from a fault's injection to the first SEND_OK of a send begun after it"
    )
    console.print(f"promise: {verdict.promise}")
    allowed = verdict.lost_allowed
    if allowed:
        console.print(
            f"[yellow]lost, as the flush mode allows through a power loss: {len(allowed)}[/yellow] "
            f"(e.g. {allowed[0]}: {verdict.allowed[allowed[0]]})"
        )
    repairs = summary.get("repairs", {}).get("group", {})
    if repairs:
        console.print("brokers' repair counters: " + ", ".join(f"{k}={v}" for k, v in sorted(repairs.items())))
    for note in verdict.notes:
        console.print(f"note: {note}")
    for s in verdict.sources:
        if real := [seq for seq in s.lost if seq not in verdict.allowed]:
            console.print(f"[red]{s.source}: acknowledged but missing: {real[:10]}[/red]")
        if s.corrupt:
            console.print(f"[red]{s.source}: served with other content: {s.corrupt[:10]}[/red]")
    for line in verdict.unrepaired:
        console.print(f"[red]unrepaired: {line}[/red]")
    for x in verdict.divergence:
        if x.differing:
            console.print(f"[red]divergence: {x.differing[:5]}[/red]")
    status = "[red]FAIL[/red]" if verdict.failed else "[green]PASS[/green]"
    console.print(
        f"{status}: lost={verdict.lost} corrupt_served={verdict.corrupt_served} diverged={verdict.diverged} "
        f"lost_allowed={len(allowed)} unrepaired={len(verdict.unrepaired)} (replay: ledgermq chaos run {run['replay']})"
    )


def _lost(lost: list[int], allowed: dict[int, str]) -> str:
    """Real losses in red, the ones the mode allows beside them."""
    real = sum(1 for seq in lost if seq not in allowed)
    return _bad(real) + (f" (+{len(lost) - real} allowed)" if len(lost) > real else "")


def _bad(n: int) -> str:
    return f"[red]{n}[/red]" if n else "0"


def write_json(path: Path, summary: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=2, sort_keys=False) + "\n")
