"""The short chaos profile of ``make test`` on a controller-mode group: a name server, three
controller nodes and two brokers in controller mode (allAckInSyncStateSet) as real
processes; the master SIGKILLed, the master cut off from its slave and from the controller
at the link proxies, and the controller's Raft leader SIGKILLed: nothing acknowledged lost
(every SEND_OK read back from the master the controller names at the end, message by
message), no divergent offset, and writes resumed on the other broker while the killed
master was still down. ``make chaos`` runs the long profile.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.profile import run_short_profile

SEED = 5
KINDS = "kill,partition,controller-kill"


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_short_controller_profile_fails_over_and_loses_nothing(tmp_path: Path) -> None:
    summary, report = run_short_profile(
        tmp_path, "controller", KINDS, SEED, 180, ("--roles", "master,controller-leader")
    )
    verdict = summary["verdict"]
    assert summary["stability"]["stable"], report
    assert summary["stability"]["master"] in ("b1", "b2"), report
    assert {s["source"] for s in verdict["sources"]} == {"b1", "b2", "client"}
    assert [d["replica"] for d in verdict["divergence"]] == list({"b1", "b2"} - {summary["stability"]["master"]})
    assert all(d["differing"] == 0 and d["replica_ahead"] == 0 for d in verdict["divergence"]), report
    faults = {f["kind"]: f for f in summary["faults"]}
    assert faults["controller-kill"]["target"] in ("c0", "c1", "c2"), report
    links = faults["partition"]["notes"]["links"]
    master = faults["partition"]["target"]
    assert any(name.startswith("ha:") and name.endswith(f"->{master}") for name in links), report
    assert len([n for n in links if n.startswith(f"ctl:{master}->")]) == 3, report  # cut from every controller node
    # The killed master was replaced: a SEND_OK came before it was back up.
    kill = faults["kill"]
    resume = next(w["resume_s"] for w in verdict["fault_windows"] if w["index"] == kill["index"])
    assert resume is not None and resume < kill["ready_at"] - kill["injected_at"], report
