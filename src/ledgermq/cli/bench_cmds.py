"""``ledgermq bench ...``: measurements quoted as ratios against same-run baselines."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from ledgermq.bench.broker_bench import (
    ClientRun,
    CompareRow,
    bench_compare_consume,
    bench_compare_produce,
    bench_consume,
    bench_produce,
    cpp_client_available,
)
from ledgermq.bench.controller_bench import bench_controller_vs_sync
from ledgermq.bench.replication_bench import bench_dledger_vs_sync, bench_replication, bench_sync_vs_async
from ledgermq.bench.store_bench import run_store_bench


@click.group()
def bench() -> None:
    """Benchmarks (each with a baseline measured in the same run)."""


@bench.command("store")
@click.option(
    "--data",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="work directory (default: a temporary one, removed afterwards)",
)
@click.option("--messages", default=50_000, show_default=True)
@click.option("--body-size", default=256, show_default=True)
@click.option("--inflight", default=64, show_default=True, help="SYNC_FLUSH puts awaiting durability at once")
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of a table")
def store_bench(data: Path | None, messages: int, body_size: int, inflight: int, as_json: bool) -> None:
    """Store write, pull and recovery paths."""
    rows = run_store_bench(data, messages, body_size, inflight)
    if as_json:
        click.echo(
            json.dumps(
                [
                    {
                        "case": r.case,
                        "ops": r.ops,
                        "per_s": round(r.rate),
                        "baseline": r.baseline,
                        "baseline_per_s": round(r.baseline_rate),
                        "ratio": round(r.ratio, 3),
                    }
                    for r in rows
                ],
                indent=2,
            )
        )
        return
    t = Table(title=f"ledgermq bench store: {messages} messages of {body_size} bytes")
    for col in ("case", "ops/s", "baseline", "baseline ops/s", "ratio"):
        t.add_column(col)
    for r in rows:
        t.add_row(r.case, f"{r.rate:,.0f}", r.baseline, f"{r.baseline_rate:,.0f}", f"{r.ratio:.3f}")
    Console().print(t)


def _client_table(title: str, rows: list[tuple[str, ClientRun, str, ClientRun]], as_json: bool = False) -> None:
    if as_json:
        click.echo(json.dumps([
            {"case": case, "per_s": round(run.rate), "p50_ms": round(run.p50, 3) if run.latencies_ms else None,
             "p99_ms": round(run.percentile(99), 3) if run.latencies_ms else None, "baseline": base_name,
             "baseline_per_s": round(base.rate), "ratio": round(run.rate / base.rate, 3) if base.rate else None}
            for case, run, base_name, base in rows
        ], indent=2))  # fmt: skip
        return
    t = Table(title=title)
    for col in ("case", "msgs/s", "p50 ms", "p99 ms", "baseline", "baseline msgs/s", "ratio"):
        t.add_column(col)
    for case, run, base_name, base in rows:
        ratio = run.rate / base.rate if base.rate else 0.0
        p50 = f"{run.p50:.2f}" if run.latencies_ms else "-"
        p99 = f"{run.percentile(99):.2f}" if run.latencies_ms else "-"
        t.add_row(case, f"{run.rate:,.0f}", p50, p99, base_name, f"{base.rate:,.0f}", f"{ratio:.3f}")
    Console().print(t)


def _compare_table(title: str, rows: list[CompareRow], as_json: bool) -> None:
    """Each row's rate against its baseline row's (a C++ client figure of the same run)."""
    rates = {r.case: r.run.rate for r in rows}
    doc = []
    for r in rows:
        base_rate = rates.get(r.baseline or "", 0.0)
        doc.append(
            {
                "case": r.case,
                "count": r.run.count,
                "per_s": round(r.run.rate),
                "p50_ms": round(r.run.p50, 3) if r.run.latencies_ms else None,
                "p99_ms": round(r.run.percentile(99), 3) if r.run.latencies_ms else None,
                "baseline": r.baseline,
                "ratio": round(r.run.rate / base_rate, 3) if base_rate else None,
            }
        )
    if as_json:
        click.echo(json.dumps(doc, indent=2))
        return
    t = Table(title=title)
    for col in ("case", "msgs/s", "p50 ms", "p99 ms", "ratio", "baseline"):
        t.add_column(col)
    for d in doc:
        p50 = "-" if d["p50_ms"] is None else f"{d['p50_ms']:.2f}"
        p99 = "-" if d["p99_ms"] is None else f"{d['p99_ms']:.2f}"
        ratio = "-" if d["ratio"] is None else f"{d['ratio']:.2f}"
        base = "-" if d["baseline"] is None or d["baseline"] == d["case"] else str(d["baseline"])
        t.add_row(str(d["case"]), f"{d['per_s']:,}", p50, p99, ratio, base)
    Console().print(t)


@bench.command("produce")
@click.option("--messages", default=5000, show_default=True)
@click.option("--body-size", type=int, default=None, help="bytes per body [default: 1024 compare, 256 cpp/ledgermq]")
@click.option(
    "--client",
    type=click.Choice(["compare", "cpp", "ledgermq", "dledger", "controller"]),
    default="compare",
    show_default=True,
    help="compare: the C++ client and ours against one broker; cpp: the C++ client vs a stub broker; "
    "ledgermq: our asyncio Producer, SYNC_MASTER vs ASYNC_MASTER; dledger: our Producer, a 3-node DLedger "
    "group vs SYNC_MASTER with one slave; controller: our Producer, controller mode with one slave and "
    "allAckInSyncStateSet vs SYNC_MASTER with one slave (same run, alternating rounds)",
)
@click.option("--batch", default=32, show_default=True, help="messages per send_batch (--client compare)")
@click.option("--concurrency", default=64, show_default=True, help="concurrent senders (compare, ledgermq)")
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of a table")
def produce_bench(
    messages: int, body_size: int | None, client: str, batch: int, concurrency: int, as_json: bool
) -> None:
    """Sends to broker processes: the C++ client and ours side by side (default), the C++ client
    vs a stub broker, or our client SYNC vs ASYNC master."""
    if client in ("dledger", "ledgermq", "controller"):
        body_size = body_size or 256
        load_before = os.getloadavg()
        if client == "controller":
            runs = bench_controller_vs_sync(messages, body_size, concurrency)
            labels = ("controller mode + slave, allAckInSyncStateSet", "SYNC_MASTER + slave")
        elif client == "dledger":
            runs = bench_dledger_vs_sync(messages, body_size, concurrency)
            labels = ("3-node DLedger group", "SYNC_MASTER + slave")
        else:
            runs = bench_sync_vs_async(messages, body_size, concurrency)
            labels = ("SYNC_MASTER + slave", "ASYNC_MASTER + slave")
        rows = []
        for label, pr in zip(labels, runs, strict=True):
            bad = sum(n for status, n in pr.statuses.items() if status != "SEND_OK")
            rows.append((f"ledgermq client -> {label}" + (f" ({bad} not SEND_OK)" if bad else ""), pr.run))
        load = f"load average {load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after, {os.cpu_count()} CPUs"
        _client_table(
            f"ledgermq bench produce: {messages} sends of {body_size} bytes, ledgermq client, {concurrency} senders "
            f"({load})",
            [(rows[0][0], rows[0][1], rows[1][0], rows[1][1]), (rows[1][0], rows[1][1], "itself", rows[1][1])],
            as_json,
        )
        return
    if not cpp_client_available():
        raise click.ClickException("the C++ client is not installed: pip install rocketmq==0.4.4")
    if client == "compare":
        body_size = body_size or 1024
        _compare_table(
            f"ledgermq bench produce: {messages} messages of {body_size} bytes per case, one broker process",
            bench_compare_produce(messages, body_size, batch, concurrency),
            as_json,
        )
        return
    body_size = body_size or 256
    measured, baseline = bench_produce(messages, body_size)
    _client_table(
        f"ledgermq bench produce: {messages} sync sends of {body_size} bytes, C++ client",
        [("C++ client -> ledgermq broker", measured, "same client -> stub broker", baseline)],
        as_json,
    )


@bench.command("consume")
@click.option("--messages", default=5000, show_default=True)
@click.option("--body-size", type=int, default=None, help="bytes per body [default: 1024 compare, 256 cpp]")
@click.option(
    "--client",
    type=click.Choice(["compare", "cpp"]),
    default="compare",
    show_default=True,
    help="compare: the C++ push consumer and ours against one broker; cpp: the C++ push consumer alone",
)
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of a table")
def consume_bench(messages: int, body_size: int | None, client: str, as_json: bool) -> None:
    """Backlog drain rate and live end-to-end latency (born -> in the application's hands)."""
    if not cpp_client_available():
        raise click.ClickException("the C++ client is not installed: pip install rocketmq==0.4.4")
    if client == "compare":
        body_size = body_size or 1024
        _compare_table(
            f"ledgermq bench consume: {messages} messages of {body_size} bytes per case, one broker process",
            bench_compare_consume(messages, body_size),
            as_json,
        )
        return
    body_size = body_size or 256
    backlog, live = bench_consume(messages, body_size)
    _client_table(
        f"ledgermq bench consume: {messages} messages of {body_size} bytes, C++ client",
        [
            ("C++ push consumer drains a backlog", backlog, "live: consumer while a producer sends", live),
            ("live: end-to-end latency (born -> callback)", live, "itself", live),
        ],
        as_json,
    )


@bench.command("replication")
@click.option("--mb", default=64, show_default=True, help="MiB of message bodies in the master before the slave starts")
@click.option(
    "--ha-transfer-batch",
    type=int,
    default=None,
    help="haTransferBatchSize for both brokers (default: the broker's, 32 KiB)",
)
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of a table")
def replication_bench(mb: int, ha_transfer_batch: int | None, as_json: bool) -> None:
    """A fresh slave's catch-up rate vs loopback TCP and raw disk writes of the same bytes."""
    from ledgermq.bench.replication_bench import BASELINE_TRIES, FILL_BODIES

    r = bench_replication(mb, transfer_batch=ha_transfer_batch)
    bodies = "/".join(str(b) for b in FILL_BODIES)
    doc = {
        "bytes": r.bytes,
        "body_sizes": list(FILL_BODIES),
        "segment_size": r.segment_size,
        "ha_transfer_batch": r.transfer_batch,
        "fill_s": round(r.fill_seconds, 3),
        "slave_start_s": round(r.slave_start_seconds, 3),
        "catch_up_s": round(r.catch_up_seconds, 3),
        "catch_up_start_exact": r.start_exact,
        "slave_dispatch_after_s": round(r.dispatch_seconds, 3),
        "replication_mb_s": round(r.replication_mb_s, 2),
        "tcp_mb_s": round(r.tcp_mb_s, 2),
        "disk_mb_s": round(r.disk_mb_s, 2),
        "ratio": round(r.ratio, 4),
        "goal": 0.7,
        "goal_met": r.ratio >= 0.7,
    }
    if as_json:
        click.echo(json.dumps(doc, indent=2))
        return
    t = Table(
        title=f"ledgermq bench replication: a fresh slave copies {r.bytes:,} bytes from offset 0 "
        f"(bodies of {bodies} bytes in turn, haTransferBatchSize {r.transfer_batch:,})"
    )
    for col in ("case", "seconds", "MB/s"):
        t.add_column(col)
    t.add_row(
        "slave catch-up (its first report -> report of the master's offset)",
        f"{r.catch_up_seconds:.3f}",
        f"{r.replication_mb_s:.1f}",
    )
    t.add_row(
        f"loopback TCP, 1 MiB writes and reads (best of {BASELINE_TRIES})", f"{r.tcp_seconds:.3f}", f"{r.tcp_mb_s:.1f}"
    )
    t.add_row(f"disk: os.write 1 MiB + fsync (best of {BASELINE_TRIES})", f"{r.disk_seconds:.3f}", f"{r.disk_mb_s:.1f}")
    Console().print(t)
    verdict = "met" if r.ratio >= 0.7 else "not met"
    dispatch = f"{r.dispatch_seconds:.3f}s" if r.dispatch_seconds >= 0 else "not seen"
    click.echo(f"replication / min(tcp, disk) = {r.ratio:.4f} (goal >= 0.7: {verdict}); "
               f"not counted: slave start-up {r.slave_start_seconds:.3f}s, "
               f"its consume queues complete {dispatch} after catch-up")  # fmt: skip


from ledgermq.cli.bench_spark_cmd import spark_bench  # noqa: E402 - the Spark bench lives in its own module

bench.add_command(spark_bench)

from ledgermq.cli.bench_scale_cmd import scale_bench  # noqa: E402 - the scale bench lives in its own module

bench.add_command(scale_bench)

from ledgermq.cli.bench_compare_cmd import compare_bench, compare_plot  # noqa: E402 - the compare bench lives in its own module

bench.add_command(compare_bench)
bench.add_command(compare_plot)

from ledgermq.cli.bench_memory_cmd import memory_bench  # noqa: E402 - the memory bench lives in its own module

bench.add_command(memory_bench)

from ledgermq.cli.bench_timers_cmd import timers_bench  # noqa: E402 - the timer bench lives in its own module

bench.add_command(timers_bench)
