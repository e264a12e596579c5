"""Controller mode under SYNC_FLUSH: a slave acknowledges only what an fsync covers.

Why: any member of the SyncStateSet may be elected. After a power loss of the whole group
the member elected must hold every acknowledged message on disk; a slave that acknowledged
bytes still in its page cache was elected with a shorter log after such a power loss, and
its old master, returning as its slave, cut the acknowledged messages it alone held (the
chaos harness's controller-mode power-loss run, 79 of 46,023 lost). Real processes: the
slave's fsyncs are held by a failpoint while a send waits for it.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from ledgermq.net.client import RemotingClient
from ledgermq.protocol.codes import ResponseCode
from tests.ha.controller_group import ControllerGroup
from tests.ha.process_group import send_raw

TOPIC = "CtlDurableAckTopic"
HELD_S = 1.5
ATTEMPTS = 4


def test_a_send_waits_for_the_slaves_fsync_not_only_its_write(tmp_path: Path) -> None:
    flag = tmp_path / "slave-disk-stalls"
    group = ControllerGroup(
        tmp_path,
        allAckInSyncStateSet="true",
        flushDiskType="SYNC_FLUSH",
        haMaxTimeSlaveNotCatchup=20000,  # the stalled slave stays in the set: the send must wait for it
        # and its link stays up: a slave waiting for its fsync reports nothing meanwhile, and the
        # group's 1.5 s housekeeping would drop it from the set (then the master rightly answers
        # alone: it fsynced, and only set members are elected), a SEND_OK this test cannot tell
        # from one given too early
        haHousekeepingInterval=20000,
        syncFlushTimeout=8000,
    )
    a = group.add_broker("a")
    b = group.add_broker("b")
    b.arm_failpoints(f"mapped_file.before_fsync=stall-if:{flag}")
    try:
        group.start_pair(a, b)

        async def attempt(client: RemotingClient, n: int) -> tuple[str, float, int, str]:
            """One send while the slave's fsyncs stall: ("waited", seconds to the answer,
            code, remark) or, answered while held, ("early", ...)."""
            flag.touch()  # the slave's next fsync stalls
            started = time.monotonic()
            waiting = asyncio.create_task(send_raw(client, a, TOPIC, 0, b"while the slave cannot fsync %d" % n))
            try:
                await asyncio.sleep(HELD_S)
                early = waiting.done()
            finally:
                flag.unlink()
            resp = await asyncio.wait_for(waiting, 10)
            return ("early" if early else "waited"), time.monotonic() - started, resp.code, resp.remark or ""

        async def run() -> list[tuple[str, float, int, str]]:
            client = RemotingClient(connect_timeout=1.0)
            try:
                first = await send_raw(client, a, TOPIC, 0, b"before")
                assert first.code == ResponseCode.SUCCESS, first.remark
                tries = []
                for n in range(ATTEMPTS):
                    tries.append(await attempt(client, n))
                    if tries[-1][0] == "waited":
                        break
                    # refused at once (a lease fenced by a loaded machine): not an answer about
                    # durability, so try again once the master takes writes
                    await asyncio.sleep(1.0)
                return tries
            finally:
                await client.close()

        tries = asyncio.run(run())
    finally:
        flag.unlink(missing_ok=True)
        group.close()
    print(f"\nslave fsync held {HELD_S:.1f}s: {tries}")
    assert not [t for t in tries if t[0] == "early" and t[2] == ResponseCode.SUCCESS], (
        f"SEND_OK while the slave could not make the message durable: {tries}"
    )
    how, took, code, remark = tries[-1]
    assert how == "waited", f"every attempt was refused at once: {tries}"
    assert code == ResponseCode.SUCCESS, (code, remark)
    assert took >= HELD_S
