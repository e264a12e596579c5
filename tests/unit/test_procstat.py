"""``bench.procstat``: CPU seconds (whole process, user/system, per thread) and voluntary
context switches of a real child process, from /proc."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from ledgermq.bench.procstat import cpu_seconds, cpu_split, read_stat, thread_cpu_seconds, voluntary_switches

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="Linux /proc only")

# Names itself with brackets and spaces, burns 0.3 s of CPU on a second thread and says
# "ready"; told to go on, sleeps 20 times (each sleep blocks: a voluntary context switch)
# and says "done"; then waits to be killed.
CHILD = (
    "import sys, threading, time\n"
    "open('/proc/self/comm', 'w').write('x) y (z')\n"
    "def burn():\n"
    "    end = time.thread_time() + 0.3\n"
    "    while time.thread_time() < end: pass\n"
    "t = threading.Thread(target=burn); t.start(); t.join()\n"
    "print('ready', flush=True)\n"
    "sys.stdin.readline()\n"
    "for _ in range(20): time.sleep(0.001)\n"
    "print('done', flush=True)\n"
    "sys.stdin.read()\n"
)


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        yield proc
    finally:
        proc.kill()
        proc.wait(10)


def test_switches_of_a_child_that_blocks(child: subprocess.Popen[bytes]) -> None:
    assert child.stdin is not None and child.stdout is not None
    before = voluntary_switches(child.pid, main_thread_only=True)
    child.stdin.write(b"go\n")
    child.stdin.flush()
    assert child.stdout.readline() == b"done\n"
    assert voluntary_switches(child.pid, main_thread_only=True) - before >= 20
    assert voluntary_switches(child.pid) >= voluntary_switches(child.pid, main_thread_only=True)


def test_cpu_of_a_child_whole_split_and_by_thread(child: subprocess.Popen[bytes]) -> None:
    user, system = cpu_split(child.pid)
    assert user + system >= 0.29 and cpu_seconds(child.pid) == pytest.approx(user + system, abs=0.02)  # it waits
    # the main thread's own time leaves out the burner's 0.3 s (ticks of 10 ms may round each figure)
    threads = thread_cpu_seconds(child.pid)
    assert threads[child.pid] <= user + system - 0.28


def test_the_command_is_cut_at_its_last_bracket(child: subprocess.Popen[bytes]) -> None:
    stat = read_stat(f"/proc/{child.pid}/stat")
    assert stat is not None and stat[0] == "x) y (z" and stat[1][1] == str(os.getpid())  # its parent: us


def test_a_gone_process_reads_as_minus_one() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(30)
    assert cpu_seconds(proc.pid) == -1.0 and cpu_split(proc.pid) == (-1.0, -1.0)
    assert voluntary_switches(proc.pid) == -1 and thread_cpu_seconds(proc.pid) == {}
    assert read_stat(f"/proc/{proc.pid}/stat") is None
