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


def test_a_send_waits_for_the_slaves_fsync_not_only_its_write(tmp_path: Path) -> None:
    flag = tmp_path / "slave-disk-stalls"
    group = ControllerGroup(
        tmp_path,
        allAckInSyncStateSet="true",
        flushDiskType="SYNC_FLUSH",
        haMaxTimeSlaveNotCatchup=20000,  # the stalled slave stays in the set: the send must wait for it
        syncFlushTimeout=8000,
    )
    a = group.add_broker("a")
    b = group.add_broker("b")
    b.server.module = "ledgermq.cli.chaos_child"  # arms LEDGERMQ_FAILPOINTS, then runs the broker
    b.server.env = {"LEDGERMQ_FAILPOINTS": f"mapped_file.before_fsync=stall-if:{flag}"}
    try:
        group.start_pair(a, b)

        async def run() -> tuple[float, int, float, int]:
            client = RemotingClient(connect_timeout=1.0)
            try:
                first = await send_raw(client, a, TOPIC, 0, b"before")
                assert first.code == ResponseCode.SUCCESS, first.remark
                flag.touch()  # the slave's next fsync stalls
                started = time.monotonic()
                waiting = asyncio.create_task(send_raw(client, a, TOPIC, 0, b"while the slave cannot fsync"))
                await asyncio.sleep(HELD_S)
                done_while_held = waiting.done()
                flag.unlink()
                resp = await asyncio.wait_for(waiting, 10)
                return time.monotonic() - started, resp.code, HELD_S, int(done_while_held)
            finally:
                await client.close()

        took, code, held, done_while_held = asyncio.run(run())
    finally:
        flag.unlink(missing_ok=True)
        group.close()
    print(f"\nslave fsync held {held:.1f}s -> SEND_OK after {took:.2f}s")
    assert not done_while_held, "answered while the slave could not make the message durable"
    assert code == ResponseCode.SUCCESS
    assert took >= HELD_S
