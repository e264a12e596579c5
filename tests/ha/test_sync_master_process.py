"""SYNC_MASTER between real broker processes: sends wait for the slave's acknowledgement or say why not.

A master with brokerRole=SYNC_MASTER and syncFlushTimeout=1000 and one slave, found through a name server; sends
are raw SEND_MESSAGE_V2 requests so the response code is seen as the broker gives it. With no slave a send answers
SLAVE_NOT_AVAILABLE (11) at once; with the slave up, SEND_OK (0); with the slave paused (SIGSTOP, its connection
still open) FLUSH_SLAVE_TIMEOUT (12) after about syncFlushTimeout; after SIGCONT, SEND_OK again. Then the master is
SIGKILLed under steady concurrent sends, and every send it answered SEND_OK is found on the slave's store, message
by message at the queue and offset the answer named.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from ledgermq.net.client import RemotingClient
from ledgermq.protocol.codes import ResponseCode
from tests.compat.cluster import wait_until
from tests.ha.process_group import BrokerProc, HAGroup, open_store, queue_bodies, send_raw

TOPIC = "SyncProcTopic"
QUEUES = 4
SYNC_FLUSH_TIMEOUT = 1.0
STEADY = 300
SENDERS = 4
KILL_AFTER = 150  # acknowledged sends before the master is killed


def steady_body(seq: int) -> bytes:
    return f"steady-{seq:06d}-".encode() + b"x" * 200


def send_once(b: BrokerProc, body: bytes, queue_id: int = 0) -> tuple[int, float]:
    """One send on a fresh connection: (response code, seconds)."""

    async def run() -> tuple[int, float]:
        client = RemotingClient(connect_timeout=2.0)
        try:
            started = time.monotonic()
            resp = await send_raw(client, b, TOPIC, queue_id, body)
            return resp.code, time.monotonic() - started
        finally:
            await client.close()

    return asyncio.run(run())


def steady_sends(master: BrokerProc) -> tuple[dict[int, tuple[int, int]], dict[str, int], float]:
    """STEADY sends from SENDERS concurrent tasks; the master is SIGKILLed once KILL_AFTER were acknowledged.

    Returns seq -> (queueId, queueOffset) of every send answered SEND_OK, the count of each other outcome, and
    the seconds from the first send to the kill.
    """
    acked: dict[int, tuple[int, int]] = {}
    outcomes: dict[str, int] = {}
    next_seq = iter(range(STEADY))
    killed_at: list[float] = []

    async def sender(client: RemotingClient) -> None:
        for seq in next_seq:
            try:
                resp = await send_raw(client, master, TOPIC, seq % QUEUES, steady_body(seq))
            except Exception as exc:  # the master died: connection closed / refused
                outcomes[type(exc).__name__] = outcomes.get(type(exc).__name__, 0) + 1
                continue
            if resp.code == ResponseCode.SUCCESS:
                acked[seq] = (int(resp.ext_fields["queueId"]), int(resp.ext_fields["queueOffset"]))
            else:
                outcomes[f"code {resp.code}"] = outcomes.get(f"code {resp.code}", 0) + 1
            if len(acked) >= KILL_AFTER and not killed_at:
                assert master.server.proc is not None
                master.server.proc.kill()  # SIGKILL with the other senders' requests in flight
                killed_at.append(time.monotonic())

    async def run() -> float:
        client = RemotingClient(connect_timeout=1.0)
        started = time.monotonic()
        try:
            await asyncio.gather(*(sender(client) for _ in range(SENDERS)))
        finally:
            await client.close()
        assert killed_at, f"the master was never killed: {len(acked)} acknowledged, {outcomes}"
        return killed_at[0] - started

    took = asyncio.run(run())
    return acked, outcomes, took


def test_sync_master_answers_and_acknowledged_sends_survive_on_the_slave(tmp_path: Path) -> None:
    group = HAGroup(tmp_path)
    master = group.add("m", 0, "SYNC_MASTER", syncFlushTimeout=int(SYNC_FLUSH_TIMEOUT * 1000))
    slave = group.add("s", 1, "SLAVE")
    report: dict[str, object] = {}
    try:
        group.start_namesrv()
        group.start(master)

        # no slave: stored, but SLAVE_NOT_AVAILABLE, which the master only answers without
        # waiting (a wait for a slave ends in SEND_OK or FLUSH_SLAVE_TIMEOUT)
        code, took = send_once(master, b"lonely")
        assert code == ResponseCode.SLAVE_NOT_AVAILABLE, code
        report["no slave"] = (code, round(took, 3))

        group.start(slave)
        started = time.monotonic()
        wait_until(
            "a SEND_OK with the slave up",
            lambda: send_once(master, b"probe")[0] == ResponseCode.SUCCESS,
            20,
            0.2,
            group.explain,
        )
        report["first SEND_OK after slave start"] = round(time.monotonic() - started, 2)
        for i in range(5):
            code, _ = send_once(master, f"ok-{i}".encode(), i % QUEUES)
            assert code == ResponseCode.SUCCESS, code

        group.pause(slave)  # SIGSTOP: the connection stays open, nothing is acknowledged
        paused: list[tuple[int, float]] = []
        try:
            for i in range(3):
                paused.append(send_once(master, f"paused-{i}".encode(), i % QUEUES))
        finally:
            group.resume(slave)
        report["while paused"] = [(c, round(t, 3)) for c, t in paused]
        assert all(c in (ResponseCode.FLUSH_SLAVE_TIMEOUT, ResponseCode.SLAVE_NOT_AVAILABLE) for c, _ in paused), paused
        timeouts = [t for c, t in paused if c == ResponseCode.FLUSH_SLAVE_TIMEOUT]
        assert timeouts, f"no FLUSH_SLAVE_TIMEOUT while the slave was paused: {paused}{group.explain()}"
        # answered by the master's own syncFlushTimeout, not before it (and not by the
        # client's call timeout, which would have raised); how late is the machine's
        for t in timeouts:
            assert t >= 0.8 * SYNC_FLUSH_TIMEOUT, paused

        started = time.monotonic()  # SIGCONT: the slave acknowledges again
        wait_until(
            "a SEND_OK after SIGCONT",
            lambda: send_once(master, b"resumed")[0] == ResponseCode.SUCCESS,
            10,
            0.1,
            group.explain,
        )
        report["first SEND_OK after SIGCONT"] = round(time.monotonic() - started, 2)
        for i in range(5):
            # SEND_OK: the slave acknowledged within syncFlushTimeout by the master's clock
            code, _ = send_once(master, f"ok-again-{i}".encode(), i % QUEUES)
            assert code == ResponseCode.SUCCESS, code

        acked, outcomes, until_kill = steady_sends(master)
        report["steady"] = {"acked": len(acked), "other": outcomes, "seconds to kill": round(until_kill, 2)}
        assert len(acked) >= KILL_AFTER
        assert group.stop(slave) == 0, f"the slave did not shut down cleanly{group.explain()}"
    finally:
        group.close()
    print(f"\nSYNC_MASTER process test: {report}")

    store = open_store(slave)
    try:
        served = {q: queue_bodies(store, TOPIC, q) for q in range(QUEUES)}
    finally:
        store.shutdown()
    missing = [seq for seq, (q, off) in sorted(acked.items()) if served[q].get(off) != steady_body(seq)]
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged sends are not on the slave: {missing[:20]}"
