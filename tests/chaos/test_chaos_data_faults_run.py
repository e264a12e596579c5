"""A short real run of the data-losing fault kinds that today's broker survives, on a
SYNC_MASTER group with SYNC_FLUSH (the mode that must keep every SEND_OK through a power
loss): a power loss of both brokers cut to their fsyncs, stalled fsyncs, a wall clock that
jumps, and the three pairs. No acknowledged message lost, none served with other content,
master and slave identical. (bitflip and segment-loss need the store's repair: see
docs/chaos.md and ``make chaos-rot``.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.profile import run_short_profile

SEED = 8
KINDS = "power-loss,slow-disk,clock-jump,kill+disk-full,partition+restart,kill-in-recovery"


@pytest.mark.long
@pytest.mark.timeout(240)
def test_sync_flush_group_keeps_every_ack_through_power_loss_and_the_pairs(tmp_path: Path) -> None:
    summary, report = run_short_profile(tmp_path, "sync", KINDS, SEED, 220, ("--flush", "sync"))
    verdict = summary["verdict"]
    assert summary["run"]["flush"] == "sync" and verdict["promise"].startswith("SYNC_FLUSH"), report
    assert verdict["lost_allowed"] == 0, report
    faults = {f["kind"]: f for f in summary["faults"]}
    power = faults["power-loss"]["notes"]["nodes"]
    assert set(power) == {"master", "slave"} and all(n["durable_end"] > 0 for n in power.values()), report
    assert "serving_at_second_kill" in faults["kill-in-recovery"]["notes"], report
    assert faults["partition+restart"]["notes"]["restarted"] == "slave", report
    assert not any(f["error"] for f in summary["faults"]), report
    # every fault healed by its own end: nothing left for the final heal, both brokers at the same end
    assert summary["healed_at_end"] == [], report
    assert summary["stability"]["stable"], report
