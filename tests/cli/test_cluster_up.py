"""`ledgermq cluster up` starts a name server and a broker as processes and stops them on
SIGTERM (test_cluster_supervision.py covers Ctrl-C, SIGINT)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from ledgermq.net.client import RemotingClient
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.route import TopicRouteData
from ledgermq.testing.ports import free_port


def _route(ns_port: int, topic: str) -> TopicRouteData | None:
    import asyncio

    async def ask() -> TopicRouteData | None:
        client = RemotingClient()
        try:
            resp = await client.invoke(
                f"127.0.0.1:{ns_port}", RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
            )
            return TopicRouteData.decode(resp.body) if resp.code == ResponseCode.SUCCESS else None
        finally:
            await client.close()

    return asyncio.run(ask())


def test_cluster_up_serves_routes_and_stops_cleanly(tmp_path: Path) -> None:
    ns_port, broker_port, slave_port = free_port(), free_port(span=3), free_port(span=3)
    console_port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ledgermq.cli.main", "cluster", "up", "--data", str(tmp_path),
         "--namesrv-port", str(ns_port), "--broker-port", str(broker_port), "--slave-port", str(slave_port),
         "--console-port", str(console_port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "Ctrl-C stops the cluster" in line or time.monotonic() > deadline:
                break
        assert any(f"127.0.0.1:{broker_port}" in ln for ln in lines), lines
        route = None
        while (route is None or len(route.broker_datas[0].broker_addrs) < 2) and time.monotonic() < deadline:
            route = _route(ns_port, "TBW102")
            time.sleep(0.1)
        assert route is not None
        # The master (id 0) and its slave (id 1) are one broker group.
        assert route.broker_datas[0].broker_addrs == {0: f"127.0.0.1:{broker_port}", 1: f"127.0.0.1:{slave_port}"}
        # The web console runs too, its URL in the banner, and shows both brokers with their roles.
        url = f"http://127.0.0.1:{console_port}/"
        assert any(url in ln for ln in lines), lines
        with urllib.request.urlopen(url + "live/cluster", timeout=10) as answer:
            page = answer.read().decode()
        assert f'data-addr="127.0.0.1:{broker_port}" data-role="MASTER"' in page, page
        assert f'data-addr="127.0.0.1:{slave_port}" data-role="SLAVE"' in page, page
        proc.send_signal(signal.SIGTERM)  # as a service manager stops it
        assert proc.wait(30) == 0
        assert not (tmp_path / "broker-a" / "abort").exists()  # both brokers shut down cleanly
        assert not (tmp_path / "broker-a-s" / "abort").exists()
        assert (tmp_path / "logs" / "namesrv.log").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    # Children are gone once the supervisor returned: their ports are free again.
    for port in (ns_port, broker_port, slave_port, console_port):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
    assert os.path.isdir(tmp_path / "conf")
