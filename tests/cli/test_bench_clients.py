"""`ledgermq bench produce|consume` drive the real C++ client against broker processes."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from ledgermq.bench.broker_bench import bench_consume, bench_produce, cpp_client_available
from ledgermq.cli.main import cli

pytestmark = pytest.mark.skipif(not cpp_client_available(), reason="the rocketmq wheel (C++ client) is not installed")


def test_produce_bench_measures_broker_and_stub() -> None:
    measured, baseline = bench_produce(150, 64)
    assert measured.count == baseline.count == 150
    assert measured.rate > 0 and baseline.rate > 0
    assert len(measured.latencies_ms) == 150 and measured.percentile(99) >= measured.p50 > 0


def test_consume_bench_drains_a_backlog_and_measures_live_latency() -> None:
    backlog, live = bench_consume(150, 64)
    assert backlog.count == 151  # plus the warm-up message the producer sends first
    assert backlog.rate > 0
    assert live.count == 153 and len(live.latencies_ms) == 151  # the measured run's warm-up + 150
    assert 0 <= live.p50 <= live.percentile(99) < 10_000


def test_produce_command_prints_the_ratio() -> None:
    result = CliRunner().invoke(cli, ["bench", "produce", "--messages", "100", "--json"])
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.output)
    assert row["baseline"] == "same client -> stub broker"
    assert row["per_s"] > 0 and row["baseline_per_s"] > 0 and row["ratio"] > 0 and row["p99_ms"] >= row["p50_ms"]
