"""The CLI commands run end to end against a real store directory."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from ledgermq.cli.main import cli


def test_store_demo_then_inspect(tmp_path: Path) -> None:
    runner = CliRunner()
    data = tmp_path / "store"
    demo = runner.invoke(cli, ["store", "demo", "--data", str(data), "--count", "40"])
    assert demo.exit_code == 0, demo.output
    assert "'hello 0'" in demo.output and "DemoTopic" in demo.output
    assert (data / "commitlog" / "00000000000000000000").exists()
    assert not (data / "abort").exists()  # demo shut the store down cleanly

    inspect = runner.invoke(cli, ["store", "inspect", str(data)])
    assert inspect.exit_code == 0, inspect.output
    assert "normal, 40 records checked" in " ".join(inspect.output.split())
    assert "DemoTopic" in inspect.output


def test_inspect_reports_a_locked_store_clearly(tmp_path: Path) -> None:
    from ledgermq.config import StoreConfig
    from ledgermq.store.message_store import open_message_store

    with open_message_store(StoreConfig(root_dir=str(tmp_path), mapped_file_size_commitlog=1 << 20)):
        result = CliRunner().invoke(cli, ["store", "inspect", str(tmp_path)])
    assert result.exit_code != 0
    assert "in use by another process" in result.output


def test_bench_store_prints_ratios(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["bench", "store", "--messages", "600", "--inflight", "8", "--json", "--data", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert {r["case"] for r in rows} >= {"put (ASYNC_FLUSH)", "pull 32/request", "crash recovery + rebuild"}
    assert all(r["per_s"] > 0 and r["baseline_per_s"] > 0 and r["ratio"] > 0 for r in rows)
