"""``chaos run --layout controller --tls``: a controller-mode group (two brokers, three
standalone controller nodes) with every process in enforcing mode with mutual TLS. The
brokers' controller requests and heartbeats and the controller's Raft messages run over TLS
through their fault proxies; the controller leader is SIGKILLed (a new one is elected over
TLS), the master is cut from its peers and the controller, and SIGKILLed (the controller
elects the other broker over TLS). Nothing acknowledged is lost."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.profile import run_short_profile

SEED = 5
KINDS = "kill,partition,controller-kill"


@pytest.mark.long
@pytest.mark.timeout(200)
def test_short_controller_profile_with_tls_fails_over_and_loses_nothing(tmp_path: Path) -> None:
    summary, report = run_short_profile(
        tmp_path, "controller", KINDS, SEED, 180, ("--tls", "--roles", "master,controller-leader")
    )
    assert summary["run"]["tls"] is True and "--tls" in summary["run"]["replay"]
    assert summary["stability"]["stable"], report
    assert {s["source"] for s in summary["verdict"]["sources"]} == {"b1", "b2", "client"}, report
    logs = {p.stem: p.read_text(errors="replace") for p in (tmp_path / "data").glob("*/logs/*.log")}
    for name in ("namesrv", "b1", "b2", "c0", "c1", "c2"):  # every server's ports took TLS only
        assert "(TLS enforcing)" in logs[name], report
        assert "TLS: mode=enforcing, client=tls, clientAuth=require" in logs[name], report
    # no certificate or peer was refused anywhere; a handshake cut by a partition is all that may fail
    refusals = [line for text in logs.values() for line in text.splitlines() if "TLS: refused" in line]
    assert all("closed the connection during the handshake" in line for line in refusals), report
    faults = {f["kind"]: f for f in summary["faults"]}
    assert faults["controller-kill"]["target"] in ("c0", "c1", "c2"), report
    kill = faults["kill"]  # the killed master was replaced: a SEND_OK came before it was back up
    resume = next(w["resume_s"] for w in summary["verdict"]["fault_windows"] if w["index"] == kill["index"])
    assert resume is not None and resume < kill["ready_at"] - kill["injected_at"], report
