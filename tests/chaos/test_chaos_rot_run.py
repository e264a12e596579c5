"""A short real run of the rot kinds on a SYNC_MASTER group: a sealed, digested segment
with flipped bytes and a sealed segment cut short, each on one replica. The harness waits
after each until the damage was found and repaired from the other replica (chaos/
repaired.py), so the next fault never meets it; nothing acknowledged is lost, nothing is
served with other content, and master and slave end byte-identical."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.profile import run_short_profile

SEED = 3
KINDS = "bitflip,segment-loss"


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_rot_on_one_replica_is_found_and_repaired_before_the_next_fault(tmp_path: Path) -> None:
    summary, report = run_short_profile(tmp_path, "sync", KINDS, SEED, 220)
    verdict = summary["verdict"]
    assert verdict["unrepaired"] == [], report
    for fault in summary["faults"]:
        assert not fault["notes"].get("skipped"), report
        assert fault["repaired_at"] >= fault["healed_at"] > 0, report
    group = summary["repairs"]["group"]
    assert group.get("storeRepairs", 0) >= 2 and group.get("storeDamagedRanges", 0) == 0, report
