"""What a bench reads about a process and the host from /proc: descriptors, memory, CPU, load.

The scale bench quotes these beside its figures: a broker's open descriptors and RSS are
what grows with its topics and queues, its CPU seconds say where a slow step spent its
time, and the host's load average says how much of a figure is other work sharing the
machine. Linux only; a process that is gone reads as -1 rather than raising, so a broker
that died mid-run does not cost the figures already measured.
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


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds ``pid`` has used so far; -1 if unreadable."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        fields = stat[stat.rindex(")") + 2 :].split()  # the command name may hold spaces
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime, stime
    except (OSError, ValueError, IndexError):
        return -1.0


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
