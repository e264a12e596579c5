"""Registering with every name server: at start, every registerNameServerPeriod, on topic
changes, and unregistering at shutdown. Each name server is independent: one that is down
does not delay the others, and every failure is logged and retried next period."""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from ledgermq.broker.config import BrokerConfig
from ledgermq.broker.topics import TopicConfigManager
from ledgermq.net.client import RemotingClient
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.route import PERM_WRITE, RegisterBrokerBody, TopicConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RegistrationAnswer:
    namesrv: str
    master_addr: str | None
    ha_server_addr: str | None


class Registrar:
    def __init__(
        self,
        config: BrokerConfig,
        topics: TopicConfigManager,
        client: RemotingClient,
        on_answer: Callable[[RegistrationAnswer], None] | None = None,
        hold_back: Callable[[BrokerConfig], str | None] | None = None,
    ) -> None:
        self.config = config
        self.topics = topics
        self.client = client
        self.on_answer = on_answer
        self.hold_back = hold_back
        """Asked before each registration: a reason not to register as ``config`` says now
        (a DLedger leader that cannot be sure it still leads), or None."""
        self._task: asyncio.Task[None] | None = None
        self._kick = asyncio.Event()

    def _body(self) -> bytes:
        perm = self.config.broker_permission
        configs = {}
        for name, tc in self.topics.table.items():
            if not perm & PERM_WRITE:  # a read-only broker advertises its topics read-only
                tc = TopicConfig(
                    tc.topic_name, tc.read_queue_nums, tc.write_queue_nums, tc.perm & perm,
                    tc.topic_filter_type, tc.topic_sys_flag, tc.order,
                )  # fmt: skip
            configs[name] = tc
        return RegisterBrokerBody(self.topics.data_version, configs).encode()

    def _held_back(self) -> bool:
        reason = self.hold_back(self.config) if self.hold_back is not None else None
        if reason is not None:
            log.info("not registering as brokerId %d now: %s", self.config.broker_id, reason)
        return reason is not None

    async def register_all(self) -> list[RegistrationAnswer]:
        if self._held_back():
            return []
        body = self._body()
        results = await asyncio.gather(
            *(self._register(addr, body) for addr in self.config.namesrv_addrs), return_exceptions=True
        )
        answers = [r for r in results if isinstance(r, RegistrationAnswer)]
        for answer in answers:
            if self.on_answer is not None:
                self.on_answer(answer)
        return answers

    async def register_oneway(self, timeout: float = 1.0) -> None:
        """Push the current topics to every name server without waiting for answers.

        Called before answering a send that created a topic (RocketMQ registers oneway
        there too), so a client's next route lookup already finds it; bounded, so a dead
        name server costs a send at most ``timeout``.
        """
        if self._held_back():
            return
        body = self._body()

        async def one(addr: str) -> None:
            try:
                async with asyncio.timeout(timeout):
                    await self.client.invoke_oneway(addr, self._command(body))
            except Exception as exc:
                log.warning("oneway registration with %s failed: %s", addr, exc)

        await asyncio.gather(*(one(addr) for addr in self.config.namesrv_addrs))

    def _command(self, body: bytes) -> RemotingCommand:
        cfg = self.config
        return RemotingCommand.request(
            RequestCode.REGISTER_BROKER,
            {
                "brokerAddr": cfg.broker_addr,
                "brokerId": cfg.broker_id,
                "brokerName": cfg.broker_name,
                "clusterName": cfg.cluster_name,
                "haServerAddr": cfg.ha_server_addr,
                "compressed": False,
                "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF,
            },
            body,
        )

    async def _register(self, namesrv: str, body: bytes) -> RegistrationAnswer:
        cfg = self.config
        cmd = self._command(body)
        try:
            resp = await self.client.invoke(namesrv, cmd, cfg.register_broker_timeout_ms / 1000)
        except Exception as exc:
            log.warning("register with name server %s failed: %s", namesrv, exc)
            raise
        if resp.code != ResponseCode.SUCCESS:
            log.warning("name server %s refused registration: %s %s", namesrv, resp.code, resp.remark)
            raise RuntimeError(resp.remark)
        return RegistrationAnswer(
            namesrv, resp.ext_fields.get("masterAddr") or None, resp.ext_fields.get("haServerAddr") or None
        )

    async def unregister_all(self) -> None:
        cfg = self.config
        for addr in cfg.namesrv_addrs:
            cmd = RemotingCommand.request(
                RequestCode.UNREGISTER_BROKER,
                {
                    "brokerAddr": cfg.broker_addr,
                    "brokerId": cfg.broker_id,
                    "brokerName": cfg.broker_name,
                    "clusterName": cfg.cluster_name,
                },
            )
            try:
                await self.client.invoke(addr, cmd, 3.0)
            except Exception as exc:
                log.warning("unregister from name server %s failed: %s", addr, exc)

    def kick(self) -> None:
        """Register again now (a topic was created or changed)."""
        self._kick.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def _loop(self) -> None:
        period = min(max(self.config.register_name_server_period_ms, 10_000), 60_000) / 1000
        while True:
            # Cleared before the round reads the topics, never after: a topic created while a
            # round is in flight kicks again and gets its own round at once. (Clearing after the
            # round lost that kick, and the topic stayed unrouted for a whole period.)
            self._kick.clear()
            try:
                await self.register_all()
            except Exception:
                log.exception("registration round failed; retrying in %.0fs", period)
            try:
                async with asyncio.timeout(period):  # not wait_for: it can swallow stop's cancel on 3.11
                    await self._kick.wait()
            except TimeoutError:
                pass
