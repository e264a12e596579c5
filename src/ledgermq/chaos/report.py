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
    """The whole report, in the order a reader asks: what ran, what each source holds,
    whether replicas diverged, how long each fault kept sends out, then what went wrong
    and the verdict with the command that replays the run."""
    console = console or Console(width=None if sys.stdout.isatty() else 120)
    _print_header(console, summary, verdict)
    console.print(_sources_table(verdict))
    if verdict.divergence:
        console.print(_divergence_table(verdict))
    console.print(_windows_table(verdict))
    console.print(
        "resume s: min / median / max, from a fault's injection to the first SEND_OK of a send begun after it"
    )
    _print_notes(console, summary, verdict)
    _print_problems(console, verdict)
    status = "[red]FAIL[/red]" if verdict.failed else "[green]PASS[/green]"
    console.print(
        f"{status}: lost={verdict.lost} corrupt_served={verdict.corrupt_served} diverged={verdict.diverged} "
        f"lost_allowed={len(verdict.lost_allowed)} unrepaired={len(verdict.unrepaired)} "
        f"incomplete={len(verdict.incomplete)} "
        f"(replay: ledgermq chaos run {summary['run']['replay']})"
    )


def _print_header(console: Console, summary: dict[str, Any], verdict: Verdict) -> None:
    """The run's parameters and the sends it made."""
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


def _table(title: str, cols: tuple[str, ...]) -> Table:
    """A table whose first column (a name) is left-aligned and the rest (numbers) right."""
    t = Table(title=title)
    for i, col in enumerate(cols):
        t.add_column(col, justify="left" if i == 0 else "right")
    return t


def _sources_table(verdict: Verdict) -> Table:
    t = _table(
        "what each source holds",
        (
            "source",
            "records",
            "lost (acked)",
            "corrupt",
            "duplicates",
            "misplaced",
            "order",
            "unacked stored",
            "errors",
        ),
    )
    for s in verdict.sources:
        t.add_row(
            s.source, str(s.records), _lost(s.lost, verdict.allowed), _bad(s.corrupt_served), str(len(s.duplicates)),
            _bad(len(s.misplaced)), _bad(len(s.order_violations)), str(s.unacked_stored), str(len(s.errors)),
        )  # fmt: skip
    return t


def _divergence_table(verdict: Verdict) -> Table:
    d = _table("master / replica divergence", ("replica", "differing offsets", "replica ahead", "master ahead"))
    for x in verdict.divergence:
        d.add_row(x.replica, _bad(len(x.differing)), _bad(x.replica_ahead), str(x.master_ahead))
    return d


def _windows_table(verdict: Verdict) -> Table:
    """Per fault kind: how long sends failed, and how soon a new send got through."""
    w = _table(
        "unavailability windows per fault (first failed send -> next SEND_OK; >= : never closed)",
        ("fault", "count", "unavailable", "not recovered", "min s", "median s", "max s", "slowest send s", "resume s"),
    )
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
    return w


def _print_notes(console: Console, summary: dict[str, Any], verdict: Verdict) -> None:
    """The promise checked, losses the flush mode allows, repair counters, checker notes."""
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


def _print_problems(console: Console, verdict: Verdict) -> None:
    """The first few of each failure, in red, so a FAIL says what to look at."""
    for s in verdict.sources:
        if real := [seq for seq in s.lost if seq not in verdict.allowed]:
            console.print(f"[red]{s.source}: acknowledged but missing: {real[:10]}[/red]")
        if s.corrupt:
            console.print(f"[red]{s.source}: served with other content: {s.corrupt[:10]}[/red]")
    for line in verdict.unrepaired:
        console.print(f"[red]unrepaired: {line}[/red]")
    for line in verdict.incomplete:
        console.print(f"[red]incomplete: {line}[/red]")
    for x in verdict.divergence:
        if x.differing:
            console.print(f"[red]divergence: {x.differing[:5]}[/red]")


def _lost(lost: list[int], allowed: dict[int, str]) -> str:
    """Real losses in red, the ones the mode allows beside them."""
    real = sum(1 for seq in lost if seq not in allowed)
    return _bad(real) + (f" (+{len(lost) - real} allowed)" if len(lost) > real else "")


def _bad(n: int) -> str:
    return f"[red]{n}[/red]" if n else "0"


def write_json(path: Path, summary: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=2, sort_keys=False) + "\n")
