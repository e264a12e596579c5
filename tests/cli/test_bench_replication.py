"""`ledgermq bench replication` and `ledgermq bench produce --client ledgermq` with tiny sizes (shape, not speed)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from ledgermq.cli.main import cli


def test_replication_command_reports_three_rates_and_the_ratio() -> None:
    result = CliRunner().invoke(cli, ["bench", "replication", "--mb", "2", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["bytes"] > 2 * 1024 * 1024  # bodies plus record headers, all in one segment
    assert doc["segment_size"] >= doc["bytes"]
    for key in ("fill_s", "slave_start_s", "catch_up_s", "replication_mb_s", "tcp_mb_s", "disk_mb_s", "ratio"):
        assert doc[key] > 0, key
    floor = min(doc["tcp_mb_s"], doc["disk_mb_s"])
    assert abs(doc["ratio"] - doc["replication_mb_s"] / floor) < 0.01
    assert doc["goal"] == 0.7 and doc["goal_met"] == (doc["ratio"] >= 0.7)


def test_replication_table_output() -> None:
    result = CliRunner().invoke(cli, ["bench", "replication", "--mb", "1"])
    assert result.exit_code == 0, result.output
    assert "slave catch-up" in result.output and "replication / min(tcp, disk)" in result.output


def test_produce_ledgermq_client_compares_sync_and_async_master() -> None:
    args = ["bench", "produce", "--client", "ledgermq", "--messages", "300", "--concurrency", "16", "--json"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    sync_row, async_row = json.loads(result.output)
    assert sync_row["case"] == "ledgermq client -> SYNC_MASTER + slave"  # every send SEND_OK
    assert sync_row["baseline"] == async_row["case"] == "ledgermq client -> ASYNC_MASTER + slave"
    for row in (sync_row, async_row):
        assert row["per_s"] > 0 and row["p99_ms"] >= row["p50_ms"] > 0
    assert sync_row["baseline_per_s"] == async_row["per_s"]
    assert sync_row["ratio"] > 0 and async_row["ratio"] == 1.0
