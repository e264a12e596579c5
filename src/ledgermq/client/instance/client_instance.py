"""The client instance every producer and consumer of one client id shares (RocketMQ
``MQClientInstance`` + ``MQClientManager``).

One instance holds the connections (one per address), the name server client (the
preferred server is switched away from when it fails), the route cache refreshed every
``poll_namesrv_interval`` (30 s), and the loops that act for all its clients:

* heartbeats every ``heartbeat_interval`` (30 s) carrying every producer and consumer
  group, to every broker: masters only while the instance has no consumer (a slave has no
  use for producers), all brokers otherwise (a consumer may pull from a slave);
* rebalance of every consumer every ``rebalance_interval`` (20 s), at once when a broker
  says the group's membership changed (NOTIFY_CONSUMER_IDS_CHANGED), and when a consumer
  starts;
* consumer offsets persisted every ``persist_interval`` (5 s).

It also answers the requests brokers send to clients (consumer running info, status and
offset reset, direct consumption) by handing them to the consumer of the group, and hands
a transaction check (CHECK_TRANSACTION_STATE) to the transaction producer of the group
that the checked message names (its PGROUP property).

Instances are shared by client id, as ``MQClientManager`` shares them: the default instance
name becomes ``pid#nanos`` (RocketMQ 4.9.7's ``changeInstanceNameToPID``), so each client
gets its own instance unless the user names one; clients given the same instance name and
name servers share one. ``acquire`` counts users; the last ``release`` shuts it down.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import random
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ledgermq.acl.signing import Credentials, signer
from ledgermq.aio.periodic import Periodic
from ledgermq.client.errors import ClientStateError, MQClientError
from ledgermq.client.instance.announcements import Announcements, versions_in_heartbeat
from ledgermq.client.instance.namesrv import split_namesrv_addrs
from ledgermq.client.instance.pull_api import PullAPI
from ledgermq.client.instance.routes import POLL_NAMESRV_INTERVAL, NameServerClient, RouteCache
from ledgermq.client.instance.tls import client_tls
from ledgermq.client.tls import TlsOptions, check_tls_options
from ledgermq.clock import SYSTEM_CLOCK, Clock
from ledgermq.net.client import ConnectError, RemotingClient
from ledgermq.net.connection import Connection, ConnectionClosedError, RequestTimeoutError
from ledgermq.protocol import fastjson
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.headers_pull import UnregisterClientRequestHeader
from ledgermq.protocol.message import MessageRecord, decode_records
from ledgermq.protocol.properties import PGROUP
from ledgermq.util.ratelog import limited

log = logging.getLogger(__name__)


def _round_failed(timer: Periodic, _exc: Exception) -> None:
    """A client's timers report failures once a minute each: a broker or name server that
    stays away fails every round."""
    limited.log(log, logging.ERROR, ("round", timer.name), "%s round failed", timer.name, exc_info=True)


CLIENT_INNER_PRODUCER = "CLIENT_INNER_PRODUCER"
HEARTBEAT_INTERVAL = 30.0
REBALANCE_INTERVAL = 20.0
PERSIST_INTERVAL = 5.0

# A transaction producer's answer to a broker's check: (broker address, checked message, request).
TransactionChecker = Callable[[str, MessageRecord, RemotingCommand], Awaitable[None]]


def local_ip() -> str:
    """The address this host would use to reach others (RemotingUtil.getLocalAddress); 127.0.0.1 if none."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # UDP connect sends nothing; it only picks a route
            return str(s.getsockname()[0])
    except OSError:
        return "127.0.0.1"


def default_instance_name(instance_name: str) -> str:
    """``ClientConfig.changeInstanceNameToPID`` (4.9.7): DEFAULT becomes ``pid#nanos``.

    The nanos only tell this process's instances apart, so they come from the system clock
    even where a test drives the instance's clock: a stopped test clock would give two
    instances one client id."""
    if instance_name == "DEFAULT":
        return f"{os.getpid()}#{int(SYSTEM_CLOCK.monotonic() * 1_000_000_000)}"
    return instance_name


