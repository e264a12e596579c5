"""`ledgermq bench memory` at a tiny size: both brokers sampled in every phase, the slow
consumer held to its rate, and the figures in the table and the JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ledgermq.bench.memory_bench import PHASES
from ledgermq.bench.procstat import rss_split
from ledgermq.cli.main import cli

pytestmark = pytest.mark.timeout(180)


def test_memory_bench_samples_both_brokers_through_every_phase(tmp_path: Path) -> None:
    out = tmp_path / "mem.json"
    args = ["bench", "memory", "--messages", "3000", "--hold", "1", "--slow", "3", "--slow-rate", "100"]
    args += ["--feed-rate", "300", "--interval", "0.5", "--json", str(out)]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert doc["sent"] >= 3000
    assert 0 < doc["consumed"] <= 100 * 3 + 64  # held to its rate (+ the call under way at the end)
    assert 0 < doc["fed"] <= 300 * 3 + 10
    seen = {(p["broker"], p["phase"]) for p in doc["phases"]}
    assert seen == {(b, p) for b in ("master", "slave") for p in PHASES}
    for p in doc["phases"]:
        assert p["anon_start"] > 0 and p["anon_max"] >= p["anon_end"] > 0 and p["file_max"] > 0, p
    assert "ledgermq bench memory: 3,000 x 1024 B backlog" in result.output
    assert "master: anonymous RSS" in result.output and "slave: anonymous RSS" in result.output


def test_memory_of_a_gone_process_reads_as_minus_one() -> None:
    assert rss_split(2**22 + 12345) == (-1, -1)  # above the default pid_max
