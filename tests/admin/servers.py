"""A name server and a broker for admin tests: in-process (inside the test's event loop, or
on a background thread's loop for CliRunner tests) or as real processes.

Everything binds 127.0.0.1. The broker needs a real port (its store host is written into
every message), so one is found by binding port 0 and the start is retried if another
process grabs it first. Every wait is bounded; everything started is stopped in finally.
"""

from __future__ import annotations

import asyncio
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from ledgermq.broker.app import BrokerApp
from ledgermq.broker.config import BrokerConfig
from ledgermq.config import StoreConfig
from ledgermq.namesrv.app import NamesrvApp, NamesrvConfig
from ledgermq.net.client import RemotingClient
from ledgermq.protocol import fastjson
from ledgermq.protocol import properties as P
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.route import TopicRouteData
from ledgermq.testing.ports import free_port

T = TypeVar("T")
HOST = "127.0.0.1"
CLUSTER = "TestCluster"
BROKER = "broker-a"
START_TIMEOUT = 15.0
STOP_TIMEOUT = 15.0
CALL_TIMEOUT = 5.0

SMALL_STORE: dict[str, Any] = dict(
    mapped_file_size_commitlog=1024 * 1024,
    mapped_file_size_consume_queue=20 * 1024,
    max_hash_slot_num=256,
    max_index_num=1024,
    flush_interval_commitlog_ms=50,
    flush_interval_consume_queue_ms=50,
)


@dataclass
class Cluster:
    namesrv: NamesrvApp
    broker: BrokerApp

    @property
    def ns_addr(self) -> str:
        return f"{HOST}:{self.namesrv.port}"

    @property
    def broker_addr(self) -> str:
        return f"{HOST}:{self.broker.port}"


async def poll(what: str, check: Callable[[], Coroutine[Any, Any, T | None]], timeout: float = 10.0) -> T:
    """Await ``check()`` until it returns something other than None/False; AssertionError on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value is not None and value is not False:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(0.05)


@asynccontextmanager
async def running_cluster(root: Path, **broker_overrides: Any) -> AsyncIterator[Cluster]:
    """A name server and one master broker registered on it (TBW102 route visible)."""
    ns = NamesrvApp(
        NamesrvConfig(listen_host=HOST, listen_port=0, kv_config_path=str(root / "namesrv" / "kvConfig.json"))
    )
    await asyncio.wait_for(ns.start(), START_TIMEOUT)
    broker: BrokerApp | None = None
    try:
        for attempt in range(3):
            cfg = BrokerConfig(
                **{
                    "cluster_name": CLUSTER,
                    "broker_name": BROKER,
                    "broker_ip1": HOST,
                    "listen_host": HOST,
                    "listen_port": free_port(span=2),
                    "namesrv_addr": f"{HOST}:{ns.port}",
                    "flush_consumer_offset_interval_ms": 60_000,
                    **broker_overrides,
                }
            )
            broker = BrokerApp(cfg, StoreConfig(root_dir=str(root / "broker"), **SMALL_STORE))
            try:
                await asyncio.wait_for(broker.start(), START_TIMEOUT)
                break
            except OSError:
                await asyncio.wait_for(broker.stop(), STOP_TIMEOUT)
                broker = None
                if attempt == 2:
                    raise
        assert broker is not None

        async def registered() -> bool:
            return ns.routes.route("TBW102") is not None

        await poll("the broker's registration", registered)
        yield Cluster(ns, broker)
    finally:
        try:
            if broker is not None:
                await asyncio.wait_for(broker.stop(), STOP_TIMEOUT)
        finally:
            await asyncio.wait_for(ns.stop(), STOP_TIMEOUT)


# -- talking to a broker directly (what a producer / consumer would send) ----------------------
def send_header(topic: str, queue_id: int, props: dict[str, str]) -> dict[str, Any]:
    return {
        "a": "pg",
        "b": topic,
        "c": "TBW102",
        "d": 4,
        "e": queue_id,
        "f": 0,
        "g": int(time.time() * 1000),
        "h": 0,
        "i": P.encode_properties(props),
        "j": 0,
        "k": False,
        "m": False,
    }


async def send_message(
    addr: str,
    topic: str,
    body: bytes = b"hello",
    *,
    queue_id: int = 0,
    keys: str | None = None,
    tags: str = "TagA",
    uniq_key: str | None = None,
) -> RemotingCommand:
    """SEND_MESSAGE_V2 as a producer sends it; asserts SUCCESS and returns the response."""
    props = {"TAGS": tags, "WAIT": "true"}
    if keys:
        props["KEYS"] = keys
    if uniq_key:
        props["UNIQ_KEY"] = uniq_key
    client = RemotingClient()
    try:
        cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, send_header(topic, queue_id, props), body)
        resp = await client.invoke(addr, cmd, CALL_TIMEOUT)
    finally:
        await client.close()
    assert resp.code == ResponseCode.SUCCESS, resp
    return resp


async def broker_call(addr: str, code: int, ext: dict[str, Any] | None = None, body: bytes = b"") -> RemotingCommand:
    client = RemotingClient()
    try:
        return await client.invoke(addr, RemotingCommand.request(code, ext, body), CALL_TIMEOUT)
    finally:
        await client.close()


async def commit_offset(addr: str, group: str, topic: str, queue_id: int, offset: int) -> None:
    ext = {"consumerGroup": group, "topic": topic, "queueId": queue_id, "commitOffset": offset}
    resp = await broker_call(addr, RequestCode.UPDATE_CONSUMER_OFFSET, ext)
    assert resp.code == ResponseCode.SUCCESS, resp


def heartbeat_body(client_id: str, group: str, topics: list[str]) -> bytes:
    return fastjson.dumps(
        {
            "clientID": client_id,
            "consumerDataSet": [
                {
                    "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                    "consumeType": "CONSUME_PASSIVELY",
                    "groupName": group,
                    "messageModel": "CLUSTERING",
                    "subscriptionDataSet": [
                        {"subString": "*", "subVersion": 1, "tagsSet": [], "topic": t, "expressionType": "TAG"}
                        for t in topics
                    ],
                    "unitMode": False,
                }
            ],
            "producerDataSet": [],
        }
    )


async def ns_route(ns_addr: str, topic: str) -> TopicRouteData | None:
    resp = await broker_call(ns_addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    return TopicRouteData.decode(resp.body) if resp.code == ResponseCode.SUCCESS else None


# -- a cluster on a background thread (for CliRunner, whose commands run their own loop) ------
class BackgroundCluster:
    """``running_cluster`` on a thread of its own; ``call`` runs a coroutine there."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="admin-test-cluster", daemon=True)
        self._stop: asyncio.Event | None = None
        self._done: Any = None
        self.cluster: Cluster | None = None

    def start(self) -> Cluster:
        self.thread.start()
        started = threading.Event()
        self._done = asyncio.run_coroutine_threadsafe(self._main(started), self.loop)
        deadline = time.monotonic() + START_TIMEOUT * 2
        while not started.wait(0.05):
            if self._done.done():
                self._done.result()  # start-up failed: raise it here
            if time.monotonic() > deadline:
                raise AssertionError("the background cluster did not start in time")
        assert self.cluster is not None
        return self.cluster

    async def _main(self, started: threading.Event) -> None:
        self._stop = asyncio.Event()
        async with running_cluster(self.root) as cluster:
            self.cluster = cluster
            started.set()
            await self._stop.wait()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 20.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        try:
            if self._stop is not None:
                self.loop.call_soon_threadsafe(self._stop.set)
            if self._done is not None:
                self._done.result(STOP_TIMEOUT * 2)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            if not self.thread.is_alive():
                self.loop.close()


