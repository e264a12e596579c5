"""``ledgermq bench spark`` end to end on a small count (the figures themselves are in docs/benchmarks.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ledgermq.cli.main import cli

pytestmark = pytest.mark.slow


def test_bench_spark_reports_every_case(spark: Any, tmp_path: Path) -> None:
    args = ["bench", "spark", "--messages", "3000", "--repeats", "1", "--json", "--data", str(tmp_path / "b")]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output[result.output.index("{") :])
    sinks = ["spark write (sink)"] + ["spark write (sink, exactlyOnce)"] * 2
    assert [r["case"] for r in doc["rows"]] == ["spark read -> noop"] * 3 + sinks
    assert all(r["rows"] in (3000, 750) and r["per_s"] > 0 and r["baseline_per_s"] > 0 for r in doc["rows"])
    # CPU per row by process: the read charged to the Spark JVM, its Python workers and the broker; the baselines
    # without Spark to the bench process and the broker
    cpu = doc["cpu_us_per_row"]
    read = cpu["spark read -> noop"]
    # 3,000 rows can cost a process less than one 10 ms clock tick: every figure present, the
    # Spark JVM's and the Python workers' (hundreds of ms) above 0
    assert read["spark JVM"] > 0 and read["python workers"] > 0 and read["broker"] >= 0, cpu
    raw = next(v for k, v in cpu.items() if k.startswith("raw pulls"))
    assert raw["bench process"] >= 0 and raw["broker"] >= 0, cpu
    assert len(doc["load"]) == 2
    assert spark.range(3).count() == 3  # the shared session is still alive
