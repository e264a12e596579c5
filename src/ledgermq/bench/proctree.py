"""CPU seconds of a process tree by role, read from /proc (Linux only).

The Spark bench runs its work in processes it does not start itself: Spark's JVM is a child
of the bench, the Python workers children of the JVM (forked by ``pyspark.daemon``). To say
where a read spends its CPU, the bench snapshots every descendant before and after a case
and charges the difference to a role named by the process's command (``java``, ``python``).
A process's own time plus the time of its children that exited and were waited for
(``cutime``/``cstime``) is counted, so workers that come and go between two snapshots are
still charged to their parent's role.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from ledgermq.bench.procstat import read_stat, ticks_to_seconds


def _stat(pid: int) -> tuple[int, str, float, float] | None:
    """(ppid, command, own seconds, seconds of reaped children) of ``pid``; None if gone."""
    stat = read_stat(f"/proc/{pid}/stat")
    if stat is None:
        return None
    command, fields = stat
    try:
        own = ticks_to_seconds(fields[11]) + ticks_to_seconds(fields[12])
        children = ticks_to_seconds(fields[13]) + ticks_to_seconds(fields[14])
        return int(fields[1]), command, own, children
    except (ValueError, IndexError):
        return None


Snapshot = dict[int, tuple[str, float]]


def tree_cpu(root: int, role: Callable[[int, str], str]) -> Snapshot:
    """pid -> (role, CPU seconds) of ``root`` and every descendant; a process's seconds include
    its reaped children's (not for ``root``, whose children are in the tree themselves)."""
    stats: dict[int, tuple[int, str, float, float]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            s = _stat(int(entry))
            if s is not None:
                stats[int(entry)] = s
    kids: dict[int, list[int]] = {}
    for pid, (ppid, *_rest) in stats.items():
        kids.setdefault(ppid, []).append(pid)
    out: Snapshot = {}
    todo = [root]
    while todo:
        pid = todo.pop()
        s = stats.get(pid)
        if s is None:
            continue
        _ppid, command, own, children = s
        out[pid] = (role(pid, command), own + (children if pid != root else 0.0))
        todo.extend(kids.get(pid, []))
    return out


def spent(before: Snapshot, after: Snapshot) -> dict[str, float]:
    """CPU seconds by role between two snapshots: what every process alive at the end used
    since the first snapshot (all of it for one started since). A process that ended in
    between is charged through the parent that reaped it (its whole life, so a little too
    much if it was already running at the first snapshot); one reaped outside the tree is lost."""
    out: dict[str, float] = {}
    for pid, (name, seconds) in after.items():
        out[name] = out.get(name, 0.0) + seconds - (before[pid][1] if pid in before else 0.0)
    return dict(sorted(out.items()))
