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
import signal
import threading
import time
from collections import Counter
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
        group.wait_caught_up(first, second)
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


def test_a_stopped_leader_costs_sync_sends_under_two_seconds(tmp_path: Path) -> None:
    """SIGSTOP the leader under steady sync sends: a stopped process neither answers nor
    resets, so without the producer's master watch the send in flight waits its whole 3 s
    timeout. With it the send is abandoned once the route names the new master and made
    again there: the next SEND_OK must come within 2 s of the SIGSTOP (or, when the election
    itself took longer, e.g. a split vote, within 0.5 s of the new master's registration,
    which a thread watches on the name server), no send may fail,
    and after SIGCONT and catch-up every SEND_OK is on every member (duplicates, which an
    abandoned attempt that was stored after all would make, are counted and reported).
    The woken old leader must not register itself as master again: the name server keeps
    listing the new leader throughout."""
    group = DLedgerGroup(tmp_path)
    acked: dict[bytes, tuple[int, int]] = {}
    failures: list[str] = []
    report: dict[str, object] = {}
    stopped_proc = None
    try:
        group.start()
        first = group.master()
        assert first is not None
        stopped_proc = group.brokers[first].proc
        assert stopped_proc is not None
        registered: list[float] = []  # when the name server first listed another master

        def watch_registration() -> None:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                now = group.master()
                if now is not None and now != first:
                    registered.append(time.monotonic())
                    return
                time.sleep(0.02)

        async def run() -> None:
            producer = Producer("dl-stop-pg", group.namesrv_addr, send_timeout=3.0)
            await producer.start()
            i = 0

            async def send() -> float | None:
                """One sync send; the monotonic time its SEND_OK came, None if it failed."""
                nonlocal i
                body = f"st-{i:05d}".encode()
                i += 1
                try:
                    r = await producer.send(Message(TOPIC, body, keys=[body.decode()]))
                except Exception as exc:
                    failures.append(f"{body.decode()}: {type(exc).__name__}: {exc}")
                    return None
                if r.status is not SendStatus.SEND_OK:
                    failures.append(f"{body.decode()}: {r.status.name}")
                    return None
                acked[body] = (r.queue.queue_id, r.queue_offset)
                return time.monotonic()

            try:
                deadline = time.monotonic() + 20
                while len(acked) < 50 and time.monotonic() < deadline:
                    await send()
                assert len(acked) >= 50 and not failures, f"{len(acked)} acked, {failures[:3]}{group.explain()}"
                # the next send goes to the stopped leader (the route still names it) and hangs
                stopped_proc.send_signal(signal.SIGSTOP)
                stopped = time.monotonic()
                watcher = threading.Thread(target=watch_registration, daemon=True)
                watcher.start()
                resumed: float | None = None  # the first SEND_OK of a send begun after the SIGSTOP
                while resumed is None and time.monotonic() - stopped < 10:
                    resumed = await send()
                assert resumed is not None, f"no SEND_OK within 10 s of the SIGSTOP: {failures[:3]}{group.explain()}"
                await asyncio.to_thread(watcher.join, 10)
                report["SIGSTOP -> next SEND_OK s"] = round(resumed - stopped, 3)
                assert registered, "the name server never listed a new master"
                report["SIGSTOP -> new master registered s"] = round(registered[0] - stopped, 3)
                report["registered -> next SEND_OK s"] = round(resumed - registered[0], 3)
                for _ in range(30):  # the new master keeps taking sends
                    await send()
                seen: list[str | None] = []
                await asyncio.to_thread(
                    wait_until,
                    "the new master in the route",
                    lambda: seen.append(group.master()) or seen[-1] not in (None, first),
                    10,
                    0.05,
                )
                new_master = seen[-1]
                stopped_proc.send_signal(signal.SIGCONT)  # the old leader wakes up a follower
                # It must not claim the group in the name server on waking (its core still
                # says LEADER until its ticks catch up): the master stays the new leader.
                after_cont: list[str | None] = []

                def watch_after_cont() -> None:
                    end = time.monotonic() + 3.0
                    while time.monotonic() < end:
                        after_cont.append(group.master())
                        time.sleep(0.02)

                cont_watch = threading.Thread(target=watch_after_cont, daemon=True)
                cont_watch.start()
                for _ in range(30):
                    await send()
                await asyncio.to_thread(cont_watch.join, 10)
                wrong = Counter(m for m in after_cont if m != new_master)
                assert after_cont and not wrong, (
                    f"after SIGCONT the name server listed {dict(wrong)} as master "
                    f"({sum(wrong.values())} of {len(after_cont)} looks), not {new_master}{group.explain()}"
                )
                report["attempts"] = i
            finally:
                await producer.shutdown()

        asyncio.run(run())
        second = group.master()
        report["leaders"] = (first, second)
        assert second is not None and second != first
        group.wait_caught_up(first, second)
        for b in group.brokers.values():
            assert b.stop() == 0, group.explain()
    finally:
        if stopped_proc is not None and stopped_proc.poll() is None:
            stopped_proc.send_signal(signal.SIGCONT)
        group.close()
    report["acked"] = len(acked)
    report["failed"] = len(failures)
    duplicates: dict[str, int] = {}
    for n in group.ids:
        served = group.store_queues(n)
        missing = [b for b, (q, off) in acked.items() if served[q].get(off) != b]
        assert not missing, f"{n}: {len(missing)} of {len(acked)} acknowledged messages missing, e.g. {missing[:5]}"
        copies = Counter(body for queue in served.values() for body in queue.values())
        duplicates[n] = sum(1 for c in copies.values() if c > 1)
    report["duplicates per member"] = duplicates
    print(f"\nDLedger SIGSTOP of the leader: {report}")
    assert not failures, failures[:5]
    # The 2 s goal is the group's election (0.8-1.6 s) plus the client's follow-up; a split
    # vote needs another election round, which no client can shorten: then the producer
    # must have followed the registration within 0.5 s (route lookups every 0.2 s).
    slow_election = report["SIGSTOP -> new master registered s"] > 1.5  # type: ignore[operator]
    assert report["SIGSTOP -> next SEND_OK s"] < 2.0 or (  # type: ignore[operator]
        slow_election and report["registered -> next SEND_OK s"] < 0.5  # type: ignore[operator]
    ), report
    # one sender, so one attempt at most was abandoned: at most one message stored twice
    assert all(d <= 1 for d in duplicates.values()), duplicates
