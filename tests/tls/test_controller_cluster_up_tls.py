"""``cluster up --tls --mode controller``: a name server with the controller inside and two
brokers in controller mode, every one in enforcing mode with mutual TLS (the dev CA the
command makes).

* The banner appears only once the slave is in the master's SyncStateSet, which the
  supervisor learns over TLS; its Python example, run as printed, sends and pulls over TLS;
  its ``roles:`` command (``ledgermq admin --tls ... getSyncStateSet``), run as printed, reads
  the set from the controller over TLS.
* Every port (name server, controller Raft port, each broker's port, the master's HA port)
  refuses a plain connection with one log line, so nothing travelled in the clear.
* kill -9 of the master: the controller elects the other broker, the supervisor's role watch
  (over TLS) says so, the example sends again, and the restarted broker returns as its slave.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ledgermq.testing.ports import free_port
from tests.cli.cluster_proc import ClusterUp, pid_of
from tests.tls.tls_group import PLAIN_REFUSED, banner_python_example, plain_probe, wait_for_log_file


def _run_example(example: str, timeout: float) -> str:
    """The example's output once it printed SEND_OK (run again until ``timeout``: right after a
    failover the name server may still route to the dead master)."""
    deadline = time.monotonic() + timeout
    while True:
        ran = subprocess.run([sys.executable, "-c", example], capture_output=True, text=True, timeout=60, check=False)
        if ran.returncode == 0 and "SEND_OK" in ran.stdout:
            return ran.stdout
        if time.monotonic() > deadline:
            raise AssertionError(f"{example}\n{ran.stdout}\n{ran.stderr}")
        time.sleep(0.2)


def _admin_line(banner: str, marker: str) -> list[str]:
    """The banner's ``ledgermq admin ...`` command after ``marker``, as argv for this Python."""
    line = next(ln for ln in banner.splitlines() if marker in ln)
    words = shlex.split(line.split(marker, 1)[1])
    assert words[:2] == ["ledgermq", "admin"], line
    return [sys.executable, "-m", "ledgermq.cli.main", *words[1:]]


@pytest.mark.timeout(180)
def test_controller_pair_with_mutual_tls_serves_the_banner_refuses_plain_and_fails_over(tmp_path: Path) -> None:
    ns_port, p1, p2 = free_port(span=2), free_port(span=3), free_port(span=3)
    up = ClusterUp("--tls", "--mode", "controller", "--data", str(tmp_path), "--namesrv-port", str(ns_port),
                   "--broker-port", str(p1), "--slave-port", str(p2), "--timeout", "60")  # fmt: skip
    try:
        up.wait_for("Ctrl-C stops the cluster", 90)
        banner = up.output
        assert "in sync: 1,2" in banner, banner  # learnt over TLS from the brokers
        assert "from rocketmq.client" not in banner and "has no TLS" in banner, banner

        example = banner_python_example(up.lines)
        assert "use_tls=True" in example, example
        assert "[b'hi']" in _run_example(example, 30)

        roles = subprocess.run(_admin_line(banner, "roles:"), capture_output=True, text=True, timeout=60, check=False)
        assert roles.returncode == 0, roles.stdout + roles.stderr
        assert roles.stdout.count("InSyncReplica:") == 2 and "NotInSyncReplica" not in roles.stdout, roles.stdout

        logs = tmp_path / "logs"
        ns_log, b1_log, b2_log = logs / "namesrv.log", logs / "broker-a-1.log", logs / "broker-a-2.log"
        for log, port in ((ns_log, ns_port), (ns_log, ns_port + 1), (b1_log, p1), (b1_log, p1 + 1), (b2_log, p2)):
            assert plain_probe(port) == b"", f"port {port} answered a plain connection"
            assert "TLS: refused 127.0.0.1:" in wait_for_log_file(log, f"port {port}: {PLAIN_REFUSED}")

        os.kill(pid_of(tmp_path, "broker-a-1"), signal.SIGKILL)
        up.wait_for(f"broker-a 2 (127.0.0.1:{p2}) is now MASTER", timeout=15)
        _run_example(example, 30)
        up.wait_for(f"broker-a 1 (127.0.0.1:{p1}) is now SLAVE", timeout=40)
        up.wait_for(f"broker-a 2 (127.0.0.1:{p2}) master, in sync now: 1,2", timeout=30)
        assert plain_probe(p2 + 1) == b""  # the new master's HA port: TLS only too
        assert "TLS: refused 127.0.0.1:" in wait_for_log_file(b2_log, f"port {p2 + 1}: {PLAIN_REFUSED}")
        assert up.interrupt() == 0, up.output
    finally:
        up.kill()
