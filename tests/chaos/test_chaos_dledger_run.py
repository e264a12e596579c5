"""The short chaos profile of ``make test`` on a DLedger group: a name server and three
DLedger-mode brokers as real processes, one cycle of each fault kind that applies (SIGKILL
and restart, SIGSTOP/SIGCONT, the leader cut off from its peers at the Raft link proxies),
no acknowledged message lost, every member identical to the leader. ``make chaos`` runs the
long profile.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SEED = 3
KINDS = "kill,suspend,partition"


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_short_dledger_profile_loses_nothing(tmp_path: Path) -> None:
    out = tmp_path / "summary.json"
    src = Path(__file__).resolve().parents[2] / "src"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH", "")]))}
    args = [
        sys.executable, "-m", "ledgermq.cli.main", "chaos", "run", "--layout", "dledger", "--cycles", "3",
        "--seed", str(SEED), "--faults", KINDS, "--steady", "1,2", "--hold-scale", "0.6",
        "--data", str(tmp_path / "data"), "--json", str(out),
    ]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, timeout=160, env=env, check=False)
    logs = "\n".join(
        f"--- {p.name} ---\n{p.read_text(errors='replace')[-3000:]}" for p in (tmp_path / "data").glob("*/logs/*.log")
    )
    report = f"exit {done.returncode}\nstdout:\n{done.stdout[-6000:]}\nstderr:\n{done.stderr[-3000:]}\n{logs}"
    assert done.returncode == 0, report
    summary = json.loads(out.read_text())
    verdict = summary["verdict"]
    assert verdict["lost"] == 0 and not verdict["diverged"], report
    assert verdict["acked"] > 100, report
    assert sorted(f["kind"] for f in summary["faults"]) == sorted(KINDS.split(",")), report
    assert all(f["recovered_at"] > 0 for f in summary["faults"]), report
    assert summary["stability"]["stable"], report
    assert {s["source"] for s in verdict["sources"]} == {"n0", "n1", "n2", "client"}
    assert {d["replica"] for d in verdict["divergence"]} == {"n0", "n1", "n2"} - {summary["stability"]["master"]}
    partition = next(f for f in summary["faults"] if f["kind"] == "partition")
    assert len(partition["notes"]["links"]) == 4, report  # the leader cut from and to both peers
