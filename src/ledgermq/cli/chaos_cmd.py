"""``ledgermq chaos run``: a seeded fault-testing run against a local broker group."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from pathlib import Path

import click

from ledgermq.chaos.faults import CLEAN_KINDS, KINDS, applicable, parse_kinds
from ledgermq.chaos.promise import FLUSH_MODES
from ledgermq.chaos.report import render, write_json
from ledgermq.chaos.runner import RunConfig, run
from ledgermq.chaos.soak.report import render as render_soak
from ledgermq.chaos.soak.runner import DEFAULT_FAULTS, SoakConfig, soak
from ledgermq.cli.runtime import GIL_SWITCH_INTERVAL_S


def _pair(text: str) -> tuple[float, float]:
    lo, _, hi = text.partition(",")
    a, b = float(lo), float(hi or lo)
    if not 0 <= a <= b:
        raise click.BadParameter(f"{text!r}: want MIN,MAX seconds with 0 <= MIN <= MAX")
    return a, b


@click.group()
def chaos() -> None:
    """Fault-testing runs: seeded faults under load, then loss, duplicate, order and divergence checks."""


@chaos.command("run")
@click.option(
    "--layout",
    type=click.Choice(["sync", "async", "dledger", "controller"]),
    default="sync",
    show_default=True,
    help="sync/async: a SYNC_MASTER or ASYNC_MASTER master and one slave; dledger: a 3-broker DLedger (Raft) group; "
    "controller: a master and a slave in controller mode (allAckInSyncStateSet), the controller inside the name "
    "server, or three controller nodes when the faults include controller-kill / controller-partition",
)
@click.option("--cycles", type=click.IntRange(0, 100_000), default=10, show_default=True, help="fault cycles")
@click.option("--seed", type=int, default=None, help="the schedule's seed (default: a random one, printed)")
@click.option(
    "--flush",
    type=click.Choice(FLUSH_MODES),
    default="async",
    show_default=True,
    help="every broker's flushDiskType: async (ASYNC_FLUSH) or sync (SYNC_FLUSH, which keeps every SEND_OK "
    "through a power loss)",
)
@click.option("--faults", default=",".join(CLEAN_KINDS), show_default=True, help=f"comma-separated: {', '.join(KINDS)}")
@click.option(
    "--data",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("./data/chaos"),
    show_default=True,
    help="stores and logs go under DATA/<layout>-seed<seed>/",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="write the JSON summary here (it is always written to the run directory too)",
)
@click.option("--senders", type=click.IntRange(1, 64), default=4, show_default=True)
@click.option("--rate", type=click.FloatRange(1, 10_000), default=200.0, show_default=True, help="sends/s in total")
@click.option("--steady", default="1,4", show_default=True, help="MIN,MAX seconds of plain load before each fault")
@click.option(
    "--hold-scale",
    type=click.FloatRange(0.01, 100),
    default=1.0,
    show_default=True,
    help="multiplies every fault's hold time",
)
@click.option(
    "--roles",
    default="",
    help="only faults against these roles, comma-separated (e.g. master: every kind's master faults alone)",
)
@click.option(
    "--recovery-timeout",
    type=float,
    default=30.0,
    show_default=True,
    help="seconds to wait for a SEND_OK after each heal",
)
@click.option(
    "--tls",
    is_flag=True,
    help="every process in enforcing mode with mutual TLS (a throw-away CA under the run directory); "
    "the workload and every check connect over TLS",
)
def run_cmd(layout: str, flush: str, cycles: int, seed: int | None, faults: str, data: Path, json_path: Path | None,
            senders: int, rate: float, steady: str, hold_scale: float, roles: str,
            recovery_timeout: float, tls: bool) -> None:  # fmt: skip
    """Run a workload against a local group while injecting seeded faults; exit 1 on any
    acknowledged message lost (beyond what the flush mode allows through a power loss), a
    message served with other content, or master/slave divergence (2 when the harness
    itself failed)."""
    try:
        kinds = parse_kinds(faults)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--faults") from exc
    for why in applicable(layout, kinds)[1]:
        click.echo(f"ledgermq chaos: skipping {why}", err=True)
    if not applicable(layout, kinds)[0]:
        raise click.BadParameter(f"no fault kind of {faults!r} applies to the {layout} layout", param_hint="--faults")
    if seed is None:
        seed = int.from_bytes(os.urandom(4), "big")
    cfg = RunConfig(layout, cycles, seed, kinds, data, senders, rate, _pair(steady), hold_scale,
                    recovery_timeout=recovery_timeout, flush=flush, tls=tls,
                    roles=tuple(r.strip() for r in roles.split(",") if r.strip()))  # fmt: skip
    click.echo(f"ledgermq chaos: seed {seed} (replay: ledgermq chaos run {cfg.replay_args()})", err=True)
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    # Failed sends are the point of the run; the client's per-attempt warnings would bury the report.
    logging.getLogger("ledgermq.client").setLevel(logging.ERROR)
    try:
        summary, verdict = asyncio.run(run(cfg))
    except Exception as exc:
        click.echo(f"ledgermq chaos: the run failed: {type(exc).__name__}: {exc}", err=True)
        sys.exit(2)
    render(summary, verdict)
    write_json(Path(summary["run"]["data"]) / "summary.json", summary)
    if json_path is not None:
        write_json(json_path, summary)
    sys.exit(1 if verdict.failed else 0)


@chaos.command("soak")
@click.option("--layout", type=click.Choice(["sync", "async", "dledger"]), default="sync", show_default=True,
              help="sync: SYNC_MASTER and a slave; dledger: a 3-broker DLedger group")  # fmt: skip
@click.option("--minutes", type=click.FloatRange(0.2, 24 * 60), default=60.0, show_default=True,
              help="how long the load runs")  # fmt: skip
@click.option("--seed", type=int, default=1, show_default=True, help="the fault schedule's and the flows' seed")
@click.option("--faults", default=",".join(DEFAULT_FAULTS), show_default=True,
              help=f"comma-separated: {', '.join(KINDS)}")  # fmt: skip
@click.option("--fault-every", type=click.FloatRange(5, 86_400), default=180.0, show_default=True,
              help="seconds per fault slot (one seeded fault in each)")  # fmt: skip
@click.option("--rate", type=click.FloatRange(1, 10_000), default=50.0, show_default=True,
              help="the chaos workload's sends/s")  # fmt: skip
@click.option("--flow-rate", type=click.FloatRange(0.5, 1_000), default=10.0, show_default=True,
              help="sends/s of each checked flow (ordered, delayed, transactional, filtered)")  # fmt: skip
@click.option("--sample-every", type=click.FloatRange(0.5, 600), default=10.0, show_default=True,
              help="seconds between samples of each broker's RSS and descriptors")  # fmt: skip
@click.option("--data", type=click.Path(path_type=Path, file_okay=False), default=Path("./data/soak"),
              show_default=True,
              help="stores and logs go under DATA/soak-<layout>-seed<seed>/")  # fmt: skip
@click.option("--json", "json_path", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="write the JSON summary here (it is always written to the run directory too)")  # fmt: skip
def soak_cmd(layout: str, minutes: float, seed: int, faults: str, fault_every: float, rate: float, flow_rate: float,
             sample_every: float, data: Path, json_path: Path | None) -> None:  # fmt: skip
    """Hours of mixed, checked load (ordered, delayed, transactional, filtered, and the chaos
    workload) with a seeded fault every few minutes; exit 1 on a lost or corrupt message,
    divergence, a flow problem or a broker whose memory or descriptors grew (2 when the
    harness itself failed)."""
    try:
        kinds = parse_kinds(faults)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--faults") from exc
    cfg = SoakConfig(data, layout, minutes, seed, kinds, fault_every, rate, flow_rate, sample_every)
    click.echo(f"ledgermq chaos soak: seed {seed} (replay: ledgermq chaos soak {cfg.replay_args()})", err=True)
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    logging.getLogger("ledgermq.client").setLevel(logging.ERROR)
    try:
        summary = asyncio.run(soak(cfg))
    except Exception as exc:
        click.echo(f"ledgermq chaos soak: the run failed: {type(exc).__name__}: {exc}", err=True)
        sys.exit(2)
    render_soak(summary)
    write_json(Path(summary["run"]["data"]) / "summary.json", summary)
    if json_path is not None:
        write_json(json_path, summary)
    sys.exit(1 if summary["verdict"]["failed"] else 0)
