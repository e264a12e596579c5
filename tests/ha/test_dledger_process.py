"""DLedger mode with real processes: a name server and a 3-broker Raft group on 127.0.0.1.

Our client sends steadily (sync sends, each answered only after a quorum persisted it);
the leader (the group's master) is SIGKILLed; the group elects a new leader by itself,
which registers as master, and the client's sends resume. Then the old leader returns on
its store and catches up. Checked message by message: every SEND_OK is readable from every
broker's store at the queue offset its answer named; the time from the kill to the next
SEND_OK is reported and bounded.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from ledgermq.admin.client import AdminClient
from ledgermq.client import Message, Producer
from ledgermq.client.message import SendStatus
from ledgermq.config import StoreConfig
from ledgermq.store.message_store import MessageStore
from ledgermq.testing.ports import free_port
from tests.compat.cluster import HOST, START_TIMEOUT, ServerProcess, route, tcp_open, wait_until
from tests.ha.process_group import queue_bodies

GROUP = "dl-group"
TOPIC = "DLedgerProcTopic"
QUEUES = 4
SEG = 1024 * 1024


class DLedgerGroup:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.namesrv_port = free_port()
        self.namesrv_addr = f"{HOST}:{self.namesrv_port}"
        self.namesrv = ServerProcess("namesrv", ["namesrv", "-p", str(self.namesrv_port), "--host", HOST],
                                     root / "namesrv.log")  # fmt: skip
        self.ids = ["n0", "n1", "n2"]
        self.ports = {n: free_port(span=2) for n in self.ids}
        peers = ";".join(f"{n}-{HOST}:{free_port()}" for n in self.ids)
        self.brokers: dict[str, ServerProcess] = {}
        for n in self.ids:
            store = root / n / "store"
            store.mkdir(parents=True)
            props = {
                "brokerClusterName": "DLedgerCluster", "brokerName": GROUP, "brokerIP1": HOST, "listenHost": HOST,
                "listenPort": self.ports[n], "namesrvAddr": self.namesrv_addr, "storePathRootDir": store,
                "mappedFileSizeCommitLog": SEG, "mappedFileSizeConsumeQueue": 20 * 10_000,
                "registerNameServerPeriod": 1000, "slaveSyncInterval": 1000, "autoCreateTopicEnable": "true",
                "enableDLegerCommitLog": "true", "dLegerGroup": GROUP, "dLegerPeers": peers, "dLegerSelfId": n,
            }  # fmt: skip
            conf = root / f"{n}.conf"
            conf.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
            self.brokers[n] = ServerProcess(n, ["broker", "-c", str(conf)], root / f"{n}.log")

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

    def close(self) -> None:
        for b in self.brokers.values():
            if b.alive:
                b.kill()
        if self.namesrv.alive:
            self.namesrv.kill()

    def store_queues(self, n: str) -> dict[int, dict[int, bytes]]:
        cfg = StoreConfig(
            root_dir=str(self.root / n / "store"),
            mapped_file_size_commitlog=SEG,
            mapped_file_size_consume_queue=20 * 10_000,
            enable_dleger_commit_log=True,
            dleger_group=GROUP,
            dleger_self_id=n,
        )
        store = MessageStore(cfg)
        store.start()
        try:
            return {q: queue_bodies(store, TOPIC, q) for q in range(QUEUES)}
        finally:
            store.shutdown()


def test_a_dledger_group_elects_a_new_master_by_itself_and_keeps_every_acknowledged_message(tmp_path: Path) -> None:
    group = DLedgerGroup(tmp_path)
    acked: dict[bytes, tuple[int, int]] = {}
    report: dict[str, object] = {}
    try:
        group.start()
        first = group.master()
        assert first is not None

        async def run() -> None:
            producer = Producer("dl-pg", group.namesrv_addr, send_timeout=3.0)
            await producer.start()
            try:

                async def send(i: int) -> bool:
                    body = f"dl-{i:05d}".encode()
                    try:
                        r = await producer.send(Message(TOPIC, body, keys=[str(i)]))
                    except Exception:
                        return False
                    if r.status is SendStatus.SEND_OK:
                        acked[body] = (r.queue.queue_id, r.queue_offset)
                        return True
                    return False

                i = 0
                deadline = time.monotonic() + 30
                while len(acked) < 150 and time.monotonic() < deadline:
                    await send(i)
                    i += 1
                assert len(acked) >= 150, f"only {len(acked)} acknowledged before the kill{group.explain()}"
                group.brokers[first].kill()  # SIGKILL the leader
                killed = time.monotonic()
                resumed = None
                while time.monotonic() - killed < 30:
                    if await send(i):
                        resumed = time.monotonic() - killed
                        break
                    i += 1
                    await asyncio.sleep(0.01)
                assert resumed is not None, f"no SEND_OK within 30 s of killing the leader{group.explain()}"
                report["kill -> next SEND_OK s"] = round(resumed, 2)
                for _ in range(100):  # and it goes on
                    await send(i)
                    i += 1
                report["attempts"] = i
            finally:
                await producer.shutdown()

        asyncio.run(run())
        report["acked"] = len(acked)
        second = group.master()
        report["leaders"] = (first, second)
        assert second is not None and second != first
        group.brokers[first].start()  # the old leader returns on its store and catches up
        wait_until(f"{first}'s port", lambda: tcp_open(group.ports[first]), 20)
        wait_until(
            f"{first} to catch up with {second}",
            lambda: group.max_offset(first) == group.max_offset(second) > 0,
            30,
            0.2,
            group.explain,
        )
        for b in group.brokers.values():  # clean stops, then each store is read on its own
            assert b.stop() == 0, group.explain()
    finally:
        group.close()
    print(f"\nDLedger failover: {report}")
    assert report["kill -> next SEND_OK s"] < 5  # type: ignore[operator]
    for n in group.ids:
        served = group.store_queues(n)
        missing = [b for b, (q, off) in acked.items() if served[q].get(off) != b]
        assert not missing, f"{n}: {len(missing)} of {len(acked)} acknowledged messages missing, e.g. {missing[:5]}"
