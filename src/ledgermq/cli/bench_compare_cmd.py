"""``ledgermq bench compare``: ledgermq against NATS JetStream, side by side, one run."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from ledgermq.bench.compare.model import LAYOUTS, PATTERNS, QUICK, CompareSettings
from ledgermq.bench.compare.plot import default_title, render_svg
from ledgermq.bench.compare.report import document, render
from ledgermq.bench.compare.schedule import Round
from ledgermq.clock import SYSTEM_CLOCK

DEFAULTS = CompareSettings()
QUICK_OVERRIDES = ("messages", "backlog", "cap_s")
SPELLED_WHEN_CHANGED = ("patterns", "layouts")
NOTES = (
    "JetStream batches: N async publishes, then every ack awaited (it has no batch publish).",
    "Drains: timed from the first message in hand to the last; JetStream: a durable pull consumer, fetch 256,"
    " AckPolicy none; ledgermq push: Java defaults; lite pull: pull batches of 32.",
    "Server CPU: utime+stime from /proc of the nats-server(s); of the name server and every broker for ledgermq.",
    "Client CPU: process_time of the bench process (all threads) around each run: our client or nats-py.",
    "Clients (ours and nats-py) run in the bench process, on the same 127.0.0.1 host as the servers.",
)


def _names(value: str, known: tuple[str, ...], what: str) -> tuple[str, ...]:
    """A comma-separated choice of ``known`` names, checked (a typo stops the bench at once)."""
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise click.BadParameter(
            f"{', '.join(unknown) or 'none given'}: choose from {', '.join(known)}", param_hint=what
        )
    return names


def command_line(ctx: click.Context) -> str:
    """The command with every option spelled out, so a figure can be reproduced exactly."""
    parts = ["ledgermq", "bench", "compare"]
    for param in ctx.command.params:
        if not isinstance(param, click.Option) or param.name is None:
            continue
        value = ctx.params.get(param.name)
        if value is None or value is False:
            continue
        if ctx.params.get("quick") and param.name in QUICK_OVERRIDES:
            continue  # --quick replaced them: spelling them out would mislead
        if param.name in SPELLED_WHEN_CHANGED and value == param.default:
            continue  # the default choice: the line stays as it was before these options
        parts += [param.opts[0]] if value is True else [param.opts[0], str(value)]
    return " ".join(parts)


@click.command("compare")
@click.option("--quick", is_flag=True, help="small sizes (about a minute): overrides --messages/--backlog/--cap")
@click.option("--messages", default=DEFAULTS.messages, show_default=True, help="per send workload and round")
@click.option("--backlog", default=DEFAULTS.backlog, show_default=True, help="messages drained per round")
@click.option("--size", default=DEFAULTS.size, show_default=True, help="message body bytes")
@click.option("--inflight", default=DEFAULTS.inflight, show_default=True, help="sends in flight")
@click.option("--cycles", default=DEFAULTS.cycles, show_default=True, help="ABBA cycles (1 = A B B A)")
@click.option("--cap", "cap_s", default=DEFAULTS.cap_s, show_default=True, help="seconds a workload may run at most")
@click.option("--no-variants", is_flag=True, help="skip the ledgermq SYNC_MASTER / SYNC_FLUSH systems")
@click.option("--no-nats", is_flag=True, help="ledgermq only (no JetStream, so no ledgermq/JetStream ratios)")
@click.option("--patterns", default=",".join(DEFAULTS.patterns), show_default=True,
              help=f"send patterns, comma-separated, of: {', '.join(PATTERNS)}")  # fmt: skip
@click.option("--layouts", default=",".join(DEFAULTS.layouts), show_default=True,
              help="layouts, comma-separated: pair (master+slave vs JetStream R1), variants (SYNC_MASTER, "
                   "SYNC_FLUSH), dledger (3-node DLedger vs JetStream R3), controller (vs JetStream R1)")  # fmt: skip
@click.option("--no-drains", is_flag=True, help="skip the drain workloads")
@click.option("--json", "json_path", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="also write the figures to this file")  # fmt: skip
@click.option("--plot", "plot_path", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="also write the rate ratios against the goals as an SVG chart")  # fmt: skip
def compare_bench(
    quick: bool,
    messages: int,
    backlog: int,
    size: int,
    inflight: int,
    cycles: int,
    cap_s: float,
    no_variants: bool,
    no_nats: bool,
    patterns: str,
    layouts: str,
    no_drains: bool,
    json_path: Path | None,
    plot_path: Path | None,
) -> None:
    """ledgermq (master + slave) against NATS JetStream (file storage), ABBA rounds."""
    from ledgermq.bench.compare.nats_side import BenchSetupError, ensure_nats_server, import_nats
    from ledgermq.bench.compare.run import run_compare

    base = QUICK if quick else CompareSettings(messages=messages, backlog=backlog, cap_s=cap_s)
    settings = dataclasses.replace(
        base, size=size, inflight=inflight, cycles=cycles, variants=not no_variants, nats=not no_nats,
        patterns=_names(patterns, tuple(PATTERNS), "--patterns"), layouts=_names(layouts, LAYOUTS, "--layouts"),
        drains=not no_drains,
    )  # fmt: skip
    binary = None
    if settings.nats:
        try:
            import_nats()
            binary = ensure_nats_server()
        except BenchSetupError as exc:
            raise click.ClickException(str(exc)) from None

    def progress(r: Round) -> None:
        click.echo(f"round {r.index + 1}: {r.system}, load {r.load_1m:.2f}, {r.seconds:.1f} s", err=True)

    results = run_compare(settings, on_round=progress, nats_binary=binary)
    date = datetime.fromtimestamp(SYSTEM_CLOCK.wall_ms() / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")
    doc = document(results, settings, command_line(click.get_current_context()), date=date)
    if json_path is not None:
        json_path.write_text(json.dumps(doc, indent=2))
    render(doc, Console(width=max(Console().width, 150)), NOTES)
    if plot_path is not None:  # after the table, so a bad path does not hide the figures
        _write_plot(doc, plot_path, default_title(doc))
        click.echo(f"wrote {plot_path}", err=True)


@click.command("compare-plot")
@click.argument("json_path", metavar="JSON", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.argument("out_path", metavar="OUT.svg", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--title", default=None, help="chart title (default: ledgermq against NATS JetStream)")
def compare_plot(json_path: Path, out_path: Path, title: str | None) -> None:
    """Draw the SVG chart of a saved `bench compare --json` file, without running anything."""
    try:
        doc = json.loads(json_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise click.ClickException(f"{json_path}: not a JSON file: {exc}") from None
    if not isinstance(doc, dict):
        raise click.ClickException(f"{json_path}: not a `ledgermq bench compare` document (not a JSON object)")
    rows = _write_plot(doc, out_path, default_title(doc) if title is None else title, source=json_path)
    click.echo(f"wrote {out_path} ({rows} rows)")


def _write_plot(doc: dict[str, Any], out_path: Path, title: str, source: Path | None = None) -> int:
    """Render and write the chart; a document the plot cannot read is a one-line error."""
    try:
        svg = render_svg(doc, title=title)
    except ValueError as exc:
        raise click.ClickException(f"{source or 'document'}: {exc}") from None
    try:
        out_path.write_text(svg, encoding="utf-8")
    except OSError as exc:
        raise click.ClickException(f"cannot write the chart: {exc}") from None
    return len(doc["rows"])
