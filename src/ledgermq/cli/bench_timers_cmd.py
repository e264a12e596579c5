"""``ledgermq bench timers``: a broker's memory with a million pending timers, how late timers
are with 100,000 pending, and what a burst of timers coming due leaves of send throughput."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from ledgermq.bench.timer_bench import PHASES, TimerBenchReport, TimerBenchSettings, median_load, run_timer_bench

DEFAULTS = TimerBenchSettings()
MIB = 1024 * 1024


def _mib(n: int) -> str:
    return f"{n / MIB:,.1f}"


def render(report: TimerBenchReport, console: Console) -> None:
    s = report.settings
    load = median_load(report)
    t = Table(title=f"ledgermq bench timers: timerPrecisionMs={s.precision_ms}, 1-min load median {load:.1f}")
    for col in ("phase", "figure", "value", "goal"):
        t.add_column(col, justify="left" if col in ("phase", "figure") else "right")
    if (m := report.memory) is not None:
        t.add_row("memory", "idle broker RSS anon / file (MiB)", f"{_mib(m.idle_anon)} / {_mib(m.idle_file)}", "")
        pending = f"{_mib(m.pending_anon)} / {_mib(m.pending_file)}"
        t.add_row("", f"{m.pending:,} pending: RSS anon / file (MiB)", pending, "")
        t.add_row("", "anonymous growth (MiB)", _mib(m.anon_growth), "<= 50")
        t.add_row("", "total growth, page cache included (MiB)", _mib(m.total_growth), "")
        t.add_row("", "timers sent per second", f"{m.pending / m.send_s:,.0f}", "")
    if (lt := report.lateness) is not None:
        counts = f"{lt.delivered:,} / {lt.timers:,} ({lt.duplicates}, {lt.early})"
        t.add_row("lateness", "delivered / sent (duplicates, early)", counts, "")
        figures = f"{lt.p50_ms:.0f} / {lt.p99_ms:.0f} / {lt.max_ms:.0f}"
        t.add_row("", "ms after the time asked: p50 / p99 / max", figures, f"p99 <= {s.precision_ms + 200}")
    if (b := report.burst) is not None:
        rates = f"{b.before_per_s:,.0f} / {b.during_per_s:,.0f} / {b.after_per_s:,.0f}"
        t.add_row("burst", "ordinary sends/s before / during / after", rates, "")
        t.add_row("", f"during / mean(before, after), {b.burst:,} due", f"{b.ratio:.2f}", ">= 0.80")
        t.add_row("", "timers delivered during the window", f"{b.delivered_during:,}", "")
    console.print(t)


@click.command("timers")
@click.option("--pending", default=DEFAULTS.pending, show_default=True, help="timers held for the memory phase")
@click.option("--lateness-timers", default=DEFAULTS.lateness_timers, show_default=True)
@click.option("--lateness-spread", "lateness_spread_s", default=DEFAULTS.lateness_spread_s, show_default=True,
              help="seconds over which the lateness phase's timers come due")  # fmt: skip
@click.option("--burst", default=DEFAULTS.burst, show_default=True, help="timers due in the same second")
@click.option("--window", "window_s", default=DEFAULTS.window_s, show_default=True, help="seconds of each send run")
@click.option("--senders", default=DEFAULTS.senders, show_default=True, help="concurrent senders")
@click.option("--precision-ms", default=DEFAULTS.precision_ms, show_default=True, help="the broker's timerPrecisionMs")
@click.option("--size", "body_size", default=DEFAULTS.body_size, show_default=True, help="bytes per body")
@click.option("--phase", "phases", multiple=True, type=click.Choice(PHASES), help="run only these (default: all)")
@click.option("--data", type=click.Path(path_type=Path, file_okay=False), default=None, help="work dir, kept")
@click.option("--json", "json_path", type=click.Path(path_type=Path, dir_okay=False), default=None)
def timers_bench(**opts: Any) -> None:
    """Timer messages at scale against a broker process: memory with many pending, lateness,
    send throughput while a burst comes due (docs/benchmarks.md)."""
    json_path: Path | None = opts.pop("json_path")
    opts["phases"] = tuple(opts["phases"]) or PHASES
    settings = TimerBenchSettings(**opts)
    if min(settings.pending, settings.lateness_timers, settings.burst, settings.senders, settings.body_size) < 1:
        raise click.BadParameter("--pending, --lateness-timers, --burst, --senders and --size must be at least 1")
    err = Console(stderr=True)
    report = run_timer_bench(settings, lambda msg: err.print(f"[dim]timers: {msg}[/]"))
    render(report, Console() if sys.stdout.isatty() else Console(width=140))
    if json_path is not None:
        doc = {
            "settings": {k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(settings).items()},
            "memory": dataclasses.asdict(report.memory) if report.memory else None,
            "lateness": dataclasses.asdict(report.lateness) if report.lateness else None,
            "burst": {**dataclasses.asdict(report.burst), "ratio": report.burst.ratio} if report.burst else None,
            "load_median": None if math.isnan(median_load(report)) else median_load(report),
        }
        json_path.write_text(json.dumps(doc, indent=1))
