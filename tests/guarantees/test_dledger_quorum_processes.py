"""Guarantee 3 with real processes: a DLedger send is answered SEND_OK only after a quorum
committed it.

A 3-broker DLedger group; both followers are SIGSTOPped (their connections stay open; they
persist and acknowledge nothing), then 64 sends are pipelined to the leader. None may be
answered SEND_OK while the leader is alone (it steps down once it hears from no quorum and
answers them SYSTEM_ERROR, "in-sync replicas not enough", which clients send again). After
SIGCONT of one follower (a quorum of two again) sends succeed once more; every process is
stopped cleanly and the resumed follower's own store must hold each SEND_OK's body at the
queue offset its answer named.
"""

from __future__ import annotations

import asyncio
import random
import signal
from pathlib import Path

from ledgermq.protocol.codes import ResponseCode
from tests.compat.cluster import wait_until
from tests.guarantees.sends import body_for, send_request
from tests.guarantees.wire import Pipe, stays, until
from tests.ha.dledger_group import TOPIC, DLedgerGroup

SENDS = 64


async def _probe(port: int, opaque: int) -> int:
    pipe = await Pipe.open(port)
    try:
        pipe.write([send_request(TOPIC, 0, body_for("probe", opaque), opaque)])
        await until(lambda: opaque in pipe.answers, 10, "the probe's answer")
        return pipe.answers[opaque].response.code
    finally:
        await pipe.close()


def _succeeded(pipe: Pipe) -> int:
    return sum(1 for a in pipe.answers.values() if a.response.code == ResponseCode.SUCCESS)


def _codes(pipe: Pipe) -> list[tuple[int, str | None]]:
    return sorted({(a.response.code, a.response.remark) for a in pipe.answers.values()})


async def _pipelined_without_quorum(group: DLedgerGroup, leader: str, followers: list[str]) -> Pipe:
    rng = random.Random(31)
    procs = [group.brokers[n].proc for n in followers]
    pipe = await Pipe.open(group.ports[leader])
    try:
        for p in procs:
            assert p is not None
            p.send_signal(signal.SIGSTOP)
        try:
            opaques = rng.sample(range(100, 2**31 - 1), SENDS)
            pipe.write(send_request(TOPIC, n, body_for("dl", n), opaques[n]) for n in range(SENDS))
            await stays(lambda: not _succeeded(pipe), 2.0, lambda: f"SEND_OK without a quorum: {_codes(pipe)}")
        finally:
            first = procs[0]
            assert first is not None
            first.send_signal(signal.SIGCONT)  # a quorum of two again; the other stays stopped
        await until(lambda: len(pipe.answers) == SENDS, 30, lambda: f"{len(pipe.answers)} answered after SIGCONT")
    finally:
        for p in procs:
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGCONT)
        await pipe.close()
    return pipe


def _leader_takes_a_send(group: DLedgerGroup) -> bool:
    leader = group.master()
    try:
        return leader is not None and asyncio.run(_probe(group.ports[leader], 2)) == ResponseCode.SUCCESS
    except Exception:
        return False


def _leader(group: DLedgerGroup) -> str:
    wait_until("the group's master in the name server", lambda: group.master() is not None, 30, 0.1, group.explain)
    leader = group.master()
    assert leader is not None
    return leader


async def _pipelined(group: DLedgerGroup, leader: str, count: int) -> Pipe:
    pipe = await Pipe.open(group.ports[leader])
    try:
        pipe.write(send_request(TOPIC, n, body_for("ok", n), 10_000 + n) for n in range(count))
        await until(lambda: len(pipe.answers) == count, 30, lambda: f"{len(pipe.answers)} answered")
    finally:
        await pipe.close()
    return pipe


def test_dledger_sends_are_answered_only_once_a_quorum_committed_them(tmp_path: Path) -> None:
    group = DLedgerGroup(tmp_path)
    try:
        group.start()
        leader = group.master()
        assert leader is not None
        followers = [n for n in group.ids if n != leader]
        port = group.ports[leader]
        wait_until("a SEND_OK from the leader", lambda: asyncio.run(_probe(port, 1)) == ResponseCode.SUCCESS, 30, 0.3)
        pipe = asyncio.run(_pipelined_without_quorum(group, leader, followers))
        wait_until("a SEND_OK with a quorum again", lambda: _leader_takes_a_send(group), 30, 0.3)
        after = asyncio.run(_pipelined(group, _leader(group), SENDS))
        assert _succeeded(after) == SENDS, _codes(after)
        pipe.answers.update(after.answers)
        pipe.sent.update(after.sent)
        group.wait_caught_up(followers[0], _leader(group))
        for b in group.brokers.values():  # clean stops, then the follower's store is read on its own
            assert b.stop() == 0, group.explain()
    finally:
        group.close()
    pipe.check_clean()
    served = group.store_queues(followers[0])  # the resumed follower's own copy
    assert _succeeded(pipe) >= SENDS
    for opaque, answer in pipe.answers.items():
        resp = answer.response
        if resp.code != ResponseCode.SUCCESS:
            continue  # refused or outcome unknown: the client sends again
        queue_id, queue_offset = int(resp.ext_fields["queueId"]), int(resp.ext_fields["queueOffset"])
        assert served[queue_id].get(queue_offset) == pipe.sent[opaque].body, f"opaque {opaque}: not as answered"
