"""``ledgermq chaos soak`` end to end, short: one minute of the mixed, checked load on the
SYNC_MASTER layout (real processes) with a seeded fault every 30 s, brokers sampled every
2 s. Exit 0 and a summary with every field the long run reports: nothing lost or corrupt,
every flow's consumers got exactly what they must, latency percentiles per window, each
broker's resource samples judged by the growth rule."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

FLOWS = {"ordered", "delayed", "transactional", "filtered"}


@pytest.mark.long
@pytest.mark.timeout(240)
def test_a_one_minute_soak_reports_every_field_and_passes(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    src = Path(__file__).resolve().parents[2] / "src"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH", "")]))}
    args = [
        sys.executable, "-m", "ledgermq.cli.main", "chaos", "soak", "--layout", "sync", "--minutes", "1",
        "--seed", "4", "--faults", "kill,suspend", "--fault-every", "30", "--sample-every", "2",
        "--data", str(tmp_path / "data"), "--json", str(out),
    ]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, timeout=220, env=env, check=False)
    logs = "\n".join(
        f"--- {p.name} ---\n{p.read_text(errors='replace')[-2000:]}" for p in tmp_path.glob("data/*/logs/*.log")
    )
    report = f"exit {done.returncode}\nstdout:\n{done.stdout[-6000:]}\nstderr:\n{done.stderr[-3000:]}\n{logs}"
    assert done.returncode == 0, report
    summary = json.loads(out.read_text())

    verdict = summary["verdict"]
    assert not verdict["failed"] and verdict["lost"] == 0 and verdict["corrupt_served"] == 0, report
    assert not verdict["diverged"] and verdict["flows_failed"] == [] and verdict["grew"] == [], report
    assert summary["run"]["kind"] == "soak" and 55 <= summary["run"]["ran_s"] <= 90, report
    assert summary["chaos"]["acked"] > 1000, report  # 50/s for a minute, less the faults' windows

    faults = summary["faults"]
    assert [f["kind"] for f in faults] and all(f["kind"] in ("kill", "suspend") for f in faults), report
    assert all(f["recovered_at"] > 0 for f in faults), report

    latency = summary["latency"]
    assert latency["window_s"] == 600 and len(latency["windows"]) == 1, report
    window = latency["windows"][0]
    assert window["sends"] > 1500 and 0 < window["p50_ms"] <= window["p99_ms"] <= window["p999_ms"], report
    assert set(latency["per_flow"]) == FLOWS | {"chaos"}, report

    flows = {f["flow"]: f for f in summary["flows"]}
    assert set(flows) == FLOWS, report
    for f in flows.values():
        assert f["acked"] > 100 and not f["failed"] and f["problems"] == {}, (f, report)
        for r in f["receivers"]:
            assert r["expected"] > 0 and r["missing"] == 0 and r["unexpected"] == 0, (r, report)
    assert len(flows["filtered"]["receivers"]) == 2, report  # the tag and the SQL92 consumer
    outcomes = flows["transactional"]["outcomes"]
    assert outcomes["commit"] > 0 and outcomes["rollback"] > 0, report

    resources = summary["resources"]
    assert "second quarter" in resources["rule"], report
    assert set(resources["nodes"]) == {"master", "slave"}, report
    for node, row in resources["nodes"].items():
        assert row["verdict"] == "flat" and row["samples"] >= 15, (node, row, report)
        assert row["anon_kib"]["q4_median"] > 0 and row["fds"]["q4_median"] > 0, (node, row)
