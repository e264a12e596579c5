"""Controller mode: a role switch that fails is tried again, so the group does not stay
without a master until someone restarts a broker.

Found by the chaos harness (controller layout, kill+disk-full): the master was SIGKILLed
while the slave's disk was full; the controller elected the slave, whose switch to master
failed writing its epoch file (ENOSPC). The broker kept the new epoch as if applied, so
every later metadata sync saw nothing new: no master for minutes after the disk was free
again, until the harness restarted the broker. Real processes; the slave's full disk is a
failpoint on every atomic file write.
"""

from __future__ import annotations

from pathlib import Path

from ledgermq.protocol.codes import ResponseCode
from tests.compat.cluster import wait_until
from tests.ha.controller_group import ControllerGroup
from tests.ha.process_group import send_once

TOPIC = "CtlRoleRetryTopic"


def test_a_new_master_whose_switch_failed_on_a_full_disk_takes_writes_once_it_is_free(tmp_path: Path) -> None:
    flag = tmp_path / "b-disk-full"
    group = ControllerGroup(tmp_path, allAckInSyncStateSet="true")
    a = group.add_broker("a")
    b = group.add_broker("b")
    b.arm_failpoints(f"atomic_file.before_fsync=enospc-if:{flag}")
    try:
        group.start_pair(a, b)
        taken = int(group.info(b)["controllerRoleChanges"])  # b's slave role so far
        flag.touch()  # b's disk is full: its epoch file cannot be written
        group.kill(a)
        seen: dict[str, str] = {}

        def failed_once() -> bool:
            b.server.check_alive()
            seen.update(group.info(b))
            return int(seen.get("controllerRoleChangeFailures", "0")) >= 2

        wait_until("b's switch to master to fail twice on its full disk", failed_once, 30, 0.05, lambda: f"{seen}")
        assert seen["controllerRole"] == "SWITCHING"  # and it takes no writes meanwhile
        assert int(seen["controllerRoleChanges"]) == taken  # a failed try is no role taken
        flag.unlink()
        now = group.wait_role(b, "MASTER", 20)  # tried again at a metadata sync, without a restart
        assert int(now["controllerRoleChanges"]) == taken + 1, now

        code, remark = send_once(b, TOPIC, b"after the disk was freed")
        # one broker of the set is gone: SYNC waits end at SLAVE_NOT_AVAILABLE or succeed
        # once the set shrinks; either way the master is writing again
        assert code in (ResponseCode.SUCCESS, ResponseCode.SLAVE_NOT_AVAILABLE), (code, remark)
    finally:
        flag.unlink(missing_ok=True)
        group.close()
