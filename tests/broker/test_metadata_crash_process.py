"""Real crashes of metadata writes: a child process applying numbered changes to a topic,
group or offset manager dies at each crash point of an append and of a compaction (a
failpoint's ``os._exit``) or by SIGKILL. Reloaded, the manager must hold every change the
child saw acknowledged (and at most the one in flight more), and go on taking changes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from ledgermq.broker.json_file import load_json
from tests.broker.metadata_ops import KINDS, apply, model, open_manager, state

WRITER = Path(__file__).with_name("metadata_writer.py")
ROOT = Path(__file__).resolve().parents[2]
COUNT = 120
DEADLINE_S = 60.0

APPEND_POINTS = ("metadata_log.before_append", "metadata_log.after_append")
COMPACTION_POINTS = (
    "metadata_log.before_snapshot",
    "atomic_file.before_fsync",
    "atomic_file.before_rename",
    "metadata_log.after_snapshot",
    "metadata_log.after_truncate",
)


@dataclass
class Outcome:
    acked: int  # changes acknowledged (ack 0..acked-1)
    done: bool
    returncode: int
    stderr: str


def _run(config_dir: Path, kind: str, failpoints: str = "", kill_after_acks: int | None = None) -> Outcome:
    """Run the writer; with ``kill_after_acks`` it runs until the SIGKILL that follows that
    many acknowledgements (it cannot finish first, however late this process reads)."""
    env = {**os.environ, "LEDGERMQ_FAILPOINTS": failpoints, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    count = COUNT if kill_after_acks is None else 0
    proc = subprocess.Popen(
        [sys.executable, str(WRITER), str(config_dir), kind, str(count)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    acked, done = 0, False
    deadline = time.monotonic() + DEADLINE_S
    assert proc.stdout is not None and proc.stderr is not None
    try:
        for line in proc.stdout:  # ends when the child exits (its pipe closes)
            if time.monotonic() > deadline:
                raise AssertionError(f"writer did not finish within {DEADLINE_S} s")
            word, *args = line.split()
            if word == "ack":
                acked = int(args[0]) + 1
                if kill_after_acks is not None and acked >= kill_after_acks and proc.poll() is None:
                    os.kill(proc.pid, signal.SIGKILL)
            elif word == "done":
                done = True
        proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        stderr = proc.stderr.read()
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
        proc.stdout.close()
        proc.stderr.close()
    return Outcome(acked, done, proc.returncode, stderr)


def _assert_recovered(config_dir: Path, kind: str, acked: int) -> None:
    """Reloaded state is the model after ``acked`` changes or one more; new changes stick."""
    manager = open_manager(kind, config_dir)
    manager.load()
    got = state(kind, manager)
    allowed = [model(kind, acked), model(kind, acked + 1)]
    assert got in allowed, f"after {acked} acks: {got} is neither {allowed[0]} nor {allowed[1]}"
    applied = acked + (got != allowed[0])
    for i in range(applied, applied + 6):  # the log takes new records after the crash's leftovers
        apply(kind, manager, i)
    manager.close()
    again = open_manager(kind, config_dir)
    again.load()
    assert state(kind, again) == model(kind, applied + 6)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("point", APPEND_POINTS + COMPACTION_POINTS)
@pytest.mark.parametrize("nth", [1, 3])
def test_kill_at_each_crash_point_keeps_every_acknowledged_change(
    tmp_path: Path, kind: str, point: str, nth: int
) -> None:
    config_dir = tmp_path / "config"
    out = _run(config_dir, kind, f"{point}=exit@{nth}")
    assert out.returncode == 137 and not out.done, f"{point}@{nth} was never reached: {out.stderr[-2000:]}"
    _assert_recovered(config_dir, kind, out.acked)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("kill_after", [5, 47, 101])
def test_sigkill_mid_stream_keeps_every_acknowledged_change(tmp_path: Path, kind: str, kill_after: int) -> None:
    config_dir = tmp_path / "config"
    out = _run(config_dir, kind, kill_after_acks=kill_after)
    assert out.acked >= kill_after and not out.done, out.stderr[-2000:]
    _assert_recovered(config_dir, kind, out.acked)


@pytest.mark.parametrize("kind", KINDS)
def test_clean_close_leaves_a_complete_snapshot_and_an_empty_log(tmp_path: Path, kind: str) -> None:
    config_dir = tmp_path / "config"
    out = _run(config_dir, kind)
    assert out.done and out.returncode == 0, out.stderr[-2000:]
    manager = open_manager(kind, config_dir)
    assert manager.log.changes_path.stat().st_size == 0
    doc = load_json(manager.path)  # the old loader: the snapshot alone, as a Java broker reads it
    assert isinstance(doc, dict)
    table_key = {"topics": "topicConfigTable", "groups": "subscriptionGroupTable", "offsets": "offsetTable"}[kind]
    names = {k for k in doc[table_key] if kind == "offsets" or k[1:].isdigit()}
    assert names == set(model(kind, COUNT))
