"""Shared by the DLedger "disks that lie" process tests (test_dledger_rot.py,
test_dledger_segment_loss.py): sends that record every SEND_OK, a member's files, its
dledgerStatus, and the whole round of damaging one stopped member and checking that the
group gives every acknowledged message back from every member afterwards."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path

from ledgermq.admin.client import AdminClient
from ledgermq.client import Message, Producer
from ledgermq.client.message import SendStatus
from tests.compat.cluster import tcp_open, wait_until
from tests.ha.dledger_group import TOPIC, DLedgerGroup

SEGMENT = 64 * 1024
MESSAGES = 3000
SENDERS = 16

Acked = dict[bytes, tuple[int, int]]


def send_acked(group: DLedgerGroup, acked: Acked, prefix: str, count: int) -> None:
    """``count`` sync sends from ``SENDERS`` concurrent senders; SEND_OKs land in ``acked``."""

    async def run() -> None:
        producer = Producer(f"rot-{prefix}", group.namesrv_addr, send_timeout=5.0)
        await producer.start()
        try:
            numbers = iter(range(count))

            async def sender() -> None:
                for i in numbers:
                    body = f"{prefix}-{i:05d}-".encode() + bytes([65 + i % 26]) * 180
                    for _attempt in range(5):
                        try:
                            r = await producer.send(Message(TOPIC, body, keys=[f"{prefix}{i}"]))
                        except Exception:
                            await asyncio.sleep(0.2)
                            continue
                        if r.status is SendStatus.SEND_OK:
                            acked[body] = (r.queue.queue_id, r.queue_offset)
                            break

            await asyncio.gather(*(sender() for _ in range(SENDERS)))
        finally:
            await producer.shutdown()

    asyncio.run(run())


def member_files(group: DLedgerGroup, n: str, kind: str = "data") -> list[Path]:
    """``n``'s DLedger ``data`` or ``index`` files, oldest first."""
    directory = group.root / n / "store" / f"dledger-{n}" / kind
    return sorted(p for p in directory.iterdir() if p.name.isdigit())


def dledger_status(group: DLedgerGroup, n: str) -> dict[str, object]:
    """``n``'s repairs, repairingUntil and role from dledgerStatus ({"error": ...} if it does not answer)."""

    async def ask() -> dict[str, object]:
        async with AdminClient(group.namesrv_addr, timeout=2.0, connect_timeout=1.0) as admin:
            st = await admin.dledger_status(group.addr(n))
            return {"repairs": st.repairs, "repairing_until": st.repairing_until, "role": st.role}

    try:
        return asyncio.run(ask())
    except Exception as exc:
        return {"error": repr(exc)}


def all_digested(group: DLedgerGroup, n: str) -> bool:
    """Has ``n``'s scrub digested every sealed data file? Start-up then trusts them without
    reading them, as on a broker that ran for a while: the damage tests aim at that."""
    digests = group.root / n / "store" / f"dledger-{n}" / "digests"
    return all((digests / f"{p.name}.crc").is_file() for p in member_files(group, n)[:-1])


def a_follower(group: DLedgerGroup, leader: str) -> str:
    return next(n for n in group.ids if n != leader)


def the_leader(group: DLedgerGroup, leader: str) -> str:
    return leader


def damage_one_member(
    tmp_path: Path,
    pick: Callable[[DLedgerGroup, str], str],
    target: Callable[[DLedgerGroup, str], Path],
    damage: Callable[[Path], None],
    *,
    log_says: Sequence[str] = ("is damaged at index", "repaired: the log holds every entry"),
    repairs: bool = True,
) -> None:
    """Fill the log, SIGKILL the member ``pick`` names once its sealed data files are
    digested, ``damage`` the file ``target``
    names, restart the member, and check that its log says ``log_says``, that a repair from
    the group began and ended (``repairs``) or none was needed, and that every member serves
    every SEND_OK afterwards."""
    group = DLedgerGroup(tmp_path, segment=SEGMENT)
    acked: Acked = {}
    try:
        group.start()
        leader = group.master()
        assert leader is not None
        send_acked(group, acked, "a", MESSAGES)
        assert len(acked) >= MESSAGES * 0.99, f"only {len(acked)} acknowledged{group.explain()}"
        victim = pick(group, leader)
        for n in group.ids:
            if n != leader:
                group.wait_caught_up(n, leader)
        wait_until(f"{victim}'s scrub to digest its sealed data files", lambda: all_digested(group, victim), 30, 0.2)
        group.brokers[victim].kill()
        assert len(member_files(group, victim)) >= 8, "the test needs a dozen data files"
        damage(target(group, victim))
        group.brokers[victim].start()
        wait_until(f"{victim}'s port", lambda: tcp_open(group.ports[victim]), 30, 0.1, group.explain)
        wait_until("a master", lambda: group.master() is not None, 20, 0.1, group.explain)
        send_acked(group, acked, "b", 200)  # the group goes on; the member catches up (and is repaired)
        leader = group.master()
        assert leader is not None
        for n in group.ids:
            if n != leader:
                group.wait_caught_up(n, leader)
        st: dict[str, object] = {}
        wait_until(
            f"{victim} {'repaired' if repairs else 'running'}",
            lambda: (
                (st.update(dledger_status(group, victim)) or bool(st.get("repairs", 0)) == repairs)
                and st.get("repairing_until") == 0
            ),
            30,
            0.2,
            lambda: f" status {st}{group.explain()}",
        )
        # the status can say "repaired" a moment before the member logs it (the repair
        # marker is cleared in a worker thread first): wait for the lines, do not race them
        log_path = group.root / f"{victim}.log"
        wait_until(
            f"{victim}'s log to say {log_says}",
            lambda: all(text in log_path.read_text(errors="replace") for text in log_says),
            30,
            0.2,
            lambda: f": {log_path.read_text(errors='replace')[-3000:]}",
        )
        for b in group.brokers.values():
            assert b.stop() == 0, group.explain()
    finally:
        group.close()
    for n in group.ids:
        served = group.store_queues(n)
        missing = [b[:12] for b, (q, off) in acked.items() if served[q].get(off) != b]
        assert not missing, f"{n}: {len(missing)} of {len(acked)} acknowledged messages missing, e.g. {missing[:5]}"
