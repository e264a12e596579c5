"""Broker layouts a chaos run drives: real processes on 127.0.0.1, one store and log each.

A ``Layout`` names its broker processes ("nodes"), tells which node is the master now
(``current_master``; a DLedger group's leader moves, a master-slave group's does not), and
kills (SIGKILL), restarts (same port, same store), pauses (SIGSTOP) and resumes (SIGCONT)
nodes by the pid it started. ``links`` are the TCP links the runner carries through a
fault proxy so a partition can be injected between nodes.

``MasterSlaveLayout``: a name server, a master (SYNC_MASTER or ASYNC_MASTER) and one slave.
The slave's replication link goes through a proxy without root or network namespaces: the
master binds its HA port on 127.0.0.1 only and advertises ``brokerIP2=127.0.0.2`` (the HA
address RocketMQ registers), so the name server sends the slave to 127.0.0.2:<haPort>,
where the proxy listens and forwards to 127.0.0.1:<haPort> (Linux routes all of 127/8 to
loopback). The slave's haMasterAddress names the same proxy address. Segments are small
(256 KiB commit log) so a full disk bites at the next roll.

With ``tls`` (chaos/tls.py) every process runs in enforcing mode with mutual TLS and every
client the harness makes (``admin()``, the workload, the read-back) connects over TLS.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ledgermq.admin.client import AdminClient
from ledgermq.chaos.process import ChildProcess
from ledgermq.chaos.tls import ChaosTls
from ledgermq.client.tls import TlsOptions
from ledgermq.clock import CLOCK_SKEW_ENV
from ledgermq.failpoints import ENOSPC_IF, FSYNC_LOG_ENV, STALL_IF
from ledgermq.protocol.route import TopicRouteData
from ledgermq.testing.ports import free_port

HOST = "127.0.0.1"
PROXY_HOST = "127.0.0.2"  # the advertised HA host; the fault proxy listens here
CLUSTER = "ChaosCluster"
GROUP = "chaos-a"
# Small segments so a full disk bites within seconds: at the default 200 sends/s of ~250-byte
# records a 256 KiB commit-log segment rolls every ~5 s, and each queue's consume-queue
# segment (1000 units) every ~20 s.
SEGMENT = 256 * 1024
CQ_SEGMENT = 20 * 1000
START_TIMEOUT_S = 30.0
# Where a full disk bites: a new segment (commit log, consume queue, index), every
# atomically replaced file (checkpoint, metadata snapshots) and the metadata change logs.
DISK_FULL_POINTS = (
    "mapped_file_queue.before_create",
    "consume_queue.before_create",
    "atomic_file.before_fsync",
    "metadata_log.before_append",
)
# Where a slow disk stalls: the fsync of every data file (commit log and DLedger files are
# mapped files; consume queues have their own).
SLOW_DISK_POINTS = ("mapped_file.before_fsync", "consume_queue.before_fsync")


def node_env(home: Path) -> dict[str, str]:
    """A broker's chaos environment: the full-disk and slow-disk flags its failpoints watch,
    the fsync log a power loss is cut by, the file its wall clock's skew is read from."""
    full, slow = home / "disk-full.flag", home / "slow-disk.flag"
    points = [f"{p}={ENOSPC_IF}{full}" for p in DISK_FULL_POINTS] + [f"{p}={STALL_IF}{slow}" for p in SLOW_DISK_POINTS]
    return {
        "LEDGERMQ_FAILPOINTS": ",".join(points),
        FSYNC_LOG_ENV: str(home / "fsync.log"),
        CLOCK_SKEW_ENV: str(home / "clock-skew"),
    }


@dataclass(frozen=True, slots=True)
class Link:
    """A TCP link between nodes that the runner carries through a FaultProxy."""

    name: str
    listen: tuple[str, int]
    target: tuple[str, int]


