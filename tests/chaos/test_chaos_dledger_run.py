"""The short chaos profile of ``make test`` on a DLedger group: a name server and three
DLedger-mode brokers as real processes, one cycle of each fault kind that applies (SIGKILL
and restart, SIGSTOP/SIGCONT, the leader cut off from its peers at the Raft link proxies, a
full disk that fail-stops a node's Raft driver until the broker restarts it),
no acknowledged message lost, every member identical to the leader. ``make chaos`` runs the
long profile.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.profile import run_short_profile

SEED = 3
KINDS = "kill,suspend,partition,disk-full"


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_short_dledger_profile_loses_nothing(tmp_path: Path) -> None:
    summary, report = run_short_profile(tmp_path, "dledger", KINDS, SEED, 160)
    verdict = summary["verdict"]
    assert summary["stability"]["stable"], report
    assert {s["source"] for s in verdict["sources"]} == {"n0", "n1", "n2", "client"}
    assert {d["replica"] for d in verdict["divergence"]} == {"n0", "n1", "n2"} - {summary["stability"]["master"]}
    partition = next(f for f in summary["faults"] if f["kind"] == "partition")
    assert len(partition["notes"]["links"]) == 4, report  # the leader cut from and to both peers
    # In each broker's last life (its log is appended across restarts), every driver the
    # full disk failed was restarted by the broker.
    for log in (tmp_path / "data").glob("*/logs/n*.log"):
        last_life = log.read_text(errors="replace").rsplit("===== chaos start", 1)[-1]
        assert last_life.count("the Raft driver failed") == last_life.count("Raft driver restarted"), (log.name, report)