class ConsumerHandle(Protocol):
    """What the instance needs of a consumer it serves."""

    @property
    def group(self) -> str: ...

    def consumer_data(self) -> dict[str, Any]:
        """The consumer's entry of a heartbeat's ``consumerDataSet`` (Java field names)."""
        ...

    def subscribed_topics(self) -> set[str]: ...

    async def do_rebalance(self) -> None: ...

    async def persist_offsets(self) -> None: ...

    def running_info(self) -> dict[str, Any]:
        """GET_CONSUMER_RUNNING_INFO's body (``ConsumerRunningInfo``)."""
        ...


@dataclass(frozen=True, kw_only=True)
class InstanceSettings:
    """What one client instance is and how often it works: its name servers, its id
    (``client_ip@instance_name``), the request timeout, the intervals of its loops and the
    ACL credentials every request is signed with. ``client_ip`` "" is this host's address."""

    namesrv_addrs: str | Sequence[str]
    client_ip: str = ""
    instance_name: str = "DEFAULT"
    api_timeout: float = 3.0
    poll_namesrv_interval: float = POLL_NAMESRV_INTERVAL
    heartbeat_interval: float = HEARTBEAT_INTERVAL
    rebalance_interval: float = REBALANCE_INTERVAL
    persist_interval: float = PERSIST_INTERVAL
    credentials: Credentials | None = None
    use_tls: bool = False  # Java's useTLS: every connection of the instance over TLS
    tls: TlsOptions | None = None  # with use_tls: the CA, the client certificate (client/tls.py)

    def __post_init__(self) -> None:
        check_tls_options(self.use_tls, self.tls)
        if not split_namesrv_addrs(self.namesrv_addrs):
            raise MQClientError("no name server address given")

    def resolved(self) -> InstanceSettings:
        """With this host's address and the default instance name filled in: the client id's
        parts, as the instance will use them."""
        return dataclasses.replace(
            self, client_ip=self.client_ip or local_ip(), instance_name=default_instance_name(self.instance_name)
        )


