"""Golden transcripts of scripted scenarios (etcd-io/raft's interaction tests, in our text format).

Each ``testdata/*.txt`` file is run through ``InteractionEnv``; set
``LEDGERMQ_REWRITE_GOLDEN=1`` to regenerate them, then read the diff: a rewrite
accepts whatever the code does now.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ledgermq.testing.datadriven import run_file
from ledgermq.testing.raft_interaction import InteractionEnv

TESTDATA = Path(__file__).parent / "testdata"


@pytest.mark.parametrize("path", sorted(TESTDATA.glob("*.txt")), ids=lambda p: p.stem)
def test_transcript(path: Path) -> None:
    env = InteractionEnv()
    run_file(path, env.handle)
