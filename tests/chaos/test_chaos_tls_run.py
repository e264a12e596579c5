"""``chaos run --tls``: the short profile's SYNC_MASTER group with every process in enforcing
mode with mutual TLS (a throw-away CA made for the run). The HA link is cut at its fault
proxy and must come back: the slave's new TLS handshake goes through the proxy to the
master's HA port, and SYNC_MASTER answers SEND_OK again only once it has. Nothing
acknowledged is lost; master, slave and the client path (all over TLS) hold the same."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.profile import run_short_profile

SEED = 27
KINDS = "partition"


@pytest.mark.long
@pytest.mark.timeout(150)
def test_short_profile_with_tls_loses_nothing(tmp_path: Path) -> None:
    summary, report = run_short_profile(tmp_path, "sync", KINDS, SEED, 130, ("--tls",))
    assert summary["run"]["tls"] is True and "--tls" in summary["run"]["replay"]
    assert {s["source"] for s in summary["verdict"]["sources"]} == {"master", "slave", "client"}, report
    logs = {p.stem: p.read_text(errors="replace") for p in (tmp_path / "data").glob("*/logs/*.log")}
    for name in ("namesrv", "master", "slave"):  # every server's port took TLS only
        assert "(TLS enforcing)" in logs[name], report
    assert "TLS: mode=enforcing, client=tls, clientAuth=require" in logs["slave"], report
    assert "TLS: refused" not in logs["master"] + logs["namesrv"], report  # no certificate or peer refused
    # the slave's handshakes fail only while the proxy cuts the link
    refusals = [line for line in logs["slave"].splitlines() if "TLS: refused" in line]
    assert all("closed the connection during the handshake" in line for line in refusals), report