@dataclass(slots=True)
class Node:
    name: str
    broker_id: int
    role: str  # brokerRole
    port: int
    store_dir: Path
    disk_full_flag: Path
    process: ChildProcess

    @property
    def addr(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def home(self) -> Path:
        return self.store_dir.parent

    @property
    def slow_disk_flag(self) -> Path:
        return self.home / "slow-disk.flag"

    @property
    def clock_skew_file(self) -> Path:
        return self.home / "clock-skew"

    @property
    def fsync_log(self) -> Path:
        return self.home / "fsync.log"

    def clear_flags(self) -> None:
        """No full disk, no slow disk, the real time."""
        for f in (self.disk_full_flag, self.slow_disk_flag, self.clock_skew_file):
            f.unlink(missing_ok=True)


@dataclass(frozen=True, slots=True)
class Stability:
    stable: bool
    detail: str
    max_offsets: dict[str, int]


class Layout(Protocol):
    """What a chaos run needs from a broker layout (master-slave, or a DLedger group)."""

    name: str
    namesrv_addr: str
    root: Path
    roles_move: bool  # which node is master changes (DLedger, controller mode): read back by node name

    def targets(self) -> list[str]:
        """The broker nodes faults may hit."""
        ...

    async def current_master(self) -> str | None:
        """The node that takes writes now (None while a DLedger group elects a leader)."""
        ...

    async def wait_master(self, timeout: float) -> str | None:
        """Until a node takes writes (bounded); that node, None if none did in time."""
        ...

    def node(self, name: str) -> Node: ...

    def links(self) -> list[Link]: ...

    async def start(self) -> None: ...

    def kill(self, name: str) -> None: ...

    def kill_all(self) -> None:
        """SIGKILL every broker node at once (a power loss), then reap them."""
        ...

    def stop(self, name: str) -> None:
        """A clean shutdown (SIGTERM, waited for)."""
        ...

    async def restart(self, name: str) -> None:
        """Start a dead node again on its port and store; wait until it serves and registered."""
        ...

    async def restart_all(self, names: list[str]) -> None:
        """Start several dead nodes together, then wait for each (a group that lost power)."""
        ...

    def pause(self, name: str) -> None: ...

    def resume(self, name: str) -> None: ...

    async def wait_stable(self, timeout: float) -> Stability:
        """Until every node runs and the replicas hold the master's commit log (bounded)."""
        ...

    async def ready_for_fault(self, timeout: float) -> str:
        """Until the group could survive one more fault (bounded); "" when it can, else why not."""
        ...

    def explain(self) -> str: ...

    def close(self) -> None: ...

    @property
    def client_tls(self) -> TlsOptions | None:
        """How the harness's clients connect (None: plain)."""

    def admin(self, timeout: float = 2.0, connect_timeout: float = 1.0) -> AdminClient:
        """An admin client of the layout's name server, over TLS when the layout runs it."""


async def tcp_open(host: str, port: int) -> bool:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 1.0)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


async def _poll(check_once: Callable[[], Awaitable[bool]], timeout: float, interval: float) -> bool:
    """``await check_once()`` until true or ``timeout``; bounded by time and count."""
    deadline = time.monotonic() + timeout
    for _ in range(int(timeout / interval) + 2):
        if await check_once():
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(interval)
    return False


