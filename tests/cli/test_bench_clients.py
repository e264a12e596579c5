"""`ledgermq bench produce|consume` drive the real C++ client and ours against broker processes."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from ledgermq.bench.broker_bench import (
    bench_compare_consume,
    bench_compare_produce,
    bench_consume,
    bench_produce,
    cpp_client_available,
)
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


def test_compare_produce_runs_every_case_against_one_broker() -> None:
    rows = bench_compare_produce(120, 256, batch=16, concurrency=4)
    assert [r.case.split(":")[0] for r in rows] == ["C++ client"] + ["ledgermq client"] * 4
    assert all(r.baseline == rows[0].case for r in rows)
    counts = [r.run.count for r in rows]
    assert counts == [120, 120, 128, 120, 120]  # batches of 16 round 120 up to 128
    for r in rows:
        assert r.run.rate > 0 and r.run.percentile(99) >= r.run.p50 > 0
    assert len(rows[2].run.latencies_ms) == 8  # one latency per batch


def test_compare_consume_drains_and_measures_live_latency_for_both_clients() -> None:
    rows = bench_compare_consume(120, 64)
    drain_cpp, drain_ours, live_cpp, live_ours = rows
    assert drain_cpp.run.count == drain_ours.run.count == 121 and drain_ours.baseline == drain_cpp.case
    for live in (live_cpp, live_ours):
        assert live.run.count == 123 and len(live.run.latencies_ms) == 121 and live.baseline is None
        assert 0 <= live.run.p50 <= live.run.percentile(99) < 10_000


def test_produce_command_default_compares_the_clients() -> None:
    result = CliRunner().invoke(cli, ["bench", "produce", "--messages", "60", "--batch", "8", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert len(rows) == 5 and rows[0]["ratio"] == 1.0
    assert all(r["per_s"] > 0 and r["ratio"] > 0 and r["baseline"] == rows[0]["case"] for r in rows)


def test_produce_command_prints_the_ratio() -> None:
    result = CliRunner().invoke(cli, ["bench", "produce", "--client", "cpp", "--messages", "100", "--json"])
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.output)
    assert row["baseline"] == "same client -> stub broker"
    assert row["per_s"] > 0 and row["baseline_per_s"] > 0 and row["ratio"] > 0 and row["p99_ms"] >= row["p50_ms"]
