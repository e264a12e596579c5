"""Disks that lie, in a real 3-broker DLedger group: one member's sealed data segment has
flipped bytes, or is gone, while that broker is stopped, or bytes change under a running
member (found by the scrub). The member must never serve the
damaged entries, must not act as if it still held them, and must be repaired from the
leader: afterwards every acknowledged message is on every member, byte for byte.

Small data files (64 KiB) so a few thousand messages fill a dozen segments and the damage
sits in a sealed file in the middle of the log, far from the tail recovery cuts.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

from ledgermq.admin.client import AdminClient
from ledgermq.failpoints import STALL_IF
from ledgermq.net.client import RemotingClient
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.message import decode_records
from tests.compat.cluster import wait_until
from tests.ha.dledger_damage import (
    SEGMENT,
    Acked,
    a_follower,
    damage_one_member,
    dledger_status,
    member_files,
    send_acked,
    the_leader,
)
from tests.ha.dledger_group import QUEUES, TOPIC, DLedgerGroup


def _flip_middle(path: Path) -> None:
    """XOR 64 bytes in the middle of a data file: inside some entry, header or body."""
    with path.open("r+b") as f:
        f.seek(SEGMENT // 2)
        raw = f.read(64)
        f.seek(SEGMENT // 2)
        f.write(bytes(b ^ 0x5A for b in raw))
        f.flush()
        os.fsync(f.fileno())


def _damaged_ranges(group: DLedgerGroup, n: str) -> int | None:
    """``n``'s storeDamagedRanges (admin brokerStatus), None when it does not answer."""

    async def ask() -> int:
        async with AdminClient(group.namesrv_addr, timeout=2.0, connect_timeout=1.0) as admin:
            return int((await admin.broker_runtime_info(group.addr(n)))["storeDamagedRanges"])

    try:
        return asyncio.run(ask())
    except Exception:
        return None


