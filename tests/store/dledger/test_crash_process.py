"""Real crashes: a writer process dies at each durability step (a failpoint's _exit) or by
SIGKILL, then the store must reopen with every acknowledged entry, nothing it did not try,
the last saved committed index and term, and go on appending."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from ledgermq.atomic_file import temp_files
from ledgermq.store.dledger import DLedgerStore, TermState
from tests.store.dledger.helpers import assert_numbered, body_for, small_config

WRITER = Path(__file__).with_name("crash_writer.py")
ROOT = Path(__file__).resolve().parents[3]


@dataclass
class Progress:
    acked: int = -1
    tried: int = -1
    committed: int = -1
    term: int = 0
    done: bool = False


def _run(base: Path, batches: int, failpoints: str = "", kill_after_acks: int | None = None) -> tuple[int, Progress]:
    env = {**os.environ, "LEDGERMQ_FAILPOINTS": failpoints, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    proc = subprocess.Popen(
        [sys.executable, str(WRITER), str(base), str(batches)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    p = Progress()
    acks = 0
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            word, *args = line.split()
            if word == "try":
                p.tried = int(args[1])
            elif word == "ack":
                p.acked = int(args[0])
                acks += 1
                if kill_after_acks is not None and acks >= kill_after_acks and proc.poll() is None:
                    proc.send_signal(signal.SIGKILL)
            elif word == "committed":
                p.committed = int(args[0])
            elif word == "term":
                p.term = int(args[0])
            elif word == "done":
                p.done = True
    finally:
        if proc.poll() is None:
            proc.wait(30)
    rc = proc.wait(30)
    if rc not in (0, 137, -signal.SIGKILL):
        raise AssertionError(proc.stderr.read() if proc.stderr else rc)
    return rc, p


def _reopen_and_check(base: Path, p: Progress) -> int:
    with DLedgerStore.open(small_config(base)) as s:
        assert p.acked <= s.last_index <= p.tried, (p, s.recovery)
        assert_numbered(s, s.last_index)
        assert s.committed_index >= p.committed
        assert s.term_state.current_term >= p.term
        terms = [s.term_at(i) for i in range(s.last_index + 1)]
        assert terms == sorted(terms)
        nxt = s.last_index + 1
        s.append([(nxt, s.last_term, body_for(nxt))])
        return nxt


@pytest.mark.parametrize(
    "failpoint",
    [
        "dledger.after_entry_head=exit@23",  # an entry's head written, its body not (torn entry)
        "dledger.before_data_fsync=exit@9",  # appended, nothing fsynced
        "dledger.before_index_fsync=exit@9",  # data fsynced, index not
        "mapped_file_queue.before_create=exit@2",  # a data or index file full, the next not created
        "dledger.before_checkpoint_write=exit@4",
        "atomic_file.before_rename=exit@5",  # a currterm or checkpoint temp file written, not renamed
    ],
)
def test_crash_at_each_durability_step(tmp_path: Path, failpoint: str) -> None:
    rc, p = _run(tmp_path, 60, failpoint)
    assert rc == 137 and not p.done, p
    last = _reopen_and_check(tmp_path, p)
    rc, p2 = _run(tmp_path, 6)  # the next life continues the same log
    assert rc == 0 and p2.acked >= last + 6
    _reopen_and_check(tmp_path, p2)


def test_a_torn_entry_is_cut(tmp_path: Path) -> None:
    rc, _ = _run(tmp_path, 60, "dledger.after_entry_head=exit@23")
    assert rc == 137
    with DLedgerStore.open(small_config(tmp_path)) as s:
        assert s.recovery is not None
        assert s.last_index == 21 and s.recovery.dirty_tail and "CRC" in s.recovery.stop_reason


@pytest.mark.parametrize("seed", [3, 8])
def test_sigkill_mid_stream(tmp_path: Path, seed: int) -> None:
    rc, p = _run(tmp_path, 100_000, kill_after_acks=20 + seed * 7)
    assert rc == -signal.SIGKILL
    _reopen_and_check(tmp_path, p)


@pytest.mark.parametrize(("nth", "interrupted"), [(3, "currterm"), (4, "checkpoint")])
def test_state_files_keep_their_last_complete_write(tmp_path: Path, nth: int, interrupted: str) -> None:
    """Atomic writes in order: logstart (at open), checkpoint (batch 2), currterm (batch 4),
    checkpoint (batch 5)."""
    rc, p = _run(tmp_path, 60, f"atomic_file.before_rename=exit@{nth}")
    assert rc == 137
    config = small_config(tmp_path)
    assert temp_files(config.default_path / interrupted)  # the interrupted write's temp file
    with DLedgerStore.open(config) as s:
        assert s.committed_index == p.committed
        assert s.term_state == (TermState(p.term, "n0") if p.term else TermState())
