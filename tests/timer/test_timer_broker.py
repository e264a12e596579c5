"""A broker with timers, in process over real sockets: sends, refusals, delivery, status."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from ledgermq.broker.processors.admin import runtime_info
from ledgermq.protocol import properties as P
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.store.message_input import MessageInput
from ledgermq.store.results import PutResult
from ledgermq.store.timer.checkpoint import CheckpointData
from ledgermq.store.timer.intercept import TIMER_TOPIC
from tests.broker.harness import Harness, running_broker

TIMER_STORE = {"timer_precision_ms": 100}  # 100 ms steps: short tests


async def wait_for_messages(h: Harness, topic: str, count: int, deadline_s: float) -> list[object]:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        got = await h.pull("g", topic)
        if len(got) >= count:
            return list(got)
        await asyncio.sleep(0.05)
    raise AssertionError(f"{topic}: fewer than {count} messages within {deadline_s}s")


def test_a_timer_arrives_on_its_topic_on_time_with_its_properties(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path, store=TIMER_STORE) as h:
            await h.send("Orders", b"warm-up")  # creates the topic
            sent_at = int(time.time() * 1000)
            resp = await h.send("Orders", b"later", props={P.TIMER_DELIVER_MS: str(sent_at + 1200), P.KEYS: "order-7"})
            assert resp.code == ResponseCode.SUCCESS and resp.ext_fields["queueId"] == "0"
            assert len(await h.pull("g", "Orders")) == 1  # not there yet
            got = await wait_for_messages(h, "Orders", 2, 10)
            received_at = int(time.time() * 1000)
            later = got[1]
            assert later.body == b"later"  # type: ignore[attr-defined]
            props = later.properties  # type: ignore[attr-defined]
            assert props[P.KEYS] == "order-7" and props[P.UNIQ_KEY] == "0" * 32
            assert P.REAL_TOPIC not in props and P.REAL_QID not in props
            assert int(props[P.TIMER_OUT_MS]) == sent_at + 1200 - (sent_at + 1200) % 100 - (
                100 if sent_at % 100 == 0 else 0
            )
            assert TIMER_TOPIC not in [later.topic]  # type: ignore[attr-defined]
            assert sent_at + 1200 <= received_at  # never early
            assert int(props[P.TIMER_DEQUEUE_MS]) >= sent_at + 1200
            # the delivered message is readable a moment before the service counts it delivered
            deadline = time.monotonic() + 10
            while True:
                info = runtime_info(h.app.broker)
                if info["timerCongestNum"] == "0" and int(info["timerDelivered"]) == 1:
                    break
                assert time.monotonic() < deadline, {k: v for k, v in info.items() if k.startswith("timer")}
                await asyncio.sleep(0.02)

    asyncio.run(main())


def test_malformed_and_too_distant_timers_are_refused_with_rocketmq_codes(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path, store={**TIMER_STORE, "timer_max_delay_sec": 60}) as h:
            await h.send("Orders", b"warm-up")
            for props in ({P.TIMER_DELAY_SEC: "soon"}, {P.TIMER_DELAY_SEC: "61"}, {P.START_DELIVER_TIME: "1e12"}):
                header = {"a": "pg", "b": "Orders", "c": "TBW102", "d": 4, "e": 0, "f": 0, "g": 0, "h": 0,
                          "i": P.encode_properties(props), "j": 0, "k": False, "m": False}  # fmt: skip
                resp = await h.call(RequestCode.SEND_MESSAGE_V2, header, b"x")
                assert resp.code == ResponseCode.MESSAGE_ILLEGAL, (props, resp.remark)
            past = await h.send("Orders", b"due", props={P.TIMER_DELIVER_MS: "1000"})  # in the past: stored now
            assert past.code == ResponseCode.SUCCESS
            assert [m.body for m in await h.pull("g", "Orders")] == [b"warm-up", b"due"]

    asyncio.run(main())


def test_timers_refused_while_the_wheel_is_off(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path, store={"timer_wheel_enable": False}) as h:
            await h.send("Orders", b"warm-up")
            header = {"a": "pg", "b": "Orders", "c": "TBW102", "d": 4, "e": 0, "f": 0, "g": 0, "h": 0,
                      "i": P.encode_properties({P.TIMER_DELAY_SEC: "3"}), "j": 0, "k": False, "m": False}  # fmt: skip
            resp = await h.call(RequestCode.SEND_MESSAGE_V2, header, b"x")
            assert resp.code == ResponseCode.SYSTEM_ERROR and "timerWheelEnable" in (resp.remark or "")

    asyncio.run(main())


def test_the_timer_checkpoint_answers_the_master_progress(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path, store=TIMER_STORE) as h:
            await h.send("Orders", b"warm-up")
            for _ in range(3):
                await h.send("Orders", b"t", props={P.TIMER_DELAY_SEC: "30"})
            await h.dispatched()
            deadline = time.monotonic() + 5
            while h.app.broker.timer is not None and h.app.broker.timer.timers.queue_offset < 3:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            resp = await h.call(RequestCode.GET_TIMER_CHECK_POINT)
            assert resp.code == ResponseCode.SUCCESS and len(resp.body) == 56
            cp = CheckpointData.decode(resp.body)
            assert cp.master_queue_offset == 3 and abs(cp.read_ms - time.time() * 1000) < 5000
            assert runtime_info(h.app.broker)["timerCongestNum"] == "3"

    asyncio.run(main())


def test_what_delivery_writes_is_dispatched_by_its_own_step_at_once(tmp_path: Path) -> None:
    """Delivery's end-of-turn hook runs the broker's step before returning, so pacing counts
    the dispatch as delivery's work (left to a later pass of the loop, it looked like other
    work waiting, and an idle broker rested after every chunk)."""

    async def main() -> None:
        async with running_broker(tmp_path, store=TIMER_STORE) as h:
            await h.send("Orders", b"warm-up")
            await h.dispatched()
            b = h.app.broker
            assert b.timer is not None and b.timer.on_written is not None
            queue = b.store.queues.get("Orders", 0)
            assert queue is not None and queue.max_offset == 1
            written = b.write(MessageInput(topic="Orders", body=b"due", wait_store_ok=False), False)
            assert isinstance(written, PutResult) and written.ok
            b.timer.on_written()
            assert queue.max_offset == 2  # no await in between: dispatched by the step it ran

    asyncio.run(main())
