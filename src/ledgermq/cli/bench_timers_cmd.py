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

from ledgermq.bench.procstat import ProcMemory
from ledgermq.bench.timer_bench import PHASES, TimerBenchReport, TimerBenchSettings, median_load, run_timer_bench

DEFAULTS = TimerBenchSettings()
MIB = 1024 * 1024


def _mib(n: int) -> str:
    return f"{n / MIB:,.1f}"


def _trio(m: ProcMemory) -> str:
    return f"{_mib(m.rss)} / {_mib(m.anon)} / {_mib(m.file)}"


def render(report: TimerBenchReport, console: Console) -> None:
    s = report.settings
    load = median_load(report)
    t = Table(title=f"ledgermq bench timers: timerPrecisionMs={s.precision_ms}, 1-min load median {load:.1f}")
    for col in ("phase", "figure", "value", "goal"):
        t.add_column(col, justify="left" if col in ("phase", "figure") else "right")
    if (m := report.memory) is not None:
        t.add_row("memory", "RSS / anon / file in MiB:", "", "")
        t.add_row("", "(1) idle broker", _trio(m.idle), "")
        t.add_row("", f"(2) idle broker holding {m.pending:,} ordinary messages", _trio(m.ordinary), "")
        t.add_row("", f"    (bodies of {m.ordinary_body} bytes: records as large as (3)'s)", "", "")
        t.add_row("", f"(3) broker with {m.pending:,} pending timers", _trio(m.timers), "")
        t.add_row("", "(3) - (1) anonymous (MiB)", _mib(m.anon_growth), "<= 50")
        t.add_row("", "(3) - (2) RSS (MiB)", _mib(m.rss_over_ordinary), "<= 50")
        t.add_row("", "commit log (2) / (3) (MiB)", f"{_mib(m.ordinary_log_bytes)} / {_mib(m.timers_log_bytes)}", "")
        t.add_row("", "timers sent per second", f"{m.pending / m.send_s:,.0f}", "")
    if (lt := report.lateness) is not None:
        counts = f"{lt.delivered:,} / {lt.timers:,} ({lt.duplicates}, {lt.early})"
        t.add_row("lateness", "delivered / sent (duplicates, early)", counts, "")
        figures = f"{lt.p50_ms:.0f} / {lt.p99_ms:.0f} / {lt.max_ms:.0f}"
        t.add_row("", "ms after the time asked: p50 / p99 / max", figures, f"p99 <= {s.precision_ms + 200}")
        figures = f"{lt.past_step_p50_ms:.0f} / {lt.past_step_p99_ms:.0f} / {lt.past_step_max_ms:.0f}"
        t.add_row("", "ms after the end of its step: p50 / p99 / max", figures, "")
        t.add_row("", "broker CPU per timer delivered (µs)", f"{lt.broker_cpu_us:.0f}", "")
        if lt.sends_overran:
            t.add_row("", "[the sends ended after the first timer's time: a backlog, not lateness]", "", "")
    if (b := report.burst) is not None:
        for r in b.rounds:
            what = f"B (burst, {r.delivered_during:,} delivered)" if r.with_burst else "A (no timers)"
            what += " [came due before the window]" if r.came_due_early else ""
            figures = f"{r.per_s:,.0f}/s, broker busy {r.broker_busy:.0%}, load {r.load:.1f}"
            t.add_row("burst" if r.index == 1 else "", f"round {r.index}: {what}", figures, "")
        ratios = ", ".join(f"{x:.2f}" for x in b.ratios)
        t.add_row("", f"B / A per pair ({b.burst:,} due): median [{ratios}]", f"{b.ratio:.2f}", ">= 0.80")
    console.print(t)


@click.command("timers")
@click.option("--pending", default=DEFAULTS.pending, show_default=True, help="timers held for the memory phase")
@click.option("--lateness-timers", default=DEFAULTS.lateness_timers, show_default=True)
@click.option("--lateness-spread", "lateness_spread_s", default=DEFAULTS.lateness_spread_s, show_default=True,
              help="seconds over which the lateness phase's timers come due")  # fmt: skip
@click.option("--burst", default=DEFAULTS.burst, show_default=True, help="timers due in the same second")
@click.option("--burst-cycles", default=DEFAULTS.burst_cycles, show_default=True,
              help="A B B A rounds (without, with, with, without a burst) this many times")  # fmt: skip
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
    if min(settings.pending, settings.lateness_timers, settings.burst, settings.burst_cycles, settings.senders,
           settings.body_size) < 1:  # fmt: skip
        raise click.BadParameter(
            "--pending, --lateness-timers, --burst, --burst-cycles, --senders and --size must be at least 1"
        )
    err = Console(stderr=True)
    report = run_timer_bench(settings, lambda msg: err.print(f"[dim]timers: {msg}[/]"))
    render(report, Console() if sys.stdout.isatty() else Console(width=140))
    if json_path is not None:
        doc = {
            "settings": {k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(settings).items()},
            "memory": {
                **dataclasses.asdict(report.memory),
                "anon_growth": report.memory.anon_growth,
                "rss_over_ordinary": report.memory.rss_over_ordinary,
            }
            if report.memory
            else None,
            "lateness": dataclasses.asdict(report.lateness) if report.lateness else None,
            "burst": {**dataclasses.asdict(report.burst), "ratios": report.burst.ratios, "ratio": report.burst.ratio}
            if report.burst
            else None,
            "load_median": None if math.isnan(median_load(report)) else median_load(report),
        }
        json_path.write_text(json.dumps(doc, indent=1))
