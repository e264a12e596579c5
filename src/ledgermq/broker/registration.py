"""Registering with every name server, at a cost proportional to what changed.

RocketMQ 4.9's scheme (BrokerController ``registerIncrementBrokerData``,
``registerBrokerAll`` / ``needRegister``), with each name server handled on its own:

* a topic change sends an *increment*: only the changed topics, with the new data
  version. Name servers upsert and keep the topics a registration does not name.
  Changes arriving together (concurrent creates) share one increment per name server;
* every registerNameServerPeriod a master asks QUERY_DATA_VERSION. A name server holding
  our version counts the query as our heartbeat; one that differs (it restarted, it
  missed an increment) gets the *full* table, deflated when large. forceRegister=true
  sends the full table every period instead, as RocketMQ does by default;
* the full table also goes at start, after any failed send to that name server, on a
  kick (a role change), and whenever the connection to the name server is not the one
  the last full registration went over: name servers forget a broker whose connection
  closes, so a new connection means a name server that may know nothing of us, and an
  increment alone would leave it a partial table with a current version.

Each name server has its own task: one that is down does not delay the others, and a
failure is logged and retried (full) after ``RETRY_S`` or at the next change/period.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from ledgermq.broker.config import BrokerConfig
from ledgermq.broker.registration_requests import (
    full_registration,
    increment_registration,
    query_data_version,
    unregister_command,
)
from ledgermq.broker.topics import TopicConfigManager
from ledgermq.clock import SYSTEM_CLOCK, Clock
from ledgermq.net.client import RemotingClient
from ledgermq.net.connection import Connection
from ledgermq.protocol import fastjson
from ledgermq.protocol.codes import ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.route import DataVersion, TopicConfig

log = logging.getLogger(__name__)

RETRY_S = 3.0
"""After a failed send, a name server is tried again (with the full table) this much later,
or at the next period; changes in between are not sent to it one by one."""


@dataclass(frozen=True, slots=True)
class RegistrationAnswer:
    namesrv: str
    master_addr: str | None
    ha_server_addr: str | None


class RegistrationRefused(Exception):
    """A name server answered a registration or query with an error code."""


@dataclass(slots=True, eq=False)
class _Link:
    """What one name server still lacks, and how far its sends have got."""

    addr: str
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    pending: set[str] = field(default_factory=set)  # topics changed since its last send
    full_due: bool = True
    registered_on: Connection | None = None  # the connection its last full registration used
    retry_at: float = 0.0
    done_seq: int = 0  # every change numbered up to this has been sent (or given up on)


class Registrar:
    def __init__(
        self,
        config: BrokerConfig,
        topics: TopicConfigManager,
        client: RemotingClient,
        on_answer: Callable[[RegistrationAnswer], None] | None = None,
        hold_back: Callable[[BrokerConfig], str | None] | None = None,
        period_s: float | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.clock = clock
        self.config = config
        self.topics = topics
        self.client = client
        self.on_answer = on_answer
        self.hold_back = hold_back
        """Asked before each send: a reason not to register as ``config`` says now
        (a DLedger leader that cannot be sure it still leads), or None."""
        self.period_s = period_s
        """Override of the registerNameServerPeriod (clamped to 10..60 s as in RocketMQ); tests."""
        self._links = [_Link(addr) for addr in config.namesrv_addrs]
        self._seq = 0
        self._progress = asyncio.Condition()
        self._tasks: list[asyncio.Task[None]] = []

    # -- what the broker calls -----------------------------------------------------------
    def topic_changed(self, tc: TopicConfig) -> None:
        """TopicConfigManager.on_change: send ``tc`` to every name server as an increment."""
        self._seq += 1
        for link in self._links:
            link.pending.add(tc.topic_name)
            link.wake.set()

    def kick(self) -> None:
        """Send the full table to every name server now (the broker's identity changed)."""
        self._seq += 1
        for link in self._links:
            link.full_due = True
            link.retry_at = 0.0
            link.wake.set()

    async def sync(self, timeout: float | None = None) -> None:
        """Wait until every change made so far has been sent to every name server (or the
        send failed), at most ``timeout`` (default registerBrokerTimeoutMills), as RocketMQ
        answers UPDATE_AND_CREATE_TOPIC only after its increment. Callers waiting together
        wait for the same increment."""
        target = self._seq
        if not self._tasks:
            return
        limit = self.config.register_broker_timeout_ms / 1000 if timeout is None else timeout
        try:
            async with asyncio.timeout(limit), self._progress:
                await self._progress.wait_for(lambda: all(link.done_seq >= target for link in self._links))
        except TimeoutError:
            log.warning("topic changes not confirmed by every name server within %.1fs", limit)

    @property
    def running(self) -> bool:
        return all(not t.done() for t in self._tasks)

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._run(link), name=f"register {link.addr}") for link in self._links]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def unregister_all(self) -> None:
        for addr in self.config.namesrv_addrs:
            try:
                await self.client.invoke(addr, unregister_command(self.config), 3.0)
            except Exception as exc:
                log.warning("unregister from name server %s failed: %s", addr, exc)

    # -- one name server -----------------------------------------------------------------
    def _period(self) -> float:
        if self.period_s is not None:
            return self.period_s
        return min(max(self.config.register_name_server_period_ms, 10_000), 60_000) / 1000

    async def _run(self, link: _Link) -> None:
        clock = self.clock
        next_check = clock.monotonic() + self._period()
        while True:
            # Cleared before this round reads the topics, never after: a change made while
            # a send is in flight wakes the loop again at once.
            link.wake.clear()
            now = clock.monotonic()
            periodic = now >= next_check
            if periodic:
                next_check = now + self._period()
            seq = self._seq
            if periodic or link.pending or (link.full_due and now >= link.retry_at):
                await self._round(link, periodic)
            elif link.full_due:  # backing off after a failure: the retry will carry these
                link.pending.clear()
            link.done_seq = max(link.done_seq, seq)
            async with self._progress:
                self._progress.notify_all()
            deadline = min(next_check, link.retry_at) if link.full_due else next_check
            try:
                async with asyncio.timeout(max(0.0, deadline - clock.monotonic())):
                    await link.wake.wait()
            except TimeoutError:
                pass

    async def _round(self, link: _Link, periodic: bool) -> None:
        try:
            await self._send(link, periodic)
        except Exception as exc:
            link.full_due = True
            link.retry_at = self.clock.monotonic() + RETRY_S
            log.warning("registration with %s failed (full table again in %.0fs): %s", link.addr, RETRY_S, exc)

    async def _send(self, link: _Link, periodic: bool) -> None:
        reason = self.hold_back(self.config) if self.hold_back is not None else None
        if reason is not None:
            log.info("not registering as brokerId %d now: %s", self.config.broker_id, reason)
            link.full_due = True  # the full table once allowed: asked again after RETRY_S
            link.retry_at = self.clock.monotonic() + RETRY_S
            link.pending.clear()
            return
        conn = await self.client.connection(link.addr)
        cfg = self.config
        if link.full_due or conn is not link.registered_on:
            await self._full(link, conn)
        elif link.pending:
            names, link.pending = link.pending, set()
            cmd = increment_registration(cfg, self.topics, sorted(names), self.topics.data_version)
            await self._register(link, conn, cmd)
        elif periodic and (cfg.force_register or not cfg.is_master):
            await self._full(link, conn)  # a slave's table is empty: it registers for the answer
        elif periodic and await self._differs(link, conn, self.topics.data_version):
            await self._full(link, conn)

    async def _full(self, link: _Link, conn: Connection) -> None:
        link.pending.clear()  # the table as it is now includes them
        link.full_due = True  # until it is answered
        await self._register(link, conn, full_registration(self.config, self.topics))
        link.full_due = False
        link.registered_on = conn

    async def _register(self, link: _Link, conn: Connection, cmd: RemotingCommand) -> None:
        resp = await conn.request(cmd, self.config.register_broker_timeout_ms / 1000)
        if resp.code != ResponseCode.SUCCESS:
            raise RegistrationRefused(f"refused: {resp.code} {resp.remark}")
        answer = RegistrationAnswer(
            link.addr, resp.ext_fields.get("masterAddr") or None, resp.ext_fields.get("haServerAddr") or None
        )
        if self.on_answer is not None:
            self.on_answer(answer)

    async def _differs(self, link: _Link, conn: Connection, version: DataVersion) -> bool:
        """QUERY_DATA_VERSION, read as RocketMQ's BrokerOuterAPI.needRegister reads it."""
        timeout = self.config.register_broker_timeout_ms / 1000
        resp = await conn.request(query_data_version(self.config, version), timeout)
        if resp.code != ResponseCode.SUCCESS:
            raise RegistrationRefused(f"QUERY_DATA_VERSION refused: {resp.code} {resp.remark}")
        changed = resp.ext_fields.get("changed", "").strip().lower() == "true"
        if resp.body and DataVersion.from_json(fastjson.loads(resp.body)) != version:
            changed = True
        if changed:
            log.info("name server %s holds another data version than %s: sending the full table", link.addr, version)
        return changed
