"""Permissive mode serves Apache's C++ client (no TLS in the 0.4.4 wheel) and our TLS client on
the same ports; enforcing mode refuses the C++ client with a log line naming it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ledgermq.client import Message, SendStatus
from ledgermq.client.sync import SyncProducer
from tests.compat.cluster import CLIENT_SCRIPT, HAVE_CPP_CLIENT
from tests.tls.tls_group import Member, TlsCluster, client_options, wait_for_log

pytestmark = pytest.mark.skipif(not HAVE_CPP_CLIENT, reason="the rocketmq (C++ client) wheel is not installed")

# The servers take both; their own links (registration) stay plain: tls.enable=false.
PERMISSIVE = "tls.server.mode=permissive\ntls.enable=false\ntls.config.file=TLS_FILE\n"


def _cpp_child(root: Path, namesrv: str, topic: str, bodies: list[str]) -> subprocess.Popen[bytes]:
    """A C++ client child (tests/compat/cpp_client.py) sending ``bodies`` synchronously."""
    home = root / "cpp-home"
    home.mkdir(exist_ok=True)
    spec = root / f"spec-{topic}.json"
    messages = [{"topic": topic, "body": b} for b in bodies]
    step = {"op": "send", "mode": "sync", "group": "cpp-tls", "messages": messages}
    spec.write_text(json.dumps({"namesrv": namesrv, "steps": [step]}))
    return subprocess.Popen(
        [sys.executable, str(CLIENT_SCRIPT), str(spec)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "HOME": str(home)},
    )


def _cpp_send(root: Path, namesrv: str, topic: str, bodies: list[str]) -> Any:
    child = _cpp_child(root, namesrv, topic, bodies)
    try:
        out, err = child.communicate(timeout=60)
    finally:
        child.kill()
    lines = [ln for ln in out.decode(errors="replace").splitlines() if ln.startswith("RESULT ")]
    assert lines, f"C++ client child failed: {err.decode(errors='replace')[-2000:]}"
    return json.loads(lines[-1][len("RESULT ") :])


@pytest.fixture
def permissive(tmp_path: Path) -> Iterator[tuple[TlsCluster, Member]]:
    c = TlsCluster(tmp_path / "permissive", PERMISSIVE)
    try:
        master = c.broker("master", 0, "ASYNC_MASTER", autoCreateTopicEnable="true")
        c.start(c.namesrv)
        c.start(master)
        c.wait_registered([master], client_options(c.pki))
        yield c, master
    finally:
        c.close()


def test_permissive_ports_serve_the_cpp_client_and_our_tls_client(
    permissive: tuple[TlsCluster, Member], tmp_path: Path
) -> None:
    c, _master = permissive
    result = _cpp_send(tmp_path, c.namesrv.addr, "MixedTopic", ["plain-1", "plain-2"])
    assert "error" not in result, result
    assert [r["status"] for r in result["steps"][0]["results"]] == ["OK", "OK"]
    tls = client_options(c.pki)
    with SyncProducer("tls-producer", c.namesrv.addr, use_tls=True, tls=tls) as p:
        assert p.send(Message("MixedTopic", b"over-tls")).status is SendStatus.SEND_OK
    assert "TLS: refused" not in "".join(m.log_text() for m in c.members)


def test_enforcing_refuses_the_cpp_client_with_a_log_line(tmp_path: Path) -> None:
    """The refusal is logged at once; the C++ child (which would retry for a minute) is then killed."""
    c = TlsCluster(tmp_path / "enforcing", "tls.server.mode=enforcing\ntls.enable=true\ntls.config.file=TLS_FILE\n")
    child: subprocess.Popen[bytes] | None = None
    try:
        c.start(c.namesrv)
        child = _cpp_child(tmp_path, c.namesrv.addr, "Refused", ["x"])
        line = wait_for_log(c.namesrv, "a plain (non-TLS) connection, and this port enforces TLS", timeout=30)
        assert f"on namesrv port {c.namesrv.port}" in line and "TLS: refused 127.0.0.1:" in line
    finally:
        if child is not None:
            child.kill()
            out, _ = child.communicate(timeout=10)
            assert b'"status": "OK"' not in out  # nothing was sent
        c.close()
