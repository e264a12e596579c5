"""The broker's registration loop: a topic change always reaches the name servers at once.

A fake remoting client stands in for the name server, so each registration round is seen
and held exactly where the test wants it; no sleeps, every wait bounded.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from ledgermq.broker.registration import Registrar
from ledgermq.broker.topics import TopicConfigManager
from ledgermq.clock import SYSTEM_CLOCK
from ledgermq.protocol.codes import ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.route import RegisterBrokerBody, TopicConfig
from tests.broker.harness import broker_config

NAMESRV = "127.0.0.1:9"  # never dialled: the fake client answers


class HeldNameServer:
    """Records the topics of every REGISTER_BROKER and holds each answer until released."""

    def __init__(self) -> None:
        self.rounds: list[set[str]] = []
        self.arrived = asyncio.Condition()
        self.release = asyncio.Event()

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        async with self.arrived:
            self.rounds.append(set(RegisterBrokerBody.decode(cmd.body or b"").topic_configs))
            self.arrived.notify_all()
        await self.release.wait()
        return cmd.response(ResponseCode.SUCCESS)

    async def wait_rounds(self, n: int, timeout: float = 5.0) -> None:
        async with asyncio.timeout(timeout), self.arrived:
            await self.arrived.wait_for(lambda: len(self.rounds) >= n)


@asynccontextmanager
async def registering(tmp_path: Path) -> AsyncIterator[tuple[TopicConfigManager, HeldNameServer]]:
    """A registrar wired as the broker wires it (topic changes kick it), with a 60 s period so
    that only a kick can bring a second round within a test's timeouts."""
    config = broker_config(10911, namesrv_addr=NAMESRV, register_name_server_period_ms=60_000)
    topics = TopicConfigManager(tmp_path / "topics.json", config, SYSTEM_CLOCK)
    topics.load()
    namesrv = HeldNameServer()
    registrar = Registrar(config, topics, namesrv)  # type: ignore[arg-type]
    topics.on_change.append(lambda _tc: registrar.kick())
    registrar.start()
    try:
        await namesrv.wait_rounds(1)  # the start-up round is in flight, its answer held
        yield topics, namesrv
    finally:
        await registrar.stop()


def test_a_topic_created_during_a_registration_round_gets_its_own_round(tmp_path: Path) -> None:
    async def main() -> None:
        async with registering(tmp_path) as (topics, namesrv):
            topics.update(TopicConfig("CreatedMidRound", 2, 2))
            assert "CreatedMidRound" not in namesrv.rounds[0]
            namesrv.release.set()
            await namesrv.wait_rounds(2)
            assert "CreatedMidRound" in namesrv.rounds[1]

    asyncio.run(main())


def test_kicks_during_a_round_collapse_into_one_more_round(tmp_path: Path) -> None:
    async def main() -> None:
        async with registering(tmp_path) as (topics, namesrv):
            for i in range(5):
                topics.update(TopicConfig(f"Burst{i}", 1, 1))
            namesrv.release.set()
            await namesrv.wait_rounds(2)
            assert {f"Burst{i}" for i in range(5)} <= namesrv.rounds[1]
            await asyncio.sleep(0.2)  # a bounded look for an unwanted third round
            assert len(namesrv.rounds) == 2

    asyncio.run(main())


def test_a_held_back_registration_sends_nothing_until_the_reason_is_gone(tmp_path: Path) -> None:
    """A DLedger leader whose leadership is not current (paused past an election timeout)
    must not claim brokerId 0: the registrar asks ``hold_back`` before every round."""

    async def main() -> None:
        config = broker_config(10911, namesrv_addr=NAMESRV, register_name_server_period_ms=60_000)
        topics = TopicConfigManager(tmp_path / "topics.json", config, SYSTEM_CLOCK)
        topics.load()
        namesrv = HeldNameServer()
        namesrv.release.set()
        reason: list[str | None] = ["leadership not current"]
        asked: list[int] = []

        def hold_back(cfg: object) -> str | None:
            asked.append(1)
            return reason[0]

        registrar = Registrar(config, topics, namesrv, hold_back=hold_back)  # type: ignore[arg-type]
        assert await registrar.register_all() == []
        await registrar.register_oneway()
        assert len(asked) == 2 and namesrv.rounds == []
        reason[0] = None
        assert len(await registrar.register_all()) == 1
        assert len(namesrv.rounds) == 1

    asyncio.run(main())
