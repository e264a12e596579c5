"""The broker's registration with name servers costs O(change) (RocketMQ 4.9's scheme).

A fake remoting client hands out connections to an in-memory name server that runs the
real name-server processors over a real RouteInfo, so what the broker sends is decoded and
applied exactly as a name server would; the test sees every request and can hold answers,
restart the name server (new state, new connection) or make it unreachable. Every wait is
bounded by a deadline; no test relies on a sleep for correctness.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledgermq.broker.config import BrokerConfig
from ledgermq.broker.registration import Registrar
from ledgermq.broker.registration_requests import COMPRESS_MIN_TOPICS
from ledgermq.broker.topics import TopicConfigManager
from ledgermq.clock import SYSTEM_CLOCK, ManualClock
from ledgermq.namesrv import processors
from ledgermq.namesrv.kvconfig import KVConfig
from ledgermq.namesrv.routeinfo import RouteInfo
from ledgermq.net.client import ConnectError
from ledgermq.protocol.codes import RequestCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.headers import bool_field
from ledgermq.protocol.register_body import decode_register_body
from ledgermq.protocol.route import DataVersion, TopicConfig
from tests.broker.harness import broker_config

NAMESRV = "127.0.0.1:9"  # never dialled: the fake client answers
BROKER_ADDR = "127.0.0.1:10911"


@dataclass(frozen=True)
class Seen:
    """One request as the name server got it."""

    code: int
    compressed: bool = False
    topics: frozenset[str] = frozenset()
    version: DataVersion | None = None


class FakeConnection:
    def __init__(self, ns: MemoryNameServer) -> None:
        self.ns = ns
        self.is_open = True

    async def request(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        return await self.ns.handle(self, cmd)


class MemoryNameServer:
    """Real name-server processors over a RouteInfo; ``restart`` loses everything and
    drops the connection, as a restarted process does."""

    def __init__(self) -> None:
        self.clock = ManualClock()
        self.state = processors.NamesrvState(RouteInfo(), KVConfig(None), self.clock)
        self.conn = FakeConnection(self)
        self.seen: list[Seen] = []
        self.arrived = asyncio.Condition()
        self.release = asyncio.Event()
        self.release.set()
        self.down = False

    # the part of RemotingClient the registrar uses
    async def connection(self, addr: str) -> FakeConnection:
        if self.down:
            raise ConnectError(f"cannot connect to {addr}: refused")
        return self.conn

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        return await (await self.connection(addr)).request(cmd, timeout)

    async def handle(self, conn: FakeConnection, cmd: RemotingCommand) -> RemotingCommand:
        if conn is not self.conn:
            raise ConnectionError("connection closed")
        seen = Seen(cmd.code)
        if cmd.code == RequestCode.REGISTER_BROKER:
            compressed = bool_field(cmd, "compressed")
            body = decode_register_body(cmd.body, compressed)
            seen = Seen(cmd.code, compressed, frozenset(body.topic_configs), body.data_version)
        async with self.arrived:
            self.seen.append(seen)
            self.arrived.notify_all()
        await self.release.wait()
        ctx: Any = type("Ctx", (), {"connection": conn, "peer": "broker"})()
        fn = processors.PROCESSORS[cmd.code]
        resp: RemotingCommand = await fn(self.state, ctx, cmd)
        return resp

    def restart(self) -> None:
        self.state = processors.NamesrvState(RouteInfo(), KVConfig(None), self.clock)
        self.conn.is_open = False
        self.conn = FakeConnection(self)

    def registrations(self) -> list[Seen]:
        return [s for s in self.seen if s.code == RequestCode.REGISTER_BROKER]

    def queries(self) -> list[Seen]:
        return [s for s in self.seen if s.code == RequestCode.QUERY_DATA_VERSION]

    async def wait_for(self, what: str, check: Callable[[], bool], timeout: float = 5.0) -> None:
        try:
            async with asyncio.timeout(timeout), self.arrived:
                await self.arrived.wait_for(check)
        except TimeoutError:
            raise AssertionError(f"timed out waiting for {what}; seen {self.seen}") from None

    def routed(self, topic: str) -> bool:
        return self.state.routes.route(topic) is not None


@asynccontextmanager
async def registering(
    tmp_path: Path, period_s: float = 60.0, **overrides: Any
) -> AsyncIterator[tuple[TopicConfigManager, MemoryNameServer, Registrar]]:
    """A registrar wired as BrokerApp wires it (topic changes -> topic_changed), after its
    start-up full registration has been answered."""
    config: BrokerConfig = broker_config(10911, namesrv_addr=NAMESRV, **overrides)
    topics = TopicConfigManager(tmp_path / "topics.json", config, SYSTEM_CLOCK)
    topics.load()
    ns = MemoryNameServer()
    registrar = Registrar(config, topics, ns, period_s=period_s)  # type: ignore[arg-type]
    topics.on_change.append(registrar.topic_changed)
    registrar.start()
    try:
        await ns.wait_for("the start-up registration", lambda: len(ns.registrations()) == 1)
        await registrar.sync()
        yield topics, ns, registrar
    finally:
        await registrar.stop()


def test_startup_sends_the_full_table_then_an_increment_carries_only_the_changed_topic(tmp_path: Path) -> None:
    async def main() -> None:
        async with registering(tmp_path) as (topics, ns, registrar):
            first = ns.registrations()[0]
            assert first.topics == frozenset(topics.table) and "TBW102" in first.topics
            topics.update(TopicConfig("Changed", 2, 2))
            await registrar.sync()
            increment = ns.registrations()[-1]
            assert len(ns.registrations()) == 2
            assert increment.topics == {"Changed"} and not increment.compressed
            assert increment.version == topics.data_version
            # the name server kept every other topic (upsert) and stores the new version
            assert ns.routed("Changed") and ns.routed("TBW102")
            assert ns.state.routes.live[BROKER_ADDR].data_version == topics.data_version

    asyncio.run(main())


def test_concurrent_creates_share_one_increment(tmp_path: Path) -> None:
    """16 creates in one burst, each waiting as UPDATE_AND_CREATE_TOPIC waits: one
    REGISTER_BROKER carries all of them, and every creator sees its route when answered."""

    async def main() -> None:
        async with registering(tmp_path) as (topics, ns, registrar):
            before = len(ns.registrations())

            async def create(i: int) -> bool:
                topics.update(TopicConfig(f"Burst{i}", 4, 4))
                await registrar.sync()
                return ns.routed(f"Burst{i}")

            assert all(await asyncio.gather(*(create(i) for i in range(16))))
            increments = ns.registrations()[before:]
            assert len(increments) == 1, increments
            assert increments[0].topics == {f"Burst{i}" for i in range(16)}

    asyncio.run(main())


def test_creates_during_an_increment_in_flight_share_the_next_one(tmp_path: Path) -> None:
    async def main() -> None:
        async with registering(tmp_path) as (topics, ns, registrar):
            ns.release.clear()  # hold the answers
            topics.update(TopicConfig("First", 1, 1))
            first = asyncio.create_task(registrar.sync())
            await ns.wait_for("the first increment", lambda: len(ns.registrations()) == 2)
            waiting = []
            for i in range(5):
                topics.update(TopicConfig(f"Later{i}", 1, 1))
                waiting.append(asyncio.create_task(registrar.sync()))
            ns.release.set()
            await asyncio.gather(first, *waiting)
            regs = ns.registrations()
            assert [r.topics for r in regs[1:]] == [{"First"}, {f"Later{i}" for i in range(5)}]

    asyncio.run(main())


def test_query_data_version_is_the_heartbeat_no_full_body_while_versions_agree(tmp_path: Path) -> None:
    async def main() -> None:
        async with registering(tmp_path, period_s=0.05) as (_topics, ns, _registrar):
            ns.clock.advance(60.0)
            await ns.wait_for("three periodic queries", lambda: len(ns.queries()) >= 3)
            assert len(ns.registrations()) == 1  # only the start-up one
            live = ns.state.routes.live[BROKER_ADDR]
            assert live.last_update_ms == ns.clock.wall_ms()  # refreshed by the query

    asyncio.run(main())


def test_a_restarted_name_server_gets_the_full_table_at_the_next_period(tmp_path: Path) -> None:
    async def main() -> None:
        async with registering(tmp_path, period_s=0.1) as (topics, ns, registrar):
            for i in range(COMPRESS_MIN_TOPICS):
                topics.update(TopicConfig(f"Many{i}", 1, 1))
            await registrar.sync()
            ns.restart()
            await ns.wait_for("a full registration after the restart", lambda: len(ns.registrations()) >= 3)
            full = ns.registrations()[-1]
            assert full.compressed and full.topics == frozenset(topics.table)
            assert all(ns.routed(name) for name in topics.table)

    asyncio.run(main())


def test_a_name_server_that_forgot_us_on_the_same_connection_gets_the_full_table(tmp_path: Path) -> None:
    """Expired (or a missed increment) without a new connection: the periodic query finds
    another version and the full table follows."""

    async def main() -> None:
        async with registering(tmp_path, period_s=0.05) as (topics, ns, registrar):
            ns.state.routes.remove_broker_addr(BROKER_ADDR)
            await ns.wait_for("a query, then a full registration", lambda: len(ns.registrations()) == 2)
            assert ns.seen[-2].code == RequestCode.QUERY_DATA_VERSION
            assert ns.registrations()[-1].topics == frozenset(topics.table)
            await registrar.sync()
            assert ns.routed("TBW102")

    asyncio.run(main())


def test_a_change_after_a_restart_goes_as_the_full_table_not_an_increment(tmp_path: Path) -> None:
    """A new connection means the name server may know nothing of us: an increment would
    leave it one topic under the current version, which no periodic query would notice."""

    async def main() -> None:
        async with registering(tmp_path) as (topics, ns, registrar):
            ns.restart()
            topics.update(TopicConfig("AfterRestart", 1, 1))
            await registrar.sync()
            last = ns.registrations()[-1]
            assert last.topics == frozenset(topics.table)
            assert ns.routed("AfterRestart") and ns.routed("TBW102")

    asyncio.run(main())


def test_a_failed_increment_is_retried_as_the_full_table(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr("ledgermq.broker.registration.RETRY_S", 0.05)

    async def main() -> None:
        async with registering(tmp_path) as (topics, ns, registrar):
            ns.down = True
            topics.update(TopicConfig("WhileDown", 1, 1))
            await registrar.sync(timeout=2.0)  # the failed attempt counts as done
            assert not ns.routed("WhileDown")
            ns.down = False
            await ns.wait_for("the retry", lambda: len(ns.registrations()) == 2)
            assert ns.registrations()[-1].topics == frozenset(topics.table)

    asyncio.run(main())


def test_force_register_sends_the_full_table_every_period(tmp_path: Path) -> None:
    async def main() -> None:
        async with registering(tmp_path, period_s=0.05, force_register=True) as (topics, ns, _registrar):
            await ns.wait_for("two periodic full registrations", lambda: len(ns.registrations()) >= 3)
            assert ns.queries() == []
            assert all(r.topics == frozenset(topics.table) for r in ns.registrations())

    asyncio.run(main())


def test_compressed_register_false_sends_plain_json_however_large(tmp_path: Path) -> None:
    async def main() -> None:
        async with registering(tmp_path, compressed_register=False) as (topics, ns, registrar):
            for i in range(COMPRESS_MIN_TOPICS):
                topics.update(TopicConfig(f"Many{i}", 1, 1))
            registrar.kick()
            await registrar.sync()
            assert not ns.registrations()[-1].compressed
            assert ns.registrations()[-1].topics == frozenset(topics.table)

    asyncio.run(main())


def test_a_slave_registers_every_period_without_a_table(tmp_path: Path) -> None:
    """Name servers read topics only from brokerId 0; the slave registers for the answer
    (its master's address), which a QUERY_DATA_VERSION would not give it."""

    async def main() -> None:
        async with registering(tmp_path, period_s=0.05, broker_id=1) as (topics, ns, _registrar):
            await ns.wait_for("periodic registrations", lambda: len(ns.registrations()) >= 3)
            assert ns.queries() == []
            assert all(r.topics == frozenset() for r in ns.registrations())
            assert ns.state.routes.live[BROKER_ADDR].data_version == topics.data_version

    asyncio.run(main())


def test_a_held_back_registration_sends_nothing_until_the_reason_is_gone(tmp_path: Path) -> None:
    """A DLedger leader whose leadership is not current (paused past an election timeout)
    must not claim brokerId 0: the registrar asks ``hold_back`` before every send."""

    async def main() -> None:
        config = broker_config(10911, namesrv_addr=NAMESRV)
        topics = TopicConfigManager(tmp_path / "topics.json", config, SYSTEM_CLOCK)
        topics.load()
        ns = MemoryNameServer()
        reason: list[str | None] = ["leadership not current"]
        registrar = Registrar(config, topics, ns, hold_back=lambda _cfg: reason[0])  # type: ignore[arg-type]
        topics.on_change.append(registrar.topic_changed)
        registrar.start()
        try:
            topics.update(TopicConfig("Held", 1, 1))
            await registrar.sync(timeout=2.0)
            assert ns.seen == []
            reason[0] = None
            registrar.kick()
            await registrar.sync(timeout=2.0)
            assert len(ns.registrations()) == 1 and ns.registrations()[0].topics == frozenset(topics.table)
        finally:
            await registrar.stop()

    asyncio.run(main())


def test_force_register_and_compressed_register_are_read_from_broker_conf() -> None:
    from ledgermq.cli.broker_cmd import load_broker_configs

    base = {"brokerName": "b", "brokerIP1": "127.0.0.1"}
    default, _ = load_broker_configs(base)
    assert (default.force_register, default.compressed_register) == (False, True)
    cfg, _ = load_broker_configs({**base, "forceRegister": "true", "compressedRegister": "false"})
    assert (cfg.force_register, cfg.compressed_register) == (True, False)
