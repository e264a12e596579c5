"""Timer messages from Apache's C++ client (the ``rocketmq`` wheel), which has no timer API:
it sets the properties by hand, each of the four the broker reads (TIMER_DELAY_SEC,
TIMER_DELAY_MS, TIMER_DELIVER_MS and Aliyun's ``__STARTDELIVERTIME``). A C++ push consumer
and our push consumer, each in its own group, receive every timer once, with its
properties and msgId, never early and at most a step (plus the way to the consumer) late.
Real processes on 127.0.0.1: a name server, a broker, C++ client children."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledgermq.client import ConsumeConcurrentlyStatus, ConsumeFromWhere, PushConsumer
from ledgermq.protocol import properties as P
from ledgermq.protocol.message import MessageRecord
from tests.compat.cluster import HAVE_CPP_CLIENT, Cluster, wait_until
from tests.compat.test_cpp_client import UID

pytestmark = pytest.mark.skipif(not HAVE_CPP_CLIENT, reason="the Apache RocketMQ C++ client wheel is missing")

TOPIC = "CppTimers"
PRECISION_MS = 100
LATE_MS = 2_000  # a step, the write, the consumer's long poll and a loaded machine's scheduling
PER_PROPERTY = 3


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path / "cluster", timerPrecisionMs=PRECISION_MS)
    try:
        c.start()
        yield c
    finally:
        c.close()


class OurConsumer:
    """Our push consumer on a thread of its own, noting when each message arrived."""

    def __init__(self, namesrv: str) -> None:
        self.namesrv = namesrv
        self.got: list[tuple[MessageRecord, int]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _run(self) -> None:
        def on_messages(msgs: list[MessageRecord], _ctx: object) -> ConsumeConcurrentlyStatus:
            now = int(time.time() * 1000)
            self.got.extend((m, now) for m in msgs)
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        consumer = PushConsumer(
            "CG_timers_ours", self.namesrv, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
        )
        consumer.subscribe(TOPIC)
        consumer.register_listener(on_messages)
        async with consumer:
            while not self.stop.is_set():
                await asyncio.sleep(0.05)

    def uids(self) -> list[str]:
        return [m.properties.get(UID, "") for m, _ in self.got]


def timers(now_ms: int) -> list[dict[str, object]]:
    """Each of the four properties, set by hand, due 4 to 6.5 s from now."""
    out: list[dict[str, object]] = []
    for k in range(PER_PROPERTY):
        for j, (name, value) in enumerate(
            [
                (P.TIMER_DELAY_SEC, "4"),
                (P.TIMER_DELAY_MS, str(4_500 + 100 * k)),
                (P.TIMER_DELIVER_MS, str(now_ms + 5_000 + 300 * k)),
                (P.START_DELIVER_TIME, str(now_ms + 5_500 + 300 * k)),
            ]
        ):
            uid = f"timer-{j}-{k}"
            out.append(
                {"topic": TOPIC, "body": f"{name} {value}", "tags": "T", "keys": uid, "props": {UID: uid, name: value}}
            )
    return out


def due_ms(sent: dict[str, object], born_ms: int) -> int:
    """The earliest the timer may arrive: a relative delay counts from the broker's receipt,
    which is after the client's born timestamp."""
    props = sent["props"]
    assert isinstance(props, dict)
    if P.TIMER_DELAY_SEC in props:
        return born_ms + int(props[P.TIMER_DELAY_SEC]) * 1000
    if P.TIMER_DELAY_MS in props:
        return born_ms + int(props[P.TIMER_DELAY_MS])
    return int(props.get(P.TIMER_DELIVER_MS) or props[P.START_DELIVER_TIME])


def test_cpp_client_timers_reach_both_consumers_once_and_on_time(cluster: Cluster) -> None:
    warm = {"topic": TOPIC, "body": "warm-up", "tags": "T", "keys": "warm", "props": {UID: "warm"}}
    [warmed] = cluster.run_client([{"op": "send", "mode": "sync", "group": "PG_timers", "messages": [warm]}])
    assert [r["status"] for r in warmed["results"]] == ["OK"]
    cluster.wait_route(TOPIC)
    ours = OurConsumer(cluster.namesrv_addr)
    ours.thread.start()
    cpp = cluster.start_client(
        [{"op": "push", "group": "CG_timers_cpp", "topic": TOPIC, "uid_prop": UID, "expect_uids": ["warm"],
          "props": [UID, P.TIMER_OUT_MS, P.TIMER_DELAY_SEC, P.TIMER_DELAY_MS, P.TIMER_DELIVER_MS,
                    P.START_DELIVER_TIME], "timeout": 30.0, "settle": 0.1, "hold": True}]
    )  # fmt: skip
    try:
        cpp.wait_ready(40.0)  # it consumed the warm-up: rebalanced and pulling
        wait_until("our consumer to get the warm-up", lambda: "warm" in ours.uids(), 30, 0.05)
        sent = timers(int(time.time() * 1000))
        [send] = cluster.run_client([{"op": "send", "mode": "sync", "group": "PG_timers", "messages": sent}])
        assert [r["status"] for r in send["results"]] == ["OK"] * len(sent), send
        every = {str(m["keys"]) for m in sent}
        wait_until("our consumer to get every timer", lambda: every <= set(ours.uids()), 30, 0.05)
        time.sleep(1.0)  # room for a duplicate to show
    finally:
        ours.stop.set()
        [push] = cpp.release(30.0)
        ours.thread.join(15)
    msg_ids = {str(m["keys"]): r["msg_id"] for m, r in zip(sent, send["results"], strict=True)}
    by_uid = {str(m["keys"]): m for m in sent}

    cpp_got = [r for r in push["messages"] if r["props"][UID] != "warm"]
    assert Counter(r["props"][UID] for r in cpp_got) == Counter(every), "the C++ consumer: each timer once"
    our_got = [(m, at) for m, at in ours.got if m.properties.get(UID) != "warm"]
    assert Counter(m.properties[UID] for m, _ in our_got) == Counter(every), "our consumer: each timer once"

    lateness: dict[str, list[int]] = {"cpp": [], "ours": []}
    for r in cpp_got:
        uid, spec = r["props"][UID], by_uid[r["props"][UID]]
        assert (r["topic"], r["body"], r["tags"], r["keys"]) == (TOPIC, spec["body"], "T", uid)
        assert r["id"] == msg_ids[uid] and r["props"]["UNIQ_KEY"] == msg_ids[uid]  # the producer's msgId
        assert spec["props"].items() <= {k: v for k, v in r["props"].items() if v is not None}.items()  # type: ignore[union-attr]
        assert r["props"][P.TIMER_OUT_MS] is not None
        lateness["cpp"].append(r["received_ms"] - due_ms(spec, r["born_timestamp"]))
    for m, at in our_got:
        uid = m.properties[UID]
        spec = by_uid[uid]
        assert (m.topic, m.body.decode(), m.msg_id) == (TOPIC, spec["body"], msg_ids[uid])
        assert spec["props"].items() <= m.properties.items()  # type: ignore[union-attr]
        lateness["ours"].append(at - due_ms(spec, m.born_timestamp))
    print(f"\nC++ client timers: lateness ms (received - due) { ({k: sorted(v) for k, v in lateness.items()}) }")
    for who, values in lateness.items():
        assert min(values) >= 0, f"{who}: a timer arrived early: {sorted(values)}"
        assert max(values) <= PRECISION_MS + LATE_MS, f"{who}: a timer arrived late: {sorted(values)}"
