"""A name server and a 3-broker DLedger group (n0, n1, n2) as real processes on 127.0.0.1.

Used by tests/ha/test_dledger_process.py (failover) and tests/ha/test_dledger_ops.py
(dledgerStatus, transferLeader, metrics). Every process is killed by pid in ``close``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from ledgermq.admin.client import AdminClient
from ledgermq.config import StoreConfig
from ledgermq.store.message_store import open_message_store
from ledgermq.testing.ports import free_port
from tests.compat.cluster import HOST, START_TIMEOUT, ServerProcess, route, tcp_open, wait_until
from tests.ha.process_group import queue_bodies

GROUP = "dl-group"
TOPIC = "DLedgerProcTopic"
QUEUES = 4
SEG = 1024 * 1024
FAILPOINTS_ENV = "LEDGERMQ_FAILPOINTS"


class DLedgerGroup:
    def __init__(
        self,
        root: Path,
        *,
        metrics: bool = False,
        extra: dict[str, object] | None = None,
        segment: int = SEG,
        failpoints: str | None = None,
    ) -> None:
        """``failpoints``: LEDGERMQ_FAILPOINTS for every broker (run through chaos_child, which arms them)."""
        self.root = root
        self.segment = segment
        self.namesrv_port = free_port()
        self.namesrv_addr = f"{HOST}:{self.namesrv_port}"
        self.namesrv = ServerProcess("namesrv", ["namesrv", "-p", str(self.namesrv_port), "--host", HOST,
                                                 "--kv-config", str(root / "kvConfig.json")],
                                     root / "namesrv.log")  # fmt: skip  # not ~/namesrv: suites run side by side
        self.ids = ["n0", "n1", "n2"]
        self.ports = {n: free_port(span=2) for n in self.ids}
        self.metrics_ports = {n: free_port() if metrics else 0 for n in self.ids}
        peers = ";".join(f"{n}-{HOST}:{free_port()}" for n in self.ids)
        self.brokers: dict[str, ServerProcess] = {}
        for n in self.ids:
            store = root / n / "store"
            store.mkdir(parents=True)
            props = {
                "brokerClusterName": "DLedgerCluster", "brokerName": GROUP, "brokerIP1": HOST, "listenHost": HOST,
                "listenPort": self.ports[n], "namesrvAddr": self.namesrv_addr, "storePathRootDir": store,
                "mappedFileSizeCommitLog": segment, "mappedFileSizeConsumeQueue": 20 * 10_000,
                "registerNameServerPeriod": 1000, "slaveSyncInterval": 1000, "autoCreateTopicEnable": "true",
                "enableDLegerCommitLog": "true", "dLegerGroup": GROUP, "dLegerPeers": peers, "dLegerSelfId": n,
                "metricsPort": self.metrics_ports[n], **(extra or {}),
            }  # fmt: skip
            conf = root / f"{n}.conf"
            conf.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
            self.brokers[n] = ServerProcess(
                n,
                ["broker", "-c", str(conf)],
                root / f"{n}.log",
                module="ledgermq.cli.chaos_child" if failpoints else "ledgermq.cli.main",
                env={FAILPOINTS_ENV: failpoints} if failpoints else None,
            )

    def addr(self, n: str) -> str:
        return f"{HOST}:{self.ports[n]}"

    def master(self) -> str | None:
        """The node the name server lists as the group's master (brokerId 0), if any."""
        data = route(self.namesrv_addr, "TBW102")
        for bd in data.broker_datas if data is not None else []:
            if bd.broker_name == GROUP and 0 in bd.broker_addrs:
                return next((n for n in self.ids if self.addr(n) == bd.broker_addrs[0]), None)
        return None

    def start(self) -> None:
        self.namesrv.start()
        wait_until("the name server", lambda: tcp_open(self.namesrv_port), 15)
        for b in self.brokers.values():
            b.start()
        for n, b in self.brokers.items():
            ready = lambda b=b, n=n: b.check_alive() and tcp_open(self.ports[n])  # noqa: E731
            wait_until(f"{n}'s port", ready, 2 * START_TIMEOUT, 0.05, self.explain)
        wait_until("a master elected and registered", lambda: self.master() is not None, 20, 0.1, self.explain)

    def explain(self) -> str:
        from tests.compat.cluster import tail

        return "".join(f"\n--- {n} ---\n{tail(b.log_path, 15)}" for n, b in self.brokers.items())

    def max_offset(self, n: str) -> int:
        async def ask() -> int:
            async with AdminClient(self.namesrv_addr, timeout=2.0, connect_timeout=1.0) as admin:
                return int((await admin.broker_runtime_info(self.addr(n)))["commitLogMaxOffset"])

        try:
            return asyncio.run(ask())
        except Exception:
            return -1

    def wait_caught_up(self, member: str, leader: str) -> None:
        """Until ``member``'s commit log ends where ``leader``'s does (and holds something)."""
        wait_until(
            f"{member} to catch up with {leader}",
            lambda: self.max_offset(member) == self.max_offset(leader) > 0,
            30,
            0.2,
            self.explain,
        )

    def close(self) -> None:
        for b in self.brokers.values():
            if b.alive:
                b.kill()
        if self.namesrv.alive:
            self.namesrv.kill()

    def store_queues(self, n: str) -> dict[int, dict[int, bytes]]:
        cfg = StoreConfig(
            root_dir=str(self.root / n / "store"),
            mapped_file_size_commitlog=self.segment,
            mapped_file_size_consume_queue=20 * 10_000,
            enable_dleger_commit_log=True,
            dleger_group=GROUP,
            dleger_self_id=n,
        )
        store = open_message_store(cfg)
        store.start()
        try:
            return {q: queue_bodies(store, TOPIC, q) for q in range(QUEUES)}
        finally:
            store.shutdown()
