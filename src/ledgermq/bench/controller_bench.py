"""``ledgermq bench produce --client controller``: controller mode against SYNC_MASTER, same run.

Two broker groups as processes, up at the same time: a name server running the controller
(``enableControllerInNamesrv``) with two brokers in controller mode and
``allAckInSyncStateSet=true`` (a SEND_OK once both replicas hold the message), and a name
server with a SYNC_MASTER and its slave (a SEND_OK once the slave holds it). Both do the
same replication work; controller mode adds heartbeats to the controller, the lease check
and the SyncStateSet bookkeeping on every acknowledgement. Our Producer sends in rounds
ordered CONTROLLER, SYNC, SYNC, CONTROLLER twice over (``replication_bench._drive``), each
round once both groups are caught up and quiet, so load that drifts during the run weighs
on both alike.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from ledgermq.admin.client import AdminClient
from ledgermq.bench.broker_bench import _spawn, _wait_port, _wait_route, stop_processes
from ledgermq.bench.replication_bench import MIB, Group, HAPair, ProducerRun, _drive
from ledgermq.testing.ports import free_port

__all__ = ["ControllerPair", "bench_controller_vs_sync"]

CONTROLLER_ROUND_ORDER = ("CONTROLLER", "SYNC_MASTER", "SYNC_MASTER", "CONTROLLER") * 2


class ControllerPair:
    """A name server with the controller inside and two controller-mode brokers (all-ack), as processes."""

    def __init__(self, work: Path, segment_size: int) -> None:
        self.work = work
        self.segment_size = segment_size
        self.ns_port = free_port()
        self.raft_port = free_port()
        self.ports = [free_port(span=2) for _ in range(2)]
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.ns_port}"

    def members(self) -> list[str]:
        return [f"127.0.0.1:{p}" for p in self.ports]

    def __enter__(self) -> ControllerPair:
        self.work.mkdir(parents=True, exist_ok=True)
        conf = self.work / "namesrv.conf"
        conf.write_text(
            "enableControllerInNamesrv=true\ncontrollerDLegerGroup=bench\n"
            f"controllerDLegerPeers=n0-127.0.0.1:{self.raft_port}\ncontrollerDLegerSelfId=n0\n"
            f"controllerStorePath={self.work / 'controller'}\nkvConfigPath={self.work / 'kv.json'}\n"
        )
        ns = _spawn(["ledgermq.cli.main", "namesrv", "-c", str(conf), "-p", str(self.ns_port)], self.work / "ns.log")
        self.procs.append(ns)
        _wait_port(self.ns_port, ns)
        return self

    def _broker(self, name: str, port: int) -> subprocess.Popen[bytes]:
        d = self.work / name
        d.mkdir(parents=True, exist_ok=True)
        props: dict[str, object] = {
            "brokerClusterName": "BenchCluster",
            "brokerName": "bench-controller",
            "brokerIP1": "127.0.0.1",
            "listenPort": port,
            "namesrvAddr": self.namesrv,
            "storePathRootDir": d / "store",
            "mappedFileSizeCommitLog": self.segment_size,
            "registerNameServerPeriod": 1000,
            "enableControllerMode": "true",
            "controllerAddr": self.namesrv,
            "allAckInSyncStateSet": "true",
        }
        (d / "broker.properties").write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        proc = _spawn(["ledgermq.cli.main", "broker", "-c", str(d / "broker.properties")], d / "broker.log")
        self.procs.append(proc)
        return proc

    def start(self, timeout: float = 30.0) -> None:
        """The first broker up is elected master; then the second, until it is in the SyncStateSet."""
        first = self._broker("a", self.ports[0])
        _wait_port(self.ports[0], first)
        _wait_route(self.namesrv, "TBW102", first)
        second = self._broker("b", self.ports[1])
        _wait_port(self.ports[1], second)
        asyncio.run(self._wait_sync_state_set(2, timeout))

    async def _wait_sync_state_set(self, size: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        async with AdminClient(self.namesrv, timeout=2.0, connect_timeout=0.5) as admin:
            while time.monotonic() < deadline:
                try:
                    info = await admin.broker_runtime_info(self.members()[0])
                    if len([m for m in info.get("syncStateSet", "").split(",") if m]) == size:
                        return
                except Exception:
                    pass
                await asyncio.sleep(0.05)
        raise RuntimeError(f"the controller-mode group's SyncStateSet did not reach {size} within {timeout}s")

    def __exit__(self, *exc: object) -> None:
        stop_processes(self.procs)


def bench_controller_vs_sync(
    count: int, size: int, concurrency: int, workdir: Path | None = None
) -> tuple[ProducerRun, ProducerRun]:
    """(controller mode + slave with allAckInSyncStateSet, SYNC_MASTER + slave), all up at once;
    our Producer sends ``count`` messages to each in the rounds of ``CONTROLLER_ROUND_ORDER``."""
    base = workdir or Path(tempfile.mkdtemp(prefix="ledgermq-bench-controller-"))
    try:
        with (
            ControllerPair(base / "controller", 64 * MIB) as ctl,
            HAPair(base / "sync", "SYNC_MASTER", 64 * MIB) as sync,
        ):
            ctl.start()
            sync.start_master()
            slave = sync.spawn_slave()
            _wait_port(sync.slave_port, slave)
            groups: dict[str, Group] = {"CONTROLLER": ctl, "SYNC_MASTER": sync}
            runs = asyncio.run(_drive(groups, count, size, concurrency, CONTROLLER_ROUND_ORDER))
        return runs["CONTROLLER"], runs["SYNC_MASTER"]
    finally:
        if workdir is None:
            shutil.rmtree(base, ignore_errors=True)
