"""Two independent name servers, one of them killed: our producer and consumers go on by themselves.

Real processes: two ``ledgermq namesrv`` and two master brokers registering with both. The clients are given
``"ns1;ns2"`` and are made to prefer ns1 (the server they would have picked at random); ns1 is then SIGKILLed.
Sends to a known topic, sends that auto-create a new topic (a route only ns2 can give now), and consumption of
both topics (the second subscribed after the kill) by a lite pull consumer and by a push consumer must all go on,
with no message lost or duplicated.
"""

from __future__ import annotations

import asyncio
import collections
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledgermq.client import Message, Producer
from ledgermq.client.consumer.common import ConsumeFromWhere
from ledgermq.client.lite_pull.consumer import LitePullConsumer
from ledgermq.client.push.consume_service import ConsumeConcurrentlyStatus
from ledgermq.client.push.consumer import PushConsumer
from ledgermq.protocol.message import MessageRecord
from tests.compat.cluster import HOST, START_TIMEOUT, ServerProcess, free_port, route, tail, tcp_open, wait_until

UID = "uid"
TOPIC, NEW_TOPIC = "NsFailover", "NsFailoverNew"


class TwoNamesrvCluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.ns_ports = [free_port(), free_port()]
        self.namesrvs = [
            ServerProcess(
                f"ns{i + 1}",
                ["namesrv", "-p", str(port), "--host", HOST, "--kv-config", str(root / f"kv{i + 1}.json")],
                root / f"ns{i + 1}.log",
            )
            for i, port in enumerate(self.ns_ports)
        ]
        self.ns_addrs = [f"{HOST}:{p}" for p in self.ns_ports]
        self.brokers: list[tuple[str, int, ServerProcess]] = []
        for name in ("broker-a", "broker-b"):
            port = free_port(span=2)
            store = root / name
            store.mkdir(parents=True)
            props = {
                "brokerClusterName": "NsFailoverCluster",
                "brokerName": name,
                "brokerId": 0,
                "brokerIP1": HOST,
                "listenHost": HOST,
                "listenPort": port,
                "namesrvAddr": ";".join(self.ns_addrs),
                "storePathRootDir": store,
                "mappedFileSizeCommitLog": 4 * 1024 * 1024,
                "mappedFileSizeConsumeQueue": 20 * 10_000,
                "registerNameServerPeriod": 1000,
            }
            conf = store / "broker.properties"
            conf.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
            self.brokers.append((name, port, ServerProcess(name, ["broker", "-c", str(conf)], store / "broker.log")))

    def start(self) -> None:
        for ns, port in zip(self.namesrvs, self.ns_ports, strict=True):
            ns.start()
            wait_until(f"{ns.name}'s port", lambda ns=ns, port=port: ns.check_alive() and tcp_open(port), START_TIMEOUT)
        for name, port, proc in self.brokers:
            proc.start()
            wait_until(f"{name}'s port", lambda p=proc, port=port: p.check_alive() and tcp_open(port), START_TIMEOUT)
        for addr in self.ns_addrs:
            wait_until(f"both brokers registered with {addr}", lambda a=addr: self.registered(a), START_TIMEOUT, 0.1)

    def registered(self, ns_addr: str) -> bool:
        data = route(ns_addr, "TBW102")
        return data is not None and {b.broker_name for b in data.broker_datas} == {"broker-a", "broker-b"}

    def close(self) -> None:
        for _, _, proc in self.brokers:
            proc.kill()
        for ns in self.namesrvs:
            ns.kill()

    def explain(self) -> str:
        logs = [(p.name, p.log_path) for _, _, p in self.brokers] + [(n.name, n.log_path) for n in self.namesrvs]
        return "".join(f"\n--- {name} ---\n{tail(path, 15)}" for name, path in logs)


@pytest.fixture
def two_ns(tmp_path: Path) -> Iterator[TwoNamesrvCluster]:
    c = TwoNamesrvCluster(tmp_path)
    try:
        c.start()
        yield c
    finally:
        c.close()


async def _consume_until(
    consumer: LitePullConsumer, want: set[str], got: collections.Counter[str], timeout: float
) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not want <= set(got) and loop.time() < deadline:
        records: list[MessageRecord] = await consumer.poll(0.5)
        got.update(r.properties[UID] for r in records)


async def _scenario(c: TwoNamesrvCluster) -> None:
    namesrv = ";".join(c.ns_addrs)
    fast = {"poll_namesrv_interval": 0.5, "api_timeout": 2.0}
    producer = Producer("PG_ns_failover", namesrv, rng=random.Random(7), send_timeout=10.0, **fast)
    consumer = LitePullConsumer(
        "CG_ns_failover",
        namesrv,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        rebalance_interval=0.5,
        heartbeat_interval=1.0,
        rng=random.Random(8),
        **fast,
    )
    pushed: collections.Counter[str] = collections.Counter()

    def on_messages(msgs: list[MessageRecord], _context: object) -> ConsumeConcurrentlyStatus:
        pushed.update(m.properties[UID] for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    push = PushConsumer(
        "CG_ns_failover_push",
        namesrv,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        rebalance_interval=0.5,
        heartbeat_interval=1.0,
        **fast,
    )
    push.register_listener(on_messages)
    async with producer:
        for i in range(40):  # the topic exists before the consumer starts
            await producer.send(Message(TOPIC, f"before {i}".encode(), properties={UID: f"before-{i}"}))
        consumer.subscribe(TOPIC)
        push.subscribe(TOPIC)
        async with consumer, push:
            got: collections.Counter[str] = collections.Counter()
            # both clients use ns1 for everything until it dies
            producer.instance.namesrv.preferred = 0
            consumer.instance.namesrv.preferred = 0
            push.instance.namesrv.preferred = 0
            before = {f"before-{i}" for i in range(40)}
            await _consume_until(consumer, before, got, 30.0)
            assert before <= set(got), f"before the kill: missing {sorted(before - set(got))}"

            c.namesrvs[0].kill()
            after = set()
            for i in range(40):
                await producer.send(Message(TOPIC, f"after {i}".encode(), properties={UID: f"after-{i}"}))
                after.add(f"after-{i}")
            for i in range(20):  # a topic born after the kill: its route can only come from ns2
                await producer.send(Message(NEW_TOPIC, f"new {i}".encode(), properties={UID: f"new-{i}"}))
                after.add(f"new-{i}")
            assert producer.instance.namesrv.preferred == 1
            consumer.subscribe(NEW_TOPIC)
            push.subscribe(NEW_TOPIC)
            await _consume_until(consumer, before | after, got, 40.0)
            missing = sorted((before | after) - set(got))
            assert not missing, f"lost after the name server died: {missing}{c.explain()}"
            duplicates = {u: n for u, n in got.items() if n > 1}
            assert not duplicates, f"duplicates: {duplicates}"
            assert consumer.instance.namesrv.preferred == 1
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 40.0
            while not (before | after) <= set(pushed) and loop.time() < deadline:
                await asyncio.sleep(0.1)
            missing = sorted((before | after) - set(pushed))
            assert not missing, f"the push consumer lost: {missing}{c.explain()}"
            assert not {u: n for u, n in pushed.items() if n > 1}, "push duplicates"
            assert push.instance.namesrv.preferred == 1


def test_clients_survive_a_killed_name_server(two_ns: TwoNamesrvCluster) -> None:
    asyncio.run(asyncio.wait_for(_scenario(two_ns), 120))
