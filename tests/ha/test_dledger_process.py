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

from ledgermq.client import Message, Producer
from ledgermq.client.message import SendStatus
from tests.compat.cluster import tcp_open, wait_until
from tests.ha.dledger_group import TOPIC, DLedgerGroup


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
