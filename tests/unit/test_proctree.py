"""``bench.proctree``: CPU seconds of a process tree by role, from /proc."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ledgermq.bench.proctree import spent, tree_cpu

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="Linux /proc only")

BUSY = "import time\nend = time.process_time() + 0.4\nwhile time.process_time() < end: pass\n"
# a long-lived parent (like pyspark.daemon) whose busy child exits and is reaped before the second snapshot
PARENT = (
    "import subprocess, sys\n"
    f"subprocess.run([sys.executable, '-c', {BUSY!r}], check=True)\n"
    "print('done', flush=True)\n"
    "sys.stdin.read()\n"
)


@pytest.mark.parametrize("script", [BUSY + "print('done', flush=True)\nimport sys; sys.stdin.read()\n", PARENT])
def test_cpu_of_a_child_and_of_a_reaped_grandchild_is_charged_to_the_role(script: str) -> None:
    me = os.getpid()

    def role(pid: int, command: str) -> str:
        return "me" if pid == me else "children"

    before = tree_cpu(me, role)
    child = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"done\n"
        used = spent(before, tree_cpu(me, role))
    finally:
        child.communicate(b"", timeout=30)
    assert used["children"] >= 0.35, used