class DamageWatch:
    """Samples a member's storeDamagedRanges, then its repairingUntil, in a thread: a member
    that is still repairing must never read as undamaged. (Asked in that order, a count of
    0 means the repair had ended when the status was asked, so it must say 0 too.)"""

    def __init__(self, group: DLedgerGroup, n: str) -> None:
        self.group, self.n = group, n
        self.samples: list[tuple[int | None, object]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> DamageWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            ranges = _damaged_ranges(self.group, self.n)
            self.samples.append((ranges, dledger_status(self.group, self.n).get("repairing_until")))

    def contradictions(self) -> list[tuple[int | None, object]]:
        return [(r, until) for r, until in self.samples if r == 0 and isinstance(until, int) and until > 0]


def _middle_data_file(group: DLedgerGroup, n: str) -> Path:
    files = member_files(group, n)
    return files[len(files) // 2]


def test_flipped_bytes_in_a_sealed_segment_of_a_follower_are_repaired_from_the_leader(tmp_path: Path) -> None:
    damage_one_member(tmp_path, a_follower, _middle_data_file, _flip_middle)


def test_flipped_bytes_in_a_sealed_segment_of_the_leader_are_repaired_once_it_follows(tmp_path: Path) -> None:
    damage_one_member(tmp_path, the_leader, _middle_data_file, _flip_middle)


def test_a_deleted_sealed_segment_of_a_member_is_refetched_from_the_leader(tmp_path: Path) -> None:
    damage_one_member(tmp_path, a_follower, _middle_data_file, Path.unlink)


def _pwrite_middle(path: Path) -> None:
    """XOR 64 bytes in the middle of a data file a running broker has mapped."""
    fd = os.open(path, os.O_RDWR)
    try:
        raw = os.pread(fd, 64, SEGMENT // 2)
        os.pwrite(fd, bytes(b ^ 0x5A for b in raw), SEGMENT // 2)
        os.fsync(fd)
    finally:
        os.close(fd)


def _digested_middle_file(group: DLedgerGroup, n: str) -> Path:
    """A sealed data file in the middle of ``n``'s log once its scrub has digested it."""
    found: list[Path] = []

    def digested() -> bool:
        files = member_files(group, n)
        target = files[len(files) // 2]
        crc = group.root / n / "store" / f"dledger-{n}" / "digests" / f"{target.name}.crc"
        found[:] = [target]
        return len(files) >= 6 and crc.exists()

    wait_until(f"{n}'s scrub to digest its middle file", digested, 20, 0.1, group.explain)
    return found[0]


def _wait_repaired(group: DLedgerGroup, n: str, repairs: int) -> None:
    st: dict[str, object] = {}
    wait_until(
        f"{n} to find the damage and repair it",
        lambda: (
            (st.update(dledger_status(group, n)) or int(st.get("repairs", 0)) >= repairs)  # type: ignore[call-overload]
            and st.get("repairing_until") == 0
        ),
        30,
        0.2,
        lambda: f" status {st}{group.explain()}",
    )


def test_bytes_changing_under_a_running_follower_then_the_running_leader_are_found_and_repaired(
    tmp_path: Path,
) -> None:
    """pwrite into a sealed, digested data file of a running follower, then of the running
    leader: each member's scrub finds it, the leader steps down, both repair from the group,
    and every acknowledged message is on every member afterwards."""
    group = DLedgerGroup(tmp_path, segment=SEGMENT, extra={"storeScrubIntervalSeconds": 1})
    acked: Acked = {}
    try:
        group.start()
        send_acked(group, acked, "a", 2000)
        leader = group.master()
        assert leader is not None and len(acked) >= 1980, f"{len(acked)} acknowledged{group.explain()}"
        follower = a_follower(group, leader)
        group.wait_caught_up(follower, leader)
        _pwrite_middle(_digested_middle_file(group, follower))
        send_acked(group, acked, "b", 300)  # the group goes on while the follower finds it and repairs
        _wait_repaired(group, follower, 1)

        victim = group.master()
        assert victim is not None
        _pwrite_middle(_digested_middle_file(group, victim))
        wait_until(
            f"a new master after {victim}'s damage",
            lambda: group.master() not in (None, victim),
            20,
            0.1,
            group.explain,
        )
        send_acked(group, acked, "c", 300)
        _wait_repaired(group, victim, 1)
        new_leader = group.master()
        assert new_leader is not None and new_leader != victim
        for n in group.ids:
            if n != new_leader:
                group.wait_caught_up(n, new_leader)
        for n in (follower, victim):
            text = (group.root / f"{n}.log").read_text(errors="replace")
            assert "digest block" in text and "is damaged at index" in text, text[-3000:]
            assert "repaired: the log holds every entry" in text, text[-3000:]
        for b in group.brokers.values():
            assert b.stop() == 0, group.explain()
    finally:
        group.close()
    assert len(acked) >= 2500
    for n in group.ids:
        served = group.store_queues(n)
        missing = [b[:12] for b, (q, off) in acked.items() if served[q].get(off) != b]
        assert not missing, f"{n}: {len(missing)} of {len(acked)} acknowledged messages missing, e.g. {missing[:5]}"


_PULL_FIELDS = {"consumerGroup": "rot-reader", "topic": TOPIC, "maxMsgNums": 32, "sysFlag": 4, "commitOffset": 0,
                "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0}  # fmt: skip


async def _pull(client: RemotingClient, addr: str, queue_id: int, offset: int) -> RemotingCommand:
    cmd = RemotingCommand.request(
        RequestCode.PULL_MESSAGE, {**_PULL_FIELDS, "queueId": queue_id, "queueOffset": offset}
    )
    return await client.invoke(addr, cmd, 5.0)


def _pull_once(group: DLedgerGroup, n: str, queue_id: int, offset: int) -> RemotingCommand | None:
    async def run() -> RemotingCommand:
        client = RemotingClient(connect_timeout=2.0)
        try:
            return await _pull(client, group.addr(n), queue_id, offset)
        finally:
            await client.close()

    try:
        return asyncio.run(run())
    except Exception:
        return None


def _consume(
    group: DLedgerGroup, n: str, ends: dict[int, int], deadline_s: float
) -> tuple[dict[int, dict[int, bytes]], int]:
    """Read every queue of ``n`` up to ``ends`` as a RocketMQ consumer does: on SUCCESS,
    PULL_RETRY_IMMEDIATELY, PULL_NOT_FOUND and PULL_OFFSET_MOVED it goes on from the
    answer's nextBeginOffset (what the answer tells it to skip is skipped), on any other
    answer it backs off and pulls the same offset again. Returns what it read and how many
    SYSTEM_BUSY answers it met."""

    async def run() -> tuple[dict[int, dict[int, bytes]], int]:
        client = RemotingClient(connect_timeout=2.0)
        got: dict[int, dict[int, bytes]] = {q: {} for q in ends}
        busy = 0
        deadline = time.monotonic() + deadline_s
        try:
            for q, end in ends.items():
                offset = 0
                while offset < end and time.monotonic() < deadline:
                    resp = await _pull(client, group.addr(n), q, offset)
                    if resp.code == ResponseCode.SUCCESS:
                        for rec in decode_records(resp.body, check_crc=False):
                            got[q][rec.queue_offset] = rec.body
                    elif resp.code not in _MOVES_ON:
                        busy += resp.code == ResponseCode.SYSTEM_BUSY
                        await asyncio.sleep(0.05)
                        continue
                    nxt = int(resp.ext_fields.get("nextBeginOffset", offset))
                    if nxt == offset:
                        await asyncio.sleep(0.05)  # nothing new there yet: a consumer's long poll
                    offset = nxt
        finally:
            await client.close()
        return got, busy

    return asyncio.run(run())


_MOVES_ON = (ResponseCode.SUCCESS, ResponseCode.PULL_RETRY_IMMEDIATELY, ResponseCode.PULL_NOT_FOUND,
             ResponseCode.PULL_OFFSET_MOVED)  # fmt: skip


def test_a_follower_re_recovering_its_log_refuses_pulls_for_now_and_a_consumer_skips_nothing(tmp_path: Path) -> None:
    """Bytes change under a running follower; its scrub finds them, its driver fail-stops and
    it re-recovers its DLedger files, which the failpoint holds open (the store's files are
    closed meanwhile, as for the second or so this takes on a big log). Every pull is then
    refused with SYSTEM_BUSY at its own offset, where it used to answer "retry immediately"
    with the next offset past a whole batch of units (a consumer skipped them; the chaos
    read stopped there). A consumer reading through the window gets every acknowledged
    message of the follower, which is repaired. From the scrub's find until the repair ends
    the follower's brokerStatus counts a damaged range (storeDamagedRanges), then none."""
    flag = tmp_path / "hold-the-reopen.flag"
    group = DLedgerGroup(
        tmp_path,
        segment=SEGMENT,
        extra={"storeScrubIntervalSeconds": 1},
        failpoints=f"dledger.reopen_after_close={STALL_IF}{flag}",
    )
    acked: Acked = {}
    try:
        group.start()
        send_acked(group, acked, "a", 2000)
        leader = group.master()
        assert leader is not None and len(acked) >= 1980, f"{len(acked)} acknowledged{group.explain()}"
        follower = a_follower(group, leader)
        group.wait_caught_up(follower, leader)
        target = _digested_middle_file(group, follower)
        assert _damaged_ranges(group, follower) == 0
        flag.touch()
        _pwrite_middle(target)
        seen: list[RemotingCommand | None] = []
        wait_until(
            f"{follower} to refuse pulls while it re-recovers its log",
            lambda: (
                (seen.append(_pull_once(group, follower, 0, 0)) or seen[-1]) is not None
                and seen[-1].code == ResponseCode.SYSTEM_BUSY
            ),
            30,
            0.05,
            lambda: f" last answer {seen[-1] if seen else None}{group.explain()}",
        )
        ends = {q: 1 + max(off for qq, off in acked.values() if qq == q) for q in range(QUEUES)}
        for q in range(QUEUES):
            for offset in (0, ends[q] // 2):
                resp = _pull_once(group, follower, q, offset)
                assert resp is not None and resp.code == ResponseCode.SYSTEM_BUSY, (q, offset, resp)
                assert resp.ext_fields.get("nextBeginOffset") == str(offset) and "re-recovering" in (resp.remark or "")
        # The member counts as damaged in brokerStatus, as a native store's damaged range
        # does, from its scrub's find through the re-recovery until the repair ends (the
        # chaos run waits on it before its next fault).
        held = _damaged_ranges(group, follower)
        assert held is not None and held >= 1, f"{follower} reports {held} damaged ranges while it re-recovers"
        with DamageWatch(group, follower) as watch:
            threading.Timer(1.0, flag.unlink).start()  # the re-recovery goes on while the consumer reads
            served, busy = _consume(group, follower, ends, 40)
            assert busy >= 1, "the consumer never met the re-recovery"
            _wait_repaired(group, follower, 1)
        assert not watch.contradictions(), f"undamaged while repairing: {watch.contradictions()[:5]}"
        assert any(r for r, _ in watch.samples), "no sample saw the damage"
        wait_until(
            f"{follower} to report nothing damaged once repaired",
            lambda: _damaged_ranges(group, follower) == 0,
            10,
            0.1,
            group.explain,
        )
        missing = [b[:12] for b, (q, off) in acked.items() if served[q].get(off) != b]
        assert not missing, f"{len(missing)} of {len(acked)} acknowledged messages skipped, e.g. {missing[:5]}"
        for b in group.brokers.values():
            assert b.stop() == 0, group.explain()
    finally:
        flag.unlink(missing_ok=True)
        group.close()
