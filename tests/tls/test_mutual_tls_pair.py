"""A SYNC_MASTER pair and its name server in enforcing mode with mutual TLS, as real processes.

Sends are acknowledged only once the slave has the message (SYNC_MASTER), so SEND_OK proves
the HA stream ran over TLS; every port (name server, master, master's HA port, slave) refuses
a plain connection with one log line, so nothing could have travelled in the clear. The
same processes serve ``openssl s_client`` the configured certificate over TLS 1.3, and
refuse a client certificate from another CA, an expired one and none at all, each with a
log line naming the peer and the reason; the broker's metrics count all of it.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledgermq.admin.client import AdminClient
from ledgermq.client import ConsumeFromWhere, Message, SendStatus
from ledgermq.client.sync import SyncLitePullConsumer, SyncProducer
from ledgermq.net.tls.devca import DevCA
from ledgermq.testing.ports import free_port
from tests.tls.tls_group import HOST, TlsCluster, client_options, plain_probe, wait_for_log

ENFORCING = "tls.server.mode=enforcing\ntls.enable=true\ntls.config.file=TLS_FILE\n"
OPENSSL = shutil.which("openssl")


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsCluster]:
    c = TlsCluster(tmp_path_factory.mktemp("mtls"), ENFORCING)
    try:
        master = c.broker("master", 0, "SYNC_MASTER", metricsPort=free_port(), metricsHost=HOST)
        slave = c.broker("slave", 1, "SLAVE")
        c.start(c.namesrv)
        c.start(master)
        c.start(slave)
        c.wait_registered([master, slave], client_options(c.pki))
        yield c
    finally:
        c.close()


def _master(c: TlsCluster):  # type: ignore[no-untyped-def]
    return next(m for m in c.members if m.name == "master")


def test_sends_pulls_and_replication_run_over_mutual_tls(pair: TlsCluster) -> None:
    tls = client_options(pair.pki)
    bodies = [f"tls-{i}".encode() for i in range(20)]
    with SyncProducer("tls-producer", pair.namesrv.addr, use_tls=True, tls=tls, send_timeout=10.0) as p:
        for body in bodies:
            result = p.send(Message("TlsTopic", body))
            assert result.status is SendStatus.SEND_OK  # SYNC_MASTER: the slave has it
    first = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    got: list[bytes] = []
    with SyncLitePullConsumer("tls-consumer", pair.namesrv.addr, consume_from_where=first, use_tls=True, tls=tls) as c:
        c.subscribe("TlsTopic")
        for _ in range(20):
            got += [m.body for m in c.poll(timeout=1)]
            if len(got) >= len(bodies):
                break
    assert sorted(got) == sorted(bodies)

    async def ha() -> tuple[int, list[int]]:
        async with AdminClient(pair.namesrv.addr, tls=tls) as admin:
            info = await admin.ha_status(_master(pair).addr)
        return info.master_commit_log_max_offset, [c.slave_ack_offset for c in info.connections]

    master_max, acks = asyncio.run(ha())
    assert master_max > 0 and acks == [master_max]


def test_every_port_refuses_plain_connections_with_a_logged_reason(pair: TlsCluster) -> None:
    master = _master(pair)
    slave = next(m for m in pair.members if m.name == "slave")
    for member, port in (
        (pair.namesrv, pair.namesrv.port),
        (master, master.port),
        (master, master.port + 1),
        (slave, slave.port),
    ):
        assert plain_probe(port) == b"", f"port {port} answered a plain connection"
        line = wait_for_log(member, f"port {port}: a plain (non-TLS) connection, and this port enforces TLS")
        assert "TLS: refused 127.0.0.1:" in line
    text = urllib.request.urlopen(f"http://{HOST}:{_metrics_port(master)}/metrics", timeout=5).read().decode()
    assert "ledgermq_tls_handshake_failures_total{" in text and 'reason="plain-on-enforcing"' in text
    assert 'direction="in",transport="tls"' in text and 'direction="out",transport="tls"' in text


def _metrics_port(member) -> int:  # type: ignore[no-untyped-def]
    conf = Path(member.server.args[-1]).read_text()
    return int(next(line.split("=", 1)[1] for line in conf.splitlines() if line.startswith("metricsPort=")))


def _s_client(port: int, *args: str) -> subprocess.CompletedProcess[str]:
    assert OPENSSL is not None
    return subprocess.run(
        [OPENSSL, "s_client", "-connect", f"{HOST}:{port}", "-brief", *args],
        input="",
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )


@pytest.mark.skipif(OPENSSL is None, reason="openssl is not installed")
def test_openssl_sees_the_certificate_and_protocol_and_bad_clients_are_refused(
    pair: TlsCluster, tmp_path: Path
) -> None:
    pki = pair.pki
    master = _master(pair)
    good = _s_client(
        master.port,
        "-CAfile",
        str(pki.ca.cert_path),
        "-cert",
        str(pki.client.cert_path),
        "-key",
        str(pki.client.key_path),
    )
    out = good.stdout + good.stderr
    assert "Protocol version: TLSv1.3" in out, out
    assert "Verification: OK" in out and "CN = ledgermq server" in out, out

    def refused(reason: str, *args: str) -> str:
        before = master.log_text().count(reason)
        _s_client(master.port, "-CAfile", str(pki.ca.cert_path), *args)
        for _ in range(200):
            if master.log_text().count(reason) > before:
                return [ln for ln in master.log_text().splitlines() if reason in ln][-1]
            time.sleep(0.05)
        raise AssertionError(f"no {reason!r} refusal logged")

    line = refused("no client certificate")
    assert f"on broker {'broker-tls'}/0 port {master.port}" in line and "TLS: refused 127.0.0.1:" in line
    stranger = DevCA("another CA").issue("stranger", tmp_path / "s.pem", tmp_path / "s.key")
    refused("not signed by a trusted CA", "-cert", str(stranger.cert_path), "-key", str(stranger.key_path))
    past = dt.datetime.now(dt.UTC) - dt.timedelta(days=2)
    ca = _reload_ca(pki)
    expired = ca.issue(
        "old", tmp_path / "o.pem", tmp_path / "o.key", valid_from=past, valid_until=past + dt.timedelta(days=1)
    )
    refused("expired", "-cert", str(expired.cert_path), "-key", str(expired.key_path))


def _reload_ca(pki):  # type: ignore[no-untyped-def]
    return DevCA.load(pki.ca.cert_path, Path(str(pki.ca.key_path)))
