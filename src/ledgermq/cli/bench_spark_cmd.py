"""``ledgermq bench spark``: the Spark source and sink, rows/s against same-run baselines."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

READ_GOAL = 300_000


@click.command("spark")
@click.option("--messages", default=1_000_000, show_default=True, help="messages written by the sink, then read")
@click.option("--body-size", default=100, show_default=True)
@click.option("--queues", default=2, show_default=True, help="queues of the topic (one Spark partition each)")
@click.option(
    "--pull-cap",
    default=4096,
    show_default=True,
    help="the broker's maxTransferCountOnMessageInMemory for the run (RocketMQ's default is 32)",
)
@click.option("--repeats", default=3, show_default=True, help="reads measured (best taken)")
@click.option("--master", default="local[2]", show_default=True, help="the SparkSession's master")
@click.option("--data", type=click.Path(path_type=Path, file_okay=False), default=None, help="work directory")
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of a table")
def spark_bench(
    messages: int,
    body_size: int,
    queues: int,
    pull_cap: int,
    repeats: int,
    master: str,
    data: Path | None,
    as_json: bool,
) -> None:
    """Spark batch read of N messages and the sink writing them (needs the 'spark' extra and Java)."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise click.ClickException("pyspark is not installed: pip install 'ledgermq[spark]'") from None
    from ledgermq.bench.spark_bench import bench_spark

    r = bench_spark(messages, body_size, queues=queues, pull_cap=pull_cap, repeats=repeats, master=master, workdir=data)
    rows = [
        {
            "case": case,
            "rows": run.rows,
            "per_s": round(run.rate),
            "baseline": base.case,
            "baseline_per_s": round(base.rate),
            "ratio": round(run.rate / base.rate, 3) if base.rate else None,
        }
        for case, run, base in r.rows()
    ]
    cases = (r.read, r.raw_pull, r.decode, r.arrow_yield, r.sink, r.sink_eo)
    cpu = {rate.case: rate.us_per_row() for rate in cases}
    verdict = "met" if r.read.rate >= READ_GOAL else "not met"
    if as_json:
        doc = {"setup": _setup(r), "load": r.load, "rows": rows, "cpu_us_per_row": cpu}
        click.echo(json.dumps({**doc, "read_goal": READ_GOAL, "goal": verdict}, indent=2))
        return
    t = Table(title=f"ledgermq bench spark: {_setup(r)}")
    for col in ("case", "rows/s", "baseline", "baseline rows/s", "ratio"):
        t.add_column(col)
    for case, run, base in r.rows():
        ratio = f"{run.rate / base.rate:.3f}" if base.rate else "-"
        t.add_row(case, f"{run.rate:,.0f}", base.case, f"{base.rate:,.0f}", ratio)
    Console().print(t)
    c = Table(title="CPU microseconds per row, by process (user + system)")
    roles = sorted({k for v in cpu.values() for k in v})
    for col in ("case", *roles):
        c.add_column(col)
    for case, by_role in cpu.items():
        c.add_row(case, *(f"{by_role.get(k, 0.0):.2f}" for k in roles))
    Console().print(c)
    click.echo(f"load average (1 min) {r.load[0]:.2f} at the start, {r.load[1]:.2f} at the end")
    click.echo(f"read {r.read.rate:,.0f} rows/s (goal >= {READ_GOAL:,}: {verdict})")


def _setup(r: object) -> str:
    from ledgermq.bench.spark_bench import SparkBenchResult

    assert isinstance(r, SparkBenchResult)
    return f"{r.messages:,} messages of {r.body_size} B, {r.queues} queues, {r.master}, broker pull cap {r.pull_cap}"
