"""What a bench reads about a process and the host from /proc: descriptors, memory, CPU, load.

The scale bench quotes these beside its figures: a broker's open descriptors and RSS are
what grows with its topics and queues, its CPU seconds say where a slow step spent its
time, and the host's load average says how much of a figure is other work sharing the
machine; context switches per message say how often its threads block and wake. Linux
only; a process that is gone reads as -1 rather than raising, so a broker that died
mid-run does not cost the figures already measured.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def load_average() -> float:
    """The host's 1-minute load average (about 1.0 is one busy process)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return -1.0


def fd_count(pid: int) -> int:
    """Open file descriptors of ``pid`` (entries of /proc/<pid>/fd); -1 if unreadable."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid`` (VmRSS); -1 if unreadable."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return -1


def rss_split(pid: int) -> tuple[int, int]:
    """(RssAnon, RssFile) of ``pid`` in bytes: memory the process owns, and pages of mapped
    files the kernel may evict; (-1, -1) if unreadable."""
    anon = file = -1
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    anon = int(line.split()[1]) * 1024
                elif line.startswith("RssFile:"):
                    file = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return -1, -1
    return anon, file


@dataclass(frozen=True, slots=True)
class ProcMemory:
    """VmRSS, RssAnon and RssFile of a process in bytes (-1 each when unreadable): the whole
    resident set, the memory the process owns, and pages of files it maps (page cache the
    kernel may evict; RssShmem, the rest of VmRSS, is about 0 for our processes)."""

    rss: int
    anon: int
    file: int


def memory(pid: int) -> ProcMemory:
    """``ProcMemory`` of ``pid`` from /proc/<pid>/status."""
    values = {"VmRSS:": -1, "RssAnon:": -1, "RssFile:": -1}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key = line.split(":", 1)[0] + ":"
                if key in values:
                    values[key] = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return ProcMemory(-1, -1, -1)
    return ProcMemory(values["VmRSS:"], values["RssAnon:"], values["RssFile:"])


def read_stat(path: str) -> tuple[str, list[str]] | None:
    """(command, the fields after it) of a ``/proc/<pid>[/task/<tid>]/stat`` file; None if
    it is gone. ``fields[1]`` is the parent's pid, ``fields[11:15]`` utime, stime, cutime,
    cstime in clock ticks (``ticks_to_seconds``). The command may hold spaces and brackets,
    so it is cut at the last ``)``."""
    try:
        with open(path) as f:
            stat = f.read()
    except OSError:
        return None
    try:
        return stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
    except ValueError:
        return None


def ticks_to_seconds(ticks: str) -> float:
    return int(ticks) / _CLOCK_TICKS


def cpu_split(pid: int, tid: int | None = None) -> tuple[float, float]:
    """(user, system) CPU seconds ``pid`` (or its thread ``tid``) has used so far; (-1, -1)
    if unreadable."""
    stat = read_stat(f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat")
    if stat is None:
        return -1.0, -1.0
    try:
        return ticks_to_seconds(stat[1][11]), ticks_to_seconds(stat[1][12])
    except (ValueError, IndexError):
        return -1.0, -1.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds ``pid`` has used so far; -1 if unreadable."""
    user, system = cpu_split(pid)
    return -1.0 if user < 0 else user + system


def thread_cpu_seconds(pid: int) -> dict[int, float]:
    """User + system CPU seconds of each thread of ``pid`` (tid -> seconds); threads that
    ended meanwhile are left out."""
    out: dict[int, float] = {}
    for tid in _threads(pid):
        user, system = cpu_split(pid, tid)
        if user >= 0:
            out[tid] = user + system
    return out


def voluntary_switches(pid: int, *, main_thread_only: bool = False) -> int:
    """Voluntary context switches of ``pid`` so far (a thread that blocks, waiting for
    work or I/O, makes one; a wake-up per message shows here), summed over its threads
    or of its main thread only; -1 if unreadable."""
    total = -1
    for tid in [pid] if main_thread_only else _threads(pid):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches"):
                        total = max(total, 0) + int(line.split()[1])
        except (OSError, ValueError, IndexError):
            pass
    return total


def _threads(pid: int) -> list[int]:
    try:
        return [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def nofile_limit(pid: int) -> int:
    """The soft RLIMIT_NOFILE of ``pid`` (from /proc/<pid>/limits); -1 if unreadable."""
    try:
        with open(f"/proc/{pid}/limits") as f:
            for line in f:
                if line.startswith("Max open files"):
                    soft = line.split()[3]
                    return -1 if soft == "unlimited" else int(soft)
    except (OSError, ValueError, IndexError):
        pass
    return -1
