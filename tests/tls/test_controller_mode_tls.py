"""A controller-mode pair (master + slave + controller) in enforcing mode with mutual TLS, as
real processes, with the controller inside the name server and as three standalone nodes.

* Sends are acknowledged only once the slave holds them (allAckInSyncStateSet), and the
  slave joined the SyncStateSet only because the master's proposal reached the controller:
  so the HA stream, the brokers' controller requests and heartbeats (and, standalone, the
  controller's Raft messages: a leader is elected and commits the brokers' registrations)
  all ran over TLS.
* ``ledgermq admin --tls ... getSyncStateSet`` reads the set from the controller; the same
  command without ``--tls`` is refused.
* Every port (name server, controller Raft ports, each broker's port and HA port) refuses a
  plain connection with one log line, so nothing travelled in the clear.
* SIGKILL of the master: the controller (over TLS) elects the slave, writes resume on it,
  and it serves every message acknowledged before the kill.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from ledgermq.cli.main import cli
from ledgermq.client import ConsumeFromWhere, Message, SendStatus
from ledgermq.client.sync import SyncLitePullConsumer, SyncProducer
from ledgermq.client.tls import TlsOptions
from tests.tls.tls_controller_group import TlsControllerGroup
from tests.tls.tls_group import GROUP, PLAIN_REFUSED, Member, client_options, plain_probe, wait_for_log

ENFORCING = "tls.server.mode=enforcing\ntls.enable=true\ntls.config.file=TLS_FILE\n"
TOPIC = "CtlTlsTopic"


@pytest.fixture(scope="module", params=["embedded", "standalone"])
def group(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsControllerGroup]:
    g = TlsControllerGroup(
        tmp_path_factory.mktemp(f"ctl-tls-{request.param}"), ENFORCING, embedded=request.param == "embedded"
    )
    try:
        a = g.controlled_broker("a")
        b = g.controlled_broker("b")
        g.start_controllers()
        tls = client_options(g.pki)
        g.start(a)  # the first replica to register becomes master
        g.wait_role(a, "MASTER", tls)
        g.start(b)
        g.wait_role(b, "SLAVE", tls)
        g.wait_in_sync(a, 2, tls)
        yield g
    finally:
        g.close()


def _broker(g: TlsControllerGroup, name: str) -> Member:
    return next(m for m in g.members if m.name == name)


def _admin(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["admin", *args])
    return result.exit_code, result.output


def _tls_flags(tls: TlsOptions) -> list[str]:
    return ["--tls", "--tls-trust-cert", tls.trust_cert_path, "--tls-cert", tls.cert_path, "--tls-key", tls.key_path]


def _send_until_ok(p: SyncProducer, body: bytes, timeout: float) -> float:
    """Seconds until ``body`` is acknowledged SEND_OK (failed attempts retried until ``timeout``)."""
    start = time.monotonic()
    last: object = None
    while time.monotonic() - start < timeout:
        try:
            result = p.send(Message(TOPIC, body))
            if result.status is SendStatus.SEND_OK:
                return time.monotonic() - start
            last = result.status
        except Exception as exc:  # no master yet, a stale route: try again
            last = exc
        time.sleep(0.1)
    raise AssertionError(f"no SEND_OK within {timeout:.0f}s (last: {last!r})")


def _refuse_plain(ports: list[tuple[Member, int]]) -> None:
    for member, port in ports:
        assert plain_probe(port) == b"", f"{member.name}'s port {port} answered a plain connection"
        line = wait_for_log(member, f"port {port}: {PLAIN_REFUSED}")
        assert "TLS: refused 127.0.0.1:" in line


def test_controller_mode_over_mutual_tls_replicates_refuses_plain_and_fails_over(group: TlsControllerGroup) -> None:
    tls = client_options(group.pki)
    a, b = _broker(group, "a"), _broker(group, "b")
    ns = group.namesrv.addr
    bodies = [f"ctl-tls-{i}".encode() for i in range(20)]
    with SyncProducer("ctl-tls-producer", ns, use_tls=True, tls=tls, send_timeout=5.0) as p:
        for body in bodies:
            assert p.send(Message(TOPIC, body)).status is SendStatus.SEND_OK  # b holds it too
        master_end = int(group.info(a, tls)["commitLogMaxOffset"])
        assert master_end > 0 and int(group.info(b, tls)["commitLogMaxOffset"]) == master_end

        # admin -> controller over TLS; the same request in the clear is refused
        code, out = _admin(*_tls_flags(tls), "getSyncStateSet", "-a", group.controller_addr, "-b", GROUP)
        assert code == 0, out
        assert out.count("InSyncReplica:") == 2 and "NotInSyncReplica" not in out, out
        code, out = _admin("getSyncStateSet", "-a", group.controller_addr, "-b", GROUP)
        assert code != 0 and "no controller answered" in out, out

        # no plain link anywhere: every port of every process refuses the clear
        ports = [(group.namesrv, group.namesrv.port)]
        ports += [(c, c.port) for c in group.controllers] or [(group.namesrv, group.raft_ports[0])]
        ports += [(a, a.port), (a, a.port + 1), (b, b.port)]  # a slave opens its HA port once master
        _refuse_plain(ports)
        for m in group.members:
            assert "TLS: mode=enforcing, client=tls, clientAuth=require" in m.log_text(), m.name

        a.server.kill()  # SIGKILL: the controller elects b, over TLS
        killed = time.monotonic()
        group.wait_role(b, "MASTER", tls)
        took = _send_until_ok(p, b"after-failover", 30.0)
        print(f"\nSIGKILL of the master -> SEND_OK on the new master: {time.monotonic() - killed:.2f}s")
        assert took < 30.0
        _refuse_plain([(b, b.port + 1)])  # the new master's HA port

    first = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    got: set[bytes] = set()
    with SyncLitePullConsumer("ctl-tls-consumer", ns, consume_from_where=first, use_tls=True, tls=tls) as c:
        c.subscribe(TOPIC)
        deadline = time.monotonic() + 30
        while not set(bodies) | {b"after-failover"} <= got and time.monotonic() < deadline:
            got |= {m.body for m in c.poll(timeout=1)}
    assert set(bodies) | {b"after-failover"} <= got, sorted(got)
