"""Controller mode: a master cut off from the controller, the name server and its slave, still reachable by clients.

The partition isolates only the master (tests/ha/partition.py: its controller, name-server, broker and HA links
run through fault proxies that drop every byte; our senders reach it directly). The controller stops hearing its
heartbeats and elects the slave; the old master never hears of it until the partition heals.

* allAckInSyncStateSet=true: the isolated master acknowledges nothing the new master lacks. Its sends need the
  cut-off slave's ack, and dropping that slave from the SyncStateSet needs the controller's acceptance.
* allAckInSyncStateSet=false (ASYNC_MASTER): the lease. The isolated master acknowledges until its lease runs out
  (controllerHeartBeatTimeoutMills after its last answered heartbeat), then refuses ("writes are fenced"), before
  the controller can elect another master: no send made after the new master's first SEND_OK is acknowledged by
  the old one. What it acknowledged inside the window is lost at the failover (docs/controller.md); the test
  counts it and checks that it lies inside the window.

Either way the old master, once the partition heals, follows the new one as a slave, truncates what it alone
held, and ends byte-identical to it.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ledgermq.net.client import RemotingClient
from ledgermq.protocol.codes import ResponseCode
from tests.compat.cluster import wait_until
from tests.ha.controller_group import BROKER_KEYS, ControllerGroup
from tests.ha.partition import IsolatedLinks, ha_client_info, start_isolatable_pair
from tests.ha.process_group import BrokerProc, assert_identical, open_store, queue_bodies, send_raw

TOPIC = "CtlPartitionTopic"
QUEUES = 4
SENDERS = 3
LEASE_S = int(BROKER_KEYS["controllerHeartBeatTimeoutMills"]) / 1000  # type: ignore[call-overload]
SLACK_S = 0.5  # answers travelling back to us on a loaded machine


def body(seq: int) -> bytes:
    return f"part-{seq:06d}-".encode() + b"z" * 200


@dataclass(frozen=True, slots=True)
class Answer:
    seq: int
    broker: str
    sent: float
    got: float
    code: int
    remark: str
    where: tuple[int, int]  # (queueId, queueOffset) of a SEND_OK


class Senders:
    """Sync sends to one broker from a few tasks, every answer recorded (or the exception's text)."""

    def __init__(self, client: RemotingClient, seqs: Iterator[int]) -> None:
        self.client = client
        self.seqs = seqs
        self.answers: list[Answer] = []
        self.stop = asyncio.Event()

    def ok(self, broker: str) -> list[Answer]:
        return [a for a in self.answers if a.broker == broker and a.code == ResponseCode.SUCCESS]

    async def run(self, b: BrokerProc) -> None:
        while not self.stop.is_set():
            seq = next(self.seqs)
            sent = time.monotonic()
            try:
                resp = await send_raw(self.client, b, TOPIC, seq % QUEUES, body(seq))
            except Exception as exc:  # a timeout: recorded as a failure, never as SEND_OK
                self.answers.append(Answer(seq, b.name, sent, time.monotonic(), -1, repr(exc), (-1, -1)))
                continue
            where = (-1, -1)
            if resp.code == ResponseCode.SUCCESS:
                where = (int(resp.ext_fields["queueId"]), int(resp.ext_fields["queueOffset"]))
            self.answers.append(Answer(seq, b.name, sent, time.monotonic(), resp.code, resp.remark or "", where))
            if resp.code != ResponseCode.SUCCESS:
                await asyncio.sleep(0.01)  # refused at once: do not spin


async def until(what: str, check: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def run_partition(
    group: ControllerGroup, links: IsolatedLinks, a: BrokerProc, b: BrokerProc
) -> tuple[Senders, float, float]:
    """Senders on the master; the partition after 40 SEND_OKs; the slave elected; 20 SEND_OKs from it while the
    old master, still cut off, keeps being sent to for a while longer. (answers, cut time, arrival of the new
    master's first SEND_OK)."""

    async def scenario() -> tuple[Senders, float, float]:
        client = RemotingClient(connect_timeout=1.0)
        senders = Senders(client, itertools.count())
        try:
            on_a = [asyncio.create_task(senders.run(a)) for _ in range(SENDERS)]
            await until("40 SEND_OKs from the master", lambda: len(senders.ok("a")) >= 40, 20)
            cut = time.monotonic()
            await asyncio.to_thread(links.cut, "blackhole")
            await asyncio.to_thread(group.wait_role, b, "MASTER", 10)
            on_b = asyncio.create_task(senders.run(b))
            await until("20 SEND_OKs from the new master", lambda: len(senders.ok("b")) >= 20, 10)
            first_b = min(x.got for x in senders.ok("b"))
            # the old master goes on being sent to (and, cut off, refusing) for a while after the election
            await until(
                "sends to the old master after the election",
                lambda: sum(1 for x in senders.answers if x.broker == "a" and x.sent > first_b) >= 20,
                15,
            )
            senders.stop.set()
            await asyncio.gather(*on_a, on_b)
            return senders, cut, first_b
        finally:
            await client.close()

    return asyncio.run(scenario())


def heal_and_compare(
    group: ControllerGroup, links: IsolatedLinks, a: BrokerProc, b: BrokerProc, senders: Senders
) -> list[Answer]:
    """Heal; the old master follows the new one; both stopped and compared. The SEND_OKs missing on the new master."""
    links.heal()
    group.wait_role(a, "SLAVE", 15)
    wait_until("a to follow b", lambda: ha_client_info(group, a).connected, 15)
    group.wait_sync_state_set(b, 2, 15)
    group.wait_caught_up(b, [a], 20)
    assert group.stop(a) == 0 and group.stop(b) == 0, group.explain()
    assert_identical(b, a, all_segments=True)
    store = open_store(b)
    try:
        on_new = {(q, off): data for q in range(QUEUES) for off, data in queue_bodies(store, TOPIC, q).items()}
    finally:
        store.shutdown()
    acked = senders.ok("a") + senders.ok("b")
    missing_b = [x.seq for x in senders.ok("b") if on_new.get(x.where) != body(x.seq)]
    assert not missing_b, f"the new master lost its own SEND_OKs: {missing_b[:10]}"
    return [x for x in acked if on_new.get(x.where) != body(x.seq)]


def test_all_ack_an_isolated_master_acknowledges_nothing_the_new_master_lacks(tmp_path: Path) -> None:
    group, links, a, b = start_isolatable_pair(tmp_path, allAckInSyncStateSet="true")
    try:
        senders, cut, first_b = run_partition(group, links, a, b)
        after_cut = [x for x in senders.answers if x.broker == "a" and x.sent > cut]
        ok_after_cut = sum(1 for x in after_cut if x.code == ResponseCode.SUCCESS)
        print(
            f"\nall-ack: {len(senders.ok('a'))} SEND_OK from the old master ({ok_after_cut} of {len(after_cut)} "
            f"sends after the cut), the new master's first SEND_OK {(first_b - cut) * 1000:.0f} ms after the cut"
        )
        lost = heal_and_compare(group, links, a, b, senders)
        assert not lost, f"{len(lost)} acknowledged sends are missing on the new master: {[x.seq for x in lost][:10]}"
    finally:
        links.close()
        group.close()


def test_without_all_ack_the_lease_fences_the_isolated_master_before_another_is_elected(tmp_path: Path) -> None:
    group, links, a, b = start_isolatable_pair(tmp_path)  # ASYNC_MASTER: SEND_OK once the master holds it
    try:
        senders, cut, first_b = run_partition(group, links, a, b)
        from_a = [x for x in senders.answers if x.broker == "a"]
        late_ok = [x for x in from_a if x.code == ResponseCode.SUCCESS and x.sent > first_b]
        assert not late_ok, (
            f"the old master acknowledged {len(late_ok)} sends made after the new master's first SEND_OK"
        )
        fenced = [x for x in from_a if x.sent > cut and "writes are fenced" in x.remark]
        assert fenced, "the isolated master never refused a send for its lapsed lease"
        fenced_after = min(x.got for x in fenced) - cut
        assert fenced_after < LEASE_S + SLACK_S, f"fenced only {fenced_after:.3f} s after the cut"
        last_ok = max(x.got for x in from_a if x.code == ResponseCode.SUCCESS) - cut
        lost = heal_and_compare(group, links, a, b, senders)
        assert all(x.broker == "a" and x.got - cut < LEASE_S + SLACK_S for x in lost), (
            "a lost SEND_OK outside the lease window"
        )
        print(
            f"\nno all-ack: the old master's last SEND_OK {last_ok * 1000:.0f} ms after the cut, first 'fenced' "
            f"{fenced_after * 1000:.0f} ms, new master's first SEND_OK {(first_b - cut) * 1000:.0f} ms; "
            f"{len(lost)} acknowledged sends lost in the window (lease {LEASE_S * 1000:.0f} ms)"
        )
    finally:
        links.close()
        group.close()
