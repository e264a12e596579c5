"""``ledgermq bench ...``: measurements quoted as ratios against same-run baselines."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from ledgermq.bench.broker_bench import ClientRun, bench_consume, bench_produce, cpp_client_available
from ledgermq.bench.replication_bench import bench_replication, bench_sync_vs_async
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


@bench.command("produce")
@click.option("--messages", default=5000, show_default=True)
@click.option("--body-size", default=256, show_default=True)
@click.option(
    "--client",
    type=click.Choice(["cpp", "ledgermq"]),
    default="cpp",
    show_default=True,
    help="cpp: the C++ client vs a stub broker; ledgermq: our asyncio Producer, SYNC_MASTER vs ASYNC_MASTER",
)
@click.option("--concurrency", default=64, show_default=True, help="concurrent senders (--client ledgermq)")
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of a table")
def produce_bench(messages: int, body_size: int, client: str, concurrency: int, as_json: bool) -> None:
    """Sync sends to broker processes: the C++ client vs a stub broker, or our client SYNC vs ASYNC master."""
    if client == "ledgermq":
        sync_run, async_run = bench_sync_vs_async(messages, body_size, concurrency)
        rows = []
        for role, pr in (("SYNC_MASTER", sync_run), ("ASYNC_MASTER", async_run)):
            bad = sum(n for status, n in pr.statuses.items() if status != "SEND_OK")
            rows.append((f"ledgermq client -> {role} + slave" + (f" ({bad} not SEND_OK)" if bad else ""), pr.run))
        _client_table(
            f"ledgermq bench produce: {messages} sends of {body_size} bytes, ledgermq client, {concurrency} senders",
            [(rows[0][0], rows[0][1], rows[1][0], rows[1][1]), (rows[1][0], rows[1][1], "itself", rows[1][1])],
            as_json,
        )
        return
    if not cpp_client_available():
        raise click.ClickException("the C++ client is not installed: pip install rocketmq==0.4.4")
    measured, baseline = bench_produce(messages, body_size)
    _client_table(
        f"ledgermq bench produce: {messages} sync sends of {body_size} bytes, C++ client",
        [("C++ client -> ledgermq broker", measured, "same client -> stub broker", baseline)],
        as_json,
    )


@bench.command("consume")
@click.option("--messages", default=5000, show_default=True)
@click.option("--body-size", default=256, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of a table")
def consume_bench(messages: int, body_size: int, as_json: bool) -> None:
    """Push consumption by the Apache C++ client: backlog drain rate and live end-to-end latency."""
    if not cpp_client_available():
        raise click.ClickException("the C++ client is not installed: pip install rocketmq==0.4.4")
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
    r = bench_replication(mb, transfer_batch=ha_transfer_batch)
    doc = {
        "bytes": r.bytes,
        "segment_size": r.segment_size,
        "ha_transfer_batch": r.transfer_batch,
        "fill_s": round(r.fill_seconds, 3),
        "slave_start_s": round(r.slave_start_seconds, 3),
        "catch_up_s": round(r.catch_up_seconds, 3),
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
    t = Table(title=f"ledgermq bench replication: a fresh slave copies {r.bytes:,} bytes from offset 0")
    for col in ("case", "seconds", "MB/s"):
        t.add_column(col)
    t.add_row(
        "slave catch-up (first answer -> master's offset)", f"{r.catch_up_seconds:.3f}", f"{r.replication_mb_s:.1f}"
    )
    t.add_row("loopback TCP, 32 KiB writes", f"{r.tcp_seconds:.3f}", f"{r.tcp_mb_s:.1f}")
    t.add_row("disk: os.write 1 MiB + fsync", f"{r.disk_seconds:.3f}", f"{r.disk_mb_s:.1f}")
    Console().print(t)
    verdict = "met" if r.ratio >= 0.7 else "not met"
    click.echo(f"replication / min(tcp, disk) = {r.ratio:.4f} (goal >= 0.7: {verdict}); "
               f"slave start-up {r.slave_start_seconds:.3f}s not counted")  # fmt: skip
