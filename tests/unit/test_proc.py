"""Children started with die_with_parent are terminated when their parent is killed."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

PARENT = """
import subprocess, sys, time
from ledgermq.util.proc import die_with_parent
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], preexec_fn=die_with_parent)
print(child.pid, flush=True)
time.sleep(60)
"""


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for init to reap it counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_child_dies_with_its_parent() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    child_pid = 0
    try:
        assert parent.stdout is not None
        child_pid = int(parent.stdout.readline())
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if not _alive(child_pid):
                return
            time.sleep(0.05)
        raise AssertionError("the child outlived its parent")
    finally:
        if parent.poll() is None:
            parent.kill()
        if child_pid and _alive(child_pid):
            subprocess.run(["kill", "-9", str(child_pid)], check=False)
