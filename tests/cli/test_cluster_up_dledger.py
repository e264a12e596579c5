"""`ledgermq cluster up --mode dledger`: a name server and a 3-broker DLedger group as the
supervisor's children; a leader registers as master, our client's send is answered SEND_OK,
and SIGINT stops everything cleanly (no abort file, every port free again)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from ledgermq.admin.client import AdminClient
from ledgermq.client import Message, Producer
from ledgermq.client.message import SendStatus
from ledgermq.testing.ports import free_port
from tests.cli.cluster_proc import ClusterUp, pid_of


def _master(ns: str) -> str | None:
    async def ask() -> str | None:
        async with AdminClient(ns, timeout=2.0, connect_timeout=1.0) as admin:
            data = (await admin.cluster_info()).broker_addr_table.get("broker-a")
            return data.master_addr() if data is not None else None

    return asyncio.run(ask())


def _send(ns: str) -> SendStatus:
    async def run() -> SendStatus:
        producer = Producer("cluster-up-dl", ns, send_timeout=3.0)
        await producer.start()
        try:
            return (await producer.send(Message("DemoTopic", b"hi from dledger"))).status
        finally:
            await producer.shutdown()

    return asyncio.run(run())


def test_cluster_up_dledger_elects_a_master_serves_sends_and_stops_cleanly(tmp_path: Path) -> None:
    ns_port = free_port()
    ports = [free_port(span=3) for _ in range(3)]  # listen port, Raft port (+1), metrics (+2)
    ns = f"127.0.0.1:{ns_port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "ledgermq.cli.main", "cluster", "up", "--mode", "dledger", "--data", str(tmp_path),
         "--namesrv-port", str(ns_port), "--dledger-ports", ",".join(map(str, ports)), "--timeout", "30",
         "--no-console"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        for line in proc.stdout:  # the supervisor gives up by itself after --timeout
            lines.append(line)
            if "Ctrl-C stops the cluster" in line:
                break
        banner = "".join(lines)
        assert "Ctrl-C stops the cluster" in banner, banner
        assert all(f"127.0.0.1:{p}" in banner for p in ports), banner
        assert banner.count("leader (master)") == 1, banner
        master = _master(ns)
        assert master in {f"127.0.0.1:{p}" for p in ports}
        assert f"DLedger group broker-a leader: {master}" in banner
        assert _send(ns) is SendStatus.SEND_OK
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    for n in ("n0", "n1", "n2"):
        assert not (tmp_path / f"broker-a-{n}" / "abort").exists()  # clean shutdown of each broker
    deadline = time.monotonic() + 10
    for port in (ns_port, *ports, *(p + 1 for p in ports)):  # children gone: their ports are free
        while True:
            try:
                with socket.socket() as s:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    s.bind(("127.0.0.1", port))
                break
            except OSError:
                assert time.monotonic() < deadline, f"port {port} still taken"
                time.sleep(0.1)


def test_cluster_up_dledger_restarts_a_killed_leader(tmp_path: Path) -> None:
    ns_port = free_port()
    ports = [free_port(span=3) for _ in range(3)]
    ns = f"127.0.0.1:{ns_port}"
    up = ClusterUp("--mode", "dledger", "--data", str(tmp_path), "--namesrv-port", str(ns_port),
                   "--dledger-ports", ",".join(map(str, ports)), "--timeout", "30")  # fmt: skip
    try:
        leader_line = up.wait_for("DLedger group broker-a leader:", timeout=40)
        up.wait_for("Ctrl-C stops the cluster", timeout=5)
        leader = leader_line.split("leader:")[1].strip()
        n = f"n{ports.index(int(leader.rsplit(':', 1)[1]))}"
        os.kill(pid_of(tmp_path, f"broker-a-{n}"), signal.SIGKILL)
        up.wait_for(f"broker-a {n} exited with -9; restarting in 1 s", timeout=5)
        up.wait_for(f"broker-a {n} is back", timeout=25)
        deadline = time.monotonic() + 15
        while True:  # the group has a leader again and takes sends
            try:
                if _send(ns) is SendStatus.SEND_OK:
                    break
            except Exception:
                assert time.monotonic() < deadline, up.output
                time.sleep(0.3)
        assert up.interrupt() == 0
    finally:
        up.kill()
    for m in ("n0", "n1", "n2"):
        assert not (tmp_path / f"broker-a-{m}" / "abort").exists()
