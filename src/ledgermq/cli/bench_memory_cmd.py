"""``ledgermq bench memory``: a broker's memory under a big backlog and a slow consumer."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from ledgermq.bench.memory_bench import MemoryReport, MemorySettings, run_memory_bench

DEFAULTS = MemorySettings()
MIB = 1024 * 1024


def _mib(n: int) -> str:
    return f"{n / MIB:,.1f}"


def render(report: MemoryReport, console: Console) -> None:
    s = report.settings
    t = Table(
        title=f"ledgermq bench memory: {s.messages:,} x {s.size} B backlog, "
        f"slow consumer {s.slow_rate}/s against {s.feed_rate}/s sent"
    )
    for col in ("broker", "phase", "seconds", "anon start MiB", "anon max MiB", "anon end MiB", "file max MiB"):
        t.add_column(col, justify="left" if col in ("broker", "phase") else "right")
    t.add_column("load 1m max", justify="right")
    for p in report.phases():
        t.add_row(
            p.broker,
            p.phase,
            f"{report.phase_seconds.get(p.phase, 0.0):.0f}",
            _mib(p.anon_start),
            _mib(p.anon_max),
            _mib(p.anon_end),
            _mib(p.file_max),
            f"{p.load_max:.2f}",
        )
    console.print(t)
    console.print(
        f"sent {report.sent:,} for the backlog; while the slow consumer ran: {report.fed:,} sent, "
        f"{report.consumed:,} consumed"
    )
    for broker in ("master", "slave"):
        console.print(
            f"{broker}: anonymous RSS {_mib(report.growth_after_warmup(broker))} MiB more at the end than after "
            f"the warm-up (peak +{_mib(report.peak_over_warmup(broker))} MiB), for "
            f"{(report.sent + report.fed) * s.size / MIB:,.0f} MiB of messages"
        )


@click.command("memory")
@click.option("--messages", default=DEFAULTS.messages, show_default=True, help="messages in the backlog")
@click.option("--size", default=DEFAULTS.size, show_default=True, help="bytes per message body")
@click.option("--batch", default=DEFAULTS.batch, show_default=True, help="messages per batch while filling")
@click.option("--in-flight", default=DEFAULTS.in_flight, show_default=True, help="batches sent at once")
@click.option("--hold", "hold_s", default=DEFAULTS.hold_s, show_default=True, help="seconds the backlog is held")
@click.option("--slow", "slow_s", default=DEFAULTS.slow_s, show_default=True, help="seconds of slow consumption")
@click.option("--slow-rate", default=DEFAULTS.slow_rate, show_default=True, help="messages/s the consumer takes")
@click.option("--feed-rate", default=DEFAULTS.feed_rate, show_default=True, help="messages/s sent meanwhile")
@click.option("--interval", "sample_interval_s", default=DEFAULTS.sample_interval_s, show_default=True)
@click.option("--data", type=click.Path(path_type=Path, file_okay=False), default=None, help="work dir, kept")
@click.option("--json", "json_path", type=click.Path(path_type=Path, dir_okay=False), default=None)
def memory_bench(**opts: Any) -> None:
    """Anonymous and file-backed RSS of a master and its slave while a backlog builds, is held,
    and feeds a slow consumer."""
    json_path: Path | None = opts.pop("json_path")
    settings = MemorySettings(**opts)
    if min(settings.messages, settings.size, settings.batch, settings.in_flight, settings.slow_rate) < 1:
        raise click.BadParameter("--messages, --size, --batch, --in-flight and --slow-rate must be at least 1")
    err = Console(stderr=True)
    report = run_memory_bench(settings, lambda msg: err.print(f"[dim]memory: {msg}[/]"))
    render(report, Console() if sys.stdout.isatty() else Console(width=140))
    if json_path is not None:
        doc = {
            "settings": {k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(settings).items()},
            "phases": [dataclasses.asdict(p) for p in report.phases()],
            "phase_seconds": report.phase_seconds,
            "sent": report.sent,
            "fed": report.fed,
            "consumed": report.consumed,
            "samples": [dataclasses.asdict(x) for x in report.samples],
        }
        json_path.write_text(json.dumps(doc, indent=1))