# -- real processes ------------------------------------------------------------------------------
def ledgermq_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "ledgermq.cli.main", *args]


class ProcessCluster:
    """``ledgermq namesrv`` + ``ledgermq broker`` as child processes (like ``ledgermq cluster up``)."""

    def __init__(self, root: Path, *, broker_nofile: int | None = None) -> None:
        self.root = root
        self.ns_port = free_port()
        self.broker_port = free_port(span=2)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.broker_nofile = broker_nofile  # the broker's open-file limit (soft = hard), if set

    @property
    def ns_addr(self) -> str:
        return f"{HOST}:{self.ns_port}"

    @property
    def broker_addr(self) -> str:
        return f"{HOST}:{self.broker_port}"

    def _spawn(self, args: list[str], log_name: str, nofile: int | None = None) -> None:
        log = open(self.root / log_name, "ab")  # noqa: SIM115 - closed once the child is gone

        def limit_files() -> None:
            if nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        try:
            proc = subprocess.Popen(
                ledgermq_cmd(*args),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=limit_files if nofile is not None else None,
            )
        finally:
            log.close()  # the child holds its own copy
        self.procs.append(proc)

    def _wait_port(self, port: int, proc: subprocess.Popen[bytes], deadline: float) -> None:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError(f"{proc.args} exited with {proc.returncode}; see {self.root}")
            try:
                with socket.create_connection((HOST, port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise AssertionError(f"nothing listens on {port} in time; see {self.root}")

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + START_TIMEOUT * 2
        self._spawn(
            ["namesrv", "-p", str(self.ns_port), "--host", HOST, "--kv-config", str(self.root / "kvConfig.json")],
            "namesrv.log",
        )
        self._wait_port(self.ns_port, self.procs[-1], deadline)
        conf = self.root / "broker.properties"
        conf.write_text(
            "\n".join(
                [
                    "brokerClusterName=DefaultCluster",
                    f"brokerName={BROKER}",
                    "brokerId=0",
                    "brokerIP1=127.0.0.1",
                    "listenHost=127.0.0.1",
                    f"listenPort={self.broker_port}",
                    f"namesrvAddr={self.ns_addr}",
                    f"storePathRootDir={self.root / 'store'}",
                    "mappedFileSizeCommitLog=1048576",
                    "",
                ]
            )
        )
        self._spawn(["broker", "-c", str(conf)], "broker.log", self.broker_nofile)
        self._wait_port(self.broker_port, self.procs[-1], deadline)
        self._wait_registered(deadline)

    def restart_broker(self, *, kill: bool = False) -> None:
        """Stop the broker (SIGTERM, or SIGKILL with ``kill``) and start it again."""
        proc = self.procs.pop()
        proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        proc.wait(STOP_TIMEOUT)
        deadline = time.monotonic() + START_TIMEOUT * 2
        self._spawn(["broker", "-c", str(self.root / "broker.properties")], "broker.log", self.broker_nofile)
        self._wait_port(self.broker_port, self.procs[-1], deadline)

    def _wait_registered(self, deadline: float) -> None:
        while asyncio.run(ns_route(self.ns_addr, "TBW102")) is None:
            if time.monotonic() > deadline:
                raise AssertionError("the broker did not register in time")
            time.sleep(0.1)

    def stop(self) -> None:
        for proc in reversed(self.procs):  # the broker first, so it can unregister
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(5)
