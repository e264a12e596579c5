"""The short chaos profile of ``make test``: a SYNC_MASTER group as real processes, one cycle of
each fault kind (kill-restart, suspend, partition of the HA link, a master that loses the unflushed
tail of its commit log, a full disk), no acknowledged message lost, master and slave identical.
``make chaos`` runs the long profile.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.profile import run_short_profile

SEED = 20240601
KINDS = "kill,suspend,partition,tail-loss,disk-full"


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_short_profile_loses_nothing(tmp_path: Path) -> None:
    summary, _report = run_short_profile(tmp_path, "sync", KINDS, SEED, 220)
    assert {s["source"] for s in summary["verdict"]["sources"]} == {"master", "slave", "client"}
