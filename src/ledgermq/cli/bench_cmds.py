"""``ledgermq bench ...``: measurements quoted as ratios against same-run baselines."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

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
