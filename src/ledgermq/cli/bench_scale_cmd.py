"""``ledgermq bench scale``: thousands of topics, tens of thousands of queues, one broker."""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from ledgermq.bench.scale_bench import ScaleReport, ScaleSettings, run_scale_bench

DEFAULTS = ScaleSettings()


def command_line(ctx: click.Context) -> str:
    """The command with every option spelled out, so a figure can be reproduced exactly."""
    parts = ["ledgermq", "bench", "scale"]
    for param in ctx.command.params:
        if not isinstance(param, click.Option) or param.name is None:
            continue
        value = ctx.params.get(param.name)
        if value is None:
            continue
        parts += [param.opts[0], str(value)]
    return " ".join(parts)


def render(report: ScaleReport, console: Console) -> None:
    """One table; rows that say something is wrong are red and marked ``!!``."""
    t = Table(title=f"ledgermq bench scale: {report.settings.topics:,} topics x {report.settings.queues} queues")
    t.add_column("step")
    t.add_column("figure")
    t.add_column("value", justify="right")
    t.add_column("unit")
    t.add_column("load 1m", justify="right")
    for f in report.figures:
        value = f"{f.value:,}" if isinstance(f.value, int | float) else str(f.value)
        style = "bold red" if f.alarm else None
        t.add_row(f.step, ("!! " if f.alarm else "") + f.label, value, f.unit, f"{f.load:.2f}", style=style)
    console.print(t)
    console.print(f"command: {report.command}", soft_wrap=True)
    console.print(f"host: {os.cpu_count()} cores, Python {platform.python_version()}", soft_wrap=True)
    alarms = [f for f in report.figures if f.alarm]
    if alarms:
        console.print(
            f"[bold red]{len(alarms)} figure(s) say the broker did not cope: "
            + "; ".join(f"{f.label} = {f.value}" for f in alarms)[:600]
            + "[/]"
        )


@click.command("scale")
@click.option("--topics", default=DEFAULTS.topics, show_default=True, help="topics created")
@click.option("--queues", default=DEFAULTS.queues, show_default=True, help="read and write queues per topic")
@click.option("--create-inflight", default=DEFAULTS.create_inflight, show_default=True, help="creations at once")
@click.option("--window", default=DEFAULTS.window, show_default=True, help="topics per creation-rate window")
@click.option("--fill-topics", type=int, default=None, help="topics whose every queue gets a message [default: all]")
@click.option("--send-inflight", default=DEFAULTS.send_inflight, show_default=True, help="sends at once")
@click.option("--body-size", default=DEFAULTS.body_size, show_default=True, help="bytes per message body")
@click.option(
    "--round-robin-topics",
    default=DEFAULTS.round_robin_topics,
    show_default=True,
    help="topics of the round-robin phases (the first ones created)",
)
@click.option("--duration", default=DEFAULTS.duration, show_default=True, help="seconds per send phase (ABBA)")
@click.option(
    "--readable-timeout", default=DEFAULTS.readable_timeout, show_default=True, help="seconds to wait for readability"
)
@click.option("--stall", default=DEFAULTS.stall, show_default=True, help="give up readability after no progress")
@click.option(
    "--restart-timeout", default=DEFAULTS.restart_timeout, show_default=True, help="seconds to wait for a restart"
)
@click.option("--broker-nofile", type=int, default=None, help="the broker's open-file limit [default: inherited]")
@click.option(
    "--data",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="work directory, kept afterwards [default: a temporary one, removed]",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="also write the figures as JSON here",
)
@click.pass_context
def scale_bench(ctx: click.Context, /, **opts: Any) -> None:
    """Topic creation, readability of one message per queue, descriptors, restart and
    round-robin sends against one broker process."""
    json_path: Path | None = opts.pop("json_path")
    settings = ScaleSettings(
        topics=opts["topics"],
        queues=opts["queues"],
        create_inflight=opts["create_inflight"],
        window=opts["window"],
        fill_topics=opts["fill_topics"],
        send_inflight=opts["send_inflight"],
        body_size=opts["body_size"],
        round_robin_topics=opts["round_robin_topics"],
        duration=opts["duration"],
        readable_timeout=opts["readable_timeout"],
        stall=opts["stall"],
        restart_timeout=opts["restart_timeout"],
        nofile=opts["broker_nofile"],
        data=opts["data"],
    )
    if settings.topics < 1 or settings.queues < 1:
        raise click.BadParameter("--topics and --queues must be at least 1")
    err = Console(stderr=True)
    report = run_scale_bench(settings, command_line(ctx), lambda msg: err.print(f"[dim]scale: {msg}[/]"))
    # Not a terminal (a pipe, a file, a test): wide enough that labels are not wrapped.
    render(report, Console() if sys.stdout.isatty() else Console(width=140))
    if json_path is not None:
        json_path.write_text(json.dumps(report.to_json(), indent=2) + "\n")