class ProcessLayout:
    """What every layout of real processes shares: a name server, broker nodes by name, and
    how to start, kill, pause, ask and explain them. Subclasses add their nodes and roles."""

    name = "layout"
    roles_move = False

    def __init__(self, root: Path, tls: ChaosTls | None = None) -> None:
        self.root = root.resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.tls = tls
        self.namesrv_port = free_port()
        self.namesrv_addr = f"{HOST}:{self.namesrv_port}"
        kv = self.root / "kvConfig.json"
        args = ["namesrv", "-p", str(self.namesrv_port), "--host", HOST, "--kv-config", str(kv)]
        if tls is not None:
            conf = self.root / "namesrv.properties"
            conf.write_text(_properties(tls.server_props()))
            args += ["-c", str(conf)]
        self.namesrv = ChildProcess("namesrv", args, self.root / "logs" / "namesrv.log")
        self.nodes: dict[str, Node] = {}

    @property
    def client_tls(self) -> TlsOptions | None:
        return self.tls.client_options() if self.tls is not None else None

    def admin(self, timeout: float = 2.0, connect_timeout: float = 1.0) -> AdminClient:
        return AdminClient(self.namesrv_addr, timeout=timeout, connect_timeout=connect_timeout, tls=self.client_tls)

    def server_props(self) -> dict[str, object]:
        """What every broker's config gets for the layout's TLS (nothing without)."""
        return self.tls.server_props() if self.tls is not None else {}

    def targets(self) -> list[str]:
        return list(self.nodes)

    def node(self, name: str) -> Node:
        return self.nodes[name]

    def kill(self, name: str) -> None:
        self.nodes[name].process.kill()

    def kill_all(self) -> None:
        for node in self.nodes.values():
            node.process.send_kill()
        for node in self.nodes.values():
            node.process.kill()

    def stop(self, name: str) -> None:
        self.nodes[name].process.stop()

    async def restart(self, name: str) -> None:
        node = self.nodes[name]
        node.process.start()
        await self._await_up(node)

    async def restart_all(self, names: list[str]) -> None:
        for name in names:
            self.nodes[name].process.start()
        for name in names:
            await self._await_up(self.nodes[name])

    async def _await_up(self, node: Node) -> None:
        """Until a started node serves and is registered (each layout knows what that means)."""
        raise NotImplementedError

    async def ready_for_fault(self, timeout: float) -> str:
        """A master-slave or DLedger group takes the next fault as it is (its runs include
        faults that overlap on purpose)."""
        return ""

    def pause(self, name: str) -> None:
        self.nodes[name].process.pause()

    def resume(self, name: str) -> None:
        self.nodes[name].process.resume()

    async def max_offset(self, name: str) -> int:
        """The node's commitLogMaxOffset, -1 when it does not answer."""
        try:
            async with self.admin() as admin:
                info = await admin.broker_runtime_info(self.nodes[name].addr)
            return int(info["commitLogMaxOffset"])
        except Exception:
            return -1

    def explain(self) -> str:
        parts = [f"\n--- {n.name} ({n.process.log_path}) ---\n{n.process.tail(20)}" for n in self.nodes.values()]
        return "".join(parts) + f"\n--- namesrv ---\n{self.namesrv.tail(8)}"

    def close(self) -> None:
        """Kill every process this layout started (by pid) and clear the disk-full flags."""
        for node in self.nodes.values():
            node.process.kill()
            node.clear_flags()
        self.namesrv.kill()

    # -- helpers ----------------------------------------------------------------------
    async def _start_namesrv(self) -> None:
        self.namesrv.start()
        if not await _poll(lambda: self._alive_and_open(self.namesrv, self.namesrv_port), START_TIMEOUT_S, 0.05):
            raise RuntimeError(f"the name server did not start{self.explain()}")

    async def _wait_port(self, node: Node) -> None:
        if not await _poll(lambda: self._alive_and_open(node.process, node.port), START_TIMEOUT_S, 0.05):
            raise RuntimeError(f"{node.name} did not open its port{self.explain()}")

    async def _wait_registered(self, node: Node) -> None:
        if not await _poll(lambda: self._registered(node), START_TIMEOUT_S, 0.1):
            raise RuntimeError(f"{node.name} did not register with the name server{self.explain()}")

    async def _registered(self, node: Node) -> bool:
        if not node.process.alive:
            raise RuntimeError(f"{node.name} exited with {node.process.exit_code}:\n{node.process.tail()}")
        try:
            async with self.admin() as admin:
                route = await admin.route("TBW102")
        except Exception:
            return False
        return self._listed(node, route)

    def _listed(self, node: Node, route: TopicRouteData) -> bool:
        """Whether the name server's route lists ``node`` as the layout expects."""
        return any(d.broker_addrs.get(node.broker_id) == node.addr for d in route.broker_datas)

    @staticmethod
    async def _alive_and_open(proc: ChildProcess, port: int) -> bool:
        if not proc.alive:
            raise RuntimeError(f"{proc.name} exited with {proc.exit_code}:\n{proc.tail()}")
        return await tcp_open(HOST, port)

    def running_node_at(self, addr: str | None) -> str | None:
        """The node serving at ``addr`` if it runs (alive and not stopped)."""
        for node in self.nodes.values():
            if node.addr == addr and node.process.alive and not node.process.paused:
                return node.name
        return None

    async def current_master(self) -> str | None:
        raise NotImplementedError

    async def wait_master(self, timeout: float) -> str | None:
        """Until a running node is the master (bounded): layouts whose master moves."""
        deadline = time.monotonic() + timeout
        found: str | None = None

        async def check() -> bool:
            nonlocal found
            found = await self.current_master()
            return found is not None or time.monotonic() > deadline

        await _poll(check, timeout, 0.05)
        return found