class ClientInstance:
    """Connections, routes, heartbeats and the shared loops of one client id."""

    def __init__(
        self, settings: InstanceSettings, *, clock: Clock = SYSTEM_CLOCK, rng: random.Random | None = None
    ) -> None:
        settings = settings.resolved()
        self.settings = settings
        self.namesrv_addrs = split_namesrv_addrs(settings.namesrv_addrs)
        self.client_ip = settings.client_ip
        self.instance_name = settings.instance_name
        self.client_id = f"{self.client_ip}@{self.instance_name}"
        self.clock = clock
        self.rng = rng or random.Random()
        self.remoting = RemotingClient(
            connect_timeout=settings.api_timeout,
            on_request=self._on_broker_request,
            sign=signer(settings.credentials) if settings.credentials is not None else None,
            tls=client_tls(settings.use_tls, settings.tls),
        )
        self.namesrv = NameServerClient(self.remoting, self.namesrv_addrs, timeout=settings.api_timeout, rng=self.rng)
        self.routes = RouteCache(self.namesrv, poll_interval=settings.poll_namesrv_interval, rng=self.rng)
        self.announcements = Announcements()  # what each broker holds of our subscriptions
        self.pull_api = PullAPI(
            self.remoting, self.routes, timeout=settings.api_timeout, clock=clock, announcements=self.announcements
        )
        self.producers: set[str] = set()
        self.consumers: dict[str, ConsumerHandle] = {}
        self.transaction_checkers: dict[str, TransactionChecker] = {}  # by producer group
        self.users = 0
        self._state = "created"
        self._start_lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self._timers: list[Periodic] = []
        self._rebalance_wakeup = asyncio.Event()
        self._request_tasks: set[asyncio.Task[None]] = set()

    @property
    def api_timeout(self) -> float:
        return self.settings.api_timeout

    @property
    def credentials(self) -> Credentials | None:
        """Every request is signed with them (ACL, docs/acl.md)."""
        return self.settings.credentials

    # -- sharing -------------------------------------------------------------------------
    @classmethod
    def acquire(
        cls,
        namesrv_addrs: str | Sequence[str],
        *,
        clock: Clock = SYSTEM_CLOCK,
        rng: random.Random | None = None,
        **options: Any,
    ) -> ClientInstance:
        """The shared instance of this client id (created on first use); pair with ``release``.
        ``options`` are ``InstanceSettings``' fields; the first user's settings make it."""
        settings = InstanceSettings(namesrv_addrs=namesrv_addrs, **options).resolved()
        key = (f"{settings.client_ip}@{settings.instance_name}", tuple(split_namesrv_addrs(namesrv_addrs)))
        inst = _INSTANCES.get(key)
        if inst is not None and inst._state != "shut down" and inst.credentials != settings.credentials:
            raise MQClientError(
                f"client instance {key[0]} already runs with other ACL credentials; "
                "give this client its own instance_name"
            )
        if (
            inst is not None
            and inst._state != "shut down"
            and (inst.settings.use_tls, inst.settings.tls)
            != (
                settings.use_tls,
                settings.tls,
            )
        ):
            raise MQClientError(
                f"client instance {key[0]} already runs with other TLS settings; give this client its own instance_name"
            )
        if inst is None or inst._state == "shut down":
            inst = cls(settings, clock=clock, rng=rng)
            _INSTANCES[key] = inst
        inst.users += 1
        return inst

    async def release(self) -> None:
        """One user less; the last one shuts the instance down."""
        self.users -= 1
        if self.users <= 0:
            for key, inst in list(_INSTANCES.items()):
                if inst is self:
                    del _INSTANCES[key]
            await self.shutdown()

    # -- lifecycle -----------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._state == "running"

    async def start(self) -> None:
        """Start once (later calls return at once): learn the brokers, heartbeat, start the loops."""
        async with self._start_lock:
            if self._state == "running":
                return
            if self._state != "created":
                raise ClientStateError(f"the client instance is {self._state}")
            self._state = "running"
            try:  # learn the brokers so the first heartbeat reaches them; never fatal
                async with asyncio.timeout(self.api_timeout * 2):
                    await self.routes.refresh_all()
            except TimeoutError:
                # the refresh timer goes on trying and warns if the name servers stay unreachable
                log.info("client %s: no route refresh at start within %.1fs", self.client_id, self.api_timeout * 2)
            self.routes.start(first_delay=self.routes.poll_interval)
            self._timers = [
                Periodic("heartbeat", self.heartbeat, self.settings.heartbeat_interval, on_error=_round_failed),
                Periodic("persist", self.persist_all, self.settings.persist_interval, on_error=_round_failed),
            ]
            for timer in self._timers:
                timer.start()
            self._tasks = [asyncio.create_task(self._rebalance_loop(), name="rebalance")]

    async def shutdown(self) -> None:
        if self._state == "shut down":
            return
        was_running = self._state == "running"
        self._state = "shut down"
        tasks, self._tasks = self._tasks, []
        timers, self._timers = self._timers, []
        for timer in timers:
            await timer.stop()
        for task in [*tasks, *self._request_tasks]:
            task.cancel()
        for task in [*tasks, *self._request_tasks]:
            try:
                await task
            except asyncio.CancelledError:
                pass
        await self.routes.stop()
        await self.pull_api.close()
        if was_running:
            await self.persist_all()
        await self.remoting.close()

    def _check_running(self) -> None:
        if self._state != "running":
            raise ClientStateError(f"the client instance is {self._state}, not running")

    # -- members -------------------------------------------------------------------------
    def register_producer(self, group: str) -> None:
        if group in self.producers:
            raise MQClientError(f"the producer group {group} is already used by client {self.client_id}")
        self.producers.add(group)

    async def unregister_producer(self, group: str) -> None:
        if group in self.producers:
            self.producers.discard(group)
            await self._unregister(
                UnregisterClientRequestHeader(client_id=self.client_id, producer_group=group, consumer_group=None)
            )

    def register_consumer(self, consumer: ConsumerHandle) -> None:
        if consumer.group in self.consumers:
            raise MQClientError(f"the consumer group {consumer.group} is already used by client {self.client_id}")
        self.consumers[consumer.group] = consumer
        for topic in consumer.subscribed_topics():
            self.routes.watch(topic)

    async def unregister_consumer(self, group: str) -> None:
        if self.consumers.pop(group, None) is not None:
            await self._unregister(
                UnregisterClientRequestHeader(client_id=self.client_id, producer_group=None, consumer_group=group)
            )

    async def _unregister(self, header: UnregisterClientRequestHeader) -> None:
        """UNREGISTER_CLIENT to every broker, so the group's members change at once."""
        ext = header.ext()
        for addr in self.routes.all_addrs():
            cmd = RemotingCommand.request(RequestCode.UNREGISTER_CLIENT, ext)
            try:
                resp = await self.remoting.invoke(addr, cmd, min(self.api_timeout, 1.0))
            except (ConnectError, ConnectionClosedError, RequestTimeoutError) as exc:
                log.debug("unregister from %s failed: %s", addr, exc)
                continue
            if resp.code != ResponseCode.SUCCESS:
                log.info("unregister from %s answered %d: %s", addr, resp.code, resp.remark)

    # -- heartbeats ----------------------------------------------------------------------
    def heartbeat_body(self) -> bytes:
        return fastjson.dumps(self._heartbeat_doc())

    def _heartbeat_doc(self) -> dict[str, Any]:
        groups = sorted(self.producers | ({CLIENT_INNER_PRODUCER} if self.producers else set()))
        return {
            "clientID": self.client_id,
            "consumerDataSet": [c.consumer_data() for c in self.consumers.values()],
            "producerDataSet": [{"groupName": g} for g in groups],
        }

    async def heartbeat(self) -> None:
        """HEART_BEAT to every broker (masters only when no consumer lives here). Each broker
        that accepts it is recorded as holding the subscriptions it carried
        (``announcements``): pulls to it need not carry them."""
        if not self.producers and not self.consumers:
            return
        for topic in {t for c in self.consumers.values() for t in c.subscribed_topics()}:
            self.routes.watch(topic)
        addrs = self.routes.all_addrs() if self.consumers else self.routes.master_addrs()
        doc = self._heartbeat_doc()
        versions = versions_in_heartbeat(doc["consumerDataSet"])
        body = fastjson.dumps(doc)
        await asyncio.gather(*(self._heartbeat_one(addr, body, versions) for addr in addrs))

    async def _heartbeat_one(self, addr: str, body: bytes, versions: dict[tuple[str, str], int]) -> None:
        cmd = RemotingCommand.request(RequestCode.HEART_BEAT, None, body)
        try:
            resp = await self.remoting.invoke(addr, cmd, self.api_timeout)
        except (ConnectError, ConnectionClosedError, RequestTimeoutError) as exc:
            log.info("heartbeat to %s failed: %s", addr, exc)
            self.announcements.forget(addr)
            return
        if resp.code == ResponseCode.SUCCESS:
            self.announcements.accepted(addr, versions)
            return
        self.announcements.forget(addr)
        limited.log(
            log,
            logging.WARNING,
            ("heartbeat", addr),
            "heartbeat to %s answered %d: %s",
            addr,
            resp.code,
            resp.remark,
        )

    # -- rebalance and persistence -------------------------------------------------------
    def rebalance_now(self) -> None:
        """Wake the rebalance loop (``rebalanceImmediately``)."""
        self._rebalance_wakeup.set()

    async def rebalance_all(self) -> None:
        for consumer in list(self.consumers.values()):
            try:
                await consumer.do_rebalance()
            except Exception:  # one consumer's failure must not stop the others
                limited.log(
                    log,
                    logging.ERROR,
                    ("rebalance", consumer.group),
                    "rebalance of group %s failed",
                    consumer.group,
                    exc_info=True,
                )

    async def persist_all(self) -> None:
        for consumer in list(self.consumers.values()):
            try:
                await consumer.persist_offsets()
            except Exception:
                limited.log(
                    log,
                    logging.ERROR,
                    ("persist", consumer.group),
                    "persisting the offsets of group %s failed",
                    consumer.group,
                    exc_info=True,
                )

    async def _rebalance_loop(self) -> None:
        while self._state == "running":  # also ends a round whose cancel something swallowed
            # asyncio.timeout, not wait_for: in 3.11 a wake-up that coincides with shutdown's
            # cancel makes wait_for swallow the cancel, and shutdown then waits forever.
            try:
                async with asyncio.timeout(self.settings.rebalance_interval):
                    await self._rebalance_wakeup.wait()
            except TimeoutError:
                pass
            self._rebalance_wakeup.clear()
            try:
                await self.rebalance_all()
            except Exception:  # the loop must survive anything
                limited.log(log, logging.ERROR, "rebalance-round", "rebalance round failed", exc_info=True)

    # -- requests from brokers -----------------------------------------------------------
    def _on_broker_request(self, conn: Connection, cmd: RemotingCommand) -> None:
        if cmd.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
            log.info("broker %s: the members of group %s changed", conn.peer, cmd.ext_fields.get("consumerGroup"))
            self.rebalance_now()
            return
        if cmd.code == RequestCode.CHECK_TRANSACTION_STATE:
            work = self._check_transaction(conn, cmd)
        else:
            work = self._answer(conn, cmd)
        task = asyncio.get_running_loop().create_task(work)
        self._request_tasks.add(task)
        task.add_done_callback(self._request_tasks.discard)

    async def _answer(self, conn: Connection, cmd: RemotingCommand) -> None:
        try:
            resp = await self._handle(cmd)
        except Exception as exc:  # a bad request gets an error answer, never a dead task
            limited.log(
                log,
                logging.ERROR,
                ("broker-request", cmd.code),
                "request %d from %s failed",
                cmd.code,
                conn.peer,
                exc_info=True,
            )
            resp = cmd.response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
        if not cmd.is_oneway and conn.is_open:
            try:
                conn.send(resp)
            except ConnectionClosedError:
                pass

    async def _check_transaction(self, conn: Connection, cmd: RemotingCommand) -> None:
        """``ClientRemotingProcessor.checkTransactionState``: oneway, never answered itself."""
        try:
            records = decode_records(cmd.body, inflate=True) if cmd.body else []
        except Exception as exc:
            log.warning("transaction check from %s: the message does not decode: %s", conn.peer, exc)
            return
        if not records:
            log.warning("transaction check from %s carries no message", conn.peer)
            return
        group = records[0].properties.get(PGROUP)
        checker = self.transaction_checkers.get(group) if group else None
        if checker is None:
            log.debug("transaction check from %s for group %s: no such producer here", conn.peer, group)
            return
        try:
            await checker(conn.peer, records[0], cmd)
        except Exception:
            limited.log(log, logging.ERROR, ("check", group), "transaction check of group %s failed", group,
                        exc_info=True)  # fmt: skip

    async def _handle(self, cmd: RemotingCommand) -> RemotingCommand:
        group = cmd.ext_fields.get("consumerGroup") or cmd.ext_fields.get("group") or ""
        consumer = self.consumers.get(group)
        if cmd.code == RequestCode.GET_CONSUMER_RUNNING_INFO:
            if consumer is None:
                return cmd.response(ResponseCode.SYSTEM_ERROR, f"the consumer group {group} not exist in this client")
            return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps(consumer.running_info()))
        handler = getattr(consumer, "handle_broker_request", None) if consumer is not None else None
        if handler is not None:
            answer: RemotingCommand | None = await handler(cmd)
            if answer is not None:
                return answer
        return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f"request code {cmd.code} is not supported here")


_INSTANCES: dict[tuple[str, tuple[str, ...]], ClientInstance] = {}
