"""``ledgermq cluster up`` as an operator meets it: a taken port stops it at once with one
line naming the port; a killed master is restarted while the slave serves reads, and
catches up; SIGINT stops everything with every store cleanly stopped."""

from __future__ import annotations

import fcntl
import os
import signal
import socket
from pathlib import Path

from ledgermq.testing.ports import free_port
from tests.cli.cluster_proc import ClusterUp, pid_of, pull_bodies, send


def _args(data: Path, ns_port: int, broker_port: int, slave_port: int) -> list[str]:
    return ["--data", str(data), "--namesrv-port", str(ns_port), "--broker-port", str(broker_port),
            "--slave-port", str(slave_port), "--timeout", "25"]  # fmt: skip


def test_a_taken_port_stops_cluster_up_at_once_with_one_line_naming_it(tmp_path: Path) -> None:
    ns_port, broker_port, slave_port = free_port(), free_port(span=3), free_port(span=3)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", broker_port + 1))  # the master's HA port
        taken.listen()
        up = ClusterUp(*_args(tmp_path, ns_port, broker_port, slave_port))
        try:
            rc = up.finish(timeout=20)  # less than its --timeout 25: it did not wait for a start-up
        finally:
            up.kill()
    assert rc != 0
    lines = [ln for ln in up.lines if ln.strip()]
    assert len(lines) == 1, up.output
    assert f"port {broker_port + 1}" in lines[0] and "HA port" in lines[0] and "--broker-port" in lines[0]
    assert not (tmp_path / "logs").exists()  # nothing was started
    assert not (tmp_path / "run").exists()


def test_a_killed_master_is_restarted_while_the_slave_serves_reads(tmp_path: Path) -> None:
    ns_port, broker_port, slave_port = free_port(), free_port(span=3), free_port(span=3)
    master, slave = f"127.0.0.1:{broker_port}", f"127.0.0.1:{slave_port}"
    up = ClusterUp(*_args(tmp_path, ns_port, broker_port, slave_port))
    try:
        up.wait_for("Ctrl-C stops the cluster", timeout=40)
        assert f"http://127.0.0.1:{broker_port + 2}/metrics" in up.output
        send(master, "KillTopic", b"before-kill")
        pull_bodies(slave, "KillTopic", b"before-kill", timeout=10)  # replicated

        os.kill(pid_of(tmp_path, "broker-a"), signal.SIGKILL)
        up.wait_for("master broker-a exited with -9; restarting in 1 s", timeout=5)
        pull_bodies(slave, "KillTopic", b"before-kill", timeout=5)  # the slave serves while the master is down
        up.wait_for("master broker-a is back", timeout=20)
        assert up.proc.poll() is None  # nothing else stopped

        send(master, "KillTopic", b"after-return")
        pull_bodies(master, "KillTopic", b"after-return", timeout=5)
        pull_bodies(slave, "KillTopic", b"after-return", timeout=10)  # the slave follows the returned master

        assert up.interrupt() == 0
    finally:
        up.kill()
    for store in ("broker-a", "broker-a-s"):
        assert not (tmp_path / store / "abort").exists(), store  # cleanly stopped
    assert not list((tmp_path / "run").glob("*.pid"))


def test_a_process_failing_at_start_up_is_reported_with_its_cause_and_the_rest_stopped(tmp_path: Path) -> None:
    ns_port, broker_port, slave_port = free_port(), free_port(span=3), free_port(span=3)
    store = tmp_path / "broker-a"
    store.mkdir(parents=True)
    with open(store / "lock", "w") as lock:  # another process holds the master's store
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        up = ClusterUp(*_args(tmp_path, ns_port, broker_port, slave_port))
        try:
            rc = up.finish(timeout=30)
        finally:
            up.kill()
    assert rc != 0
    assert "Ctrl-C stops the cluster" not in up.output  # no banner for a cluster that is not up
    line = next(ln for ln in up.lines if "exited with 1 during start-up" in ln)
    assert line.startswith("Error: master broker-a exited with 1") and f"{store} is in use" in line, up.output
    assert not (tmp_path / "run" / "namesrv.pid").exists()  # the name server was stopped
    with socket.socket() as s:  # and its port is free again
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", ns_port))