class MasterSlaveLayout(ProcessLayout):
    """``MasterSlaveLayout(root, sync=True)``; ``await start()``; ... ; ``close()``."""

    def __init__(
        self, root: Path, *, sync: bool, extra_props: dict[str, object] | None = None, tls: ChaosTls | None = None
    ) -> None:
        super().__init__(root, tls)
        self.name = "sync" if sync else "async"
        master_role = "SYNC_MASTER" if sync else "ASYNC_MASTER"
        self.master = self._node("master", 0, master_role, extra_props or {})
        self.slave = self._node("slave", 1, "SLAVE", extra_props or {})
        self.nodes = {n.name: n for n in (self.master, self.slave)}
        self._closed = False

    # -- configuration ----------------------------------------------------------------
    def _node(self, name: str, broker_id: int, role: str, extra: dict[str, object]) -> Node:
        port = free_port(span=2)  # listenPort and the HA port, listenPort + 1
        home = self.root / name
        store = home / "store"
        store.mkdir(parents=True, exist_ok=True)
        props: dict[str, object] = {
            "brokerClusterName": CLUSTER,
            "brokerName": GROUP,
            "brokerId": broker_id,
            "brokerRole": role,
            "brokerIP1": HOST,
            "listenHost": HOST,
            "listenPort": port,
            "namesrvAddr": self.namesrv_addr,
            "storePathRootDir": store,
            "mappedFileSizeCommitLog": SEGMENT,
            "mappedFileSizeConsumeQueue": CQ_SEGMENT,
            "registerNameServerPeriod": 1000,
            "haSendHeartbeatInterval": 1000,
            "haHousekeepingInterval": 5000,
            "slaveSyncInterval": 1000,
            "flushConsumerOffsetInterval": 1000,
            "syncFlushTimeout": 2000,
            **self.server_props(),
            **extra,
        }
        if broker_id == 0:
            props["brokerIP2"] = PROXY_HOST  # the HA address the name server hands the slave
        else:
            props["haMasterAddress"] = f"{PROXY_HOST}:{self.master.port + 1}"
        conf = home / "broker.properties"
        conf.write_text(_properties(props))
        proc = ChildProcess(name, ["broker", "-c", str(conf)], self.root / "logs" / f"{name}.log", node_env(home))
        node = Node(name, broker_id, role, port, store, home / "disk-full.flag", proc)
        node.clear_flags()
        return node

    # -- the protocol -----------------------------------------------------------------
    async def current_master(self) -> str | None:
        return self.master.name

    async def wait_master(self, timeout: float) -> str | None:
        return self.master.name

    def links(self) -> list[Link]:
        ha = self.master.port + 1
        return [Link("ha:master-slave", (PROXY_HOST, ha), (HOST, ha))]

    async def start(self) -> None:
        await self._start_namesrv()
        for node in self.nodes.values():
            await self.restart(node.name)

    async def _await_up(self, node: Node) -> None:
        await self._wait_port(node)
        await self._wait_registered(node)

    async def wait_stable(self, timeout: float) -> Stability:
        offsets: dict[str, int] = {}
        why = ""

        async def check() -> bool:
            nonlocal why
            for node in self.nodes.values():
                if not node.process.alive or node.process.paused:
                    why = f"{node.name} is not running"
                    return False
                offsets[node.name] = await self.max_offset(node.name)
            target = offsets[self.master.name]
            why = f"commit-log max offsets {offsets}"
            return target >= 0 and all(o == target for o in offsets.values())

        ok = await _poll(check, timeout, 0.2)
        return Stability(ok, why, dict(offsets))

    def close(self) -> None:
        super().close()
        self._closed = True


def _properties(props: dict[str, object]) -> str:
    return "".join(f"{k}={v}\n" for k, v in props.items())
