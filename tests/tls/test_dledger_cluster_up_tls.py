"""``cluster up --tls --mode dledger``: a name server and a 3-broker DLedger group as real
processes, every one in enforcing mode with mutual TLS (the dev CA the command makes).

* The banner's Python example, run as printed in a fresh interpreter, sends and pulls
  over TLS with the client certificate; the banner shows no C++ snippet (its wheel has no
  TLS) and says so.
* Raft runs over TLS: a leader is elected and, after the send, every member's log reaches
  the leader's commit index, which only Raft messages between the members can bring about.
* Every port (name server, each broker's, each Raft port) refuses a plain connection with
  one log line naming the port and the reason, so nothing travelled in the clear.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ledgermq.admin.client import AdminClient
from ledgermq.admin.model import DLedgerStatus
from ledgermq.client.tls import TlsOptions
from ledgermq.testing.ports import free_port
from tests.cli.cluster_proc import ClusterUp
from tests.tls.tls_group import PLAIN_REFUSED, banner_python_example, plain_probe, wait_for_log_file

NODES = ("n0", "n1", "n2")


def _statuses(ns: str, addrs: list[str], tls: TlsOptions) -> list[DLedgerStatus]:
    async def ask() -> list[DLedgerStatus]:
        async with AdminClient(ns, timeout=3.0, connect_timeout=2.0, tls=tls) as admin:
            return [await admin.dledger_status(addr) for addr in addrs]

    return asyncio.run(ask())


def _wait_raft_caught_up(ns: str, addrs: list[str], tls: TlsOptions, timeout: float) -> list[DLedgerStatus]:
    deadline = time.monotonic() + timeout
    while True:
        statuses = _statuses(ns, addrs, tls)
        leaders = [s for s in statuses if s.role == "LEADER"]
        if len(leaders) == 1:
            commit = leaders[0].commit_index
            if commit > 0 and all(s.last_index >= commit and s.term == leaders[0].term for s in statuses):
                return statuses
        if time.monotonic() > deadline:
            raise AssertionError(f"the group's Raft logs did not meet within {timeout:.0f}s: {statuses}")
        time.sleep(0.2)


@pytest.mark.timeout(150)
def test_dledger_group_with_mutual_tls_serves_the_banner_example_and_refuses_plain(tmp_path: Path) -> None:
    ns_port = free_port()
    ports = [free_port(span=3) for _ in NODES]  # listen port, Raft port (+1), metrics (+2)
    ns = f"127.0.0.1:{ns_port}"
    up = ClusterUp("--tls", "--mode", "dledger", "--data", str(tmp_path), "--namesrv-port", str(ns_port),
                   "--dledger-ports", ",".join(map(str, ports)), "--timeout", "60")  # fmt: skip
    try:
        up.wait_for("Ctrl-C stops the cluster", 90)
        banner = up.lines
        text = up.output
        assert "from rocketmq.client" not in text and "C++ client" in text and "has no TLS" in text, text
        assert "ledgermq admin --tls --tls-trust-cert" in text, text

        example = banner_python_example(banner)
        assert "use_tls=True" in example, example
        ran = subprocess.run([sys.executable, "-c", example], capture_output=True, text=True, timeout=60, check=False)
        assert ran.returncode == 0, f"{example}\n{ran.stdout}\n{ran.stderr}"
        assert "SEND_OK" in ran.stdout and "[b'hi']" in ran.stdout, ran.stdout

        pki = tmp_path / "tls"
        tls = TlsOptions(
            trust_cert_path=str(pki / "ca.pem"), cert_path=str(pki / "client.pem"), key_path=str(pki / "client.key")
        )
        statuses = _wait_raft_caught_up(ns, [f"127.0.0.1:{p}" for p in ports], tls, 30)
        assert sorted(s.role for s in statuses) == ["FOLLOWER", "FOLLOWER", "LEADER"]

        logs = tmp_path / "logs"
        for log, port in [(logs / "namesrv.log", ns_port)] + [
            (logs / f"broker-a-{n}.log", p + offset) for n, p in zip(NODES, ports, strict=True) for offset in (0, 1)
        ]:
            assert plain_probe(port) == b"", f"port {port} answered a plain connection"
            line = wait_for_log_file(log, f"port {port}: {PLAIN_REFUSED}")
            assert "TLS: refused 127.0.0.1:" in line
        assert up.interrupt() == 0, up.output
    finally:
        up.kill()
