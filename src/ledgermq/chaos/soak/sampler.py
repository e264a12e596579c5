"""Samples every broker process of a layout from /proc: resident memory and open descriptors.

Every ``interval`` seconds, for each running node (by the pid the layout started): VmRSS and
RssAnon from ``/proc/<pid>/status`` and the entries of ``/proc/<pid>/fd``. A process that
dies between listing and reading (a fault killed it) is skipped for that round; a failed
round is logged and counted, and the loop goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time

from ledgermq.chaos.layout import Layout
from ledgermq.chaos.soak.stats import ProcSample

log = logging.getLogger(__name__)


def read_proc(pid: int) -> tuple[int, int, int]:
    """(VmRSS KiB, RssAnon KiB, open descriptors) of ``pid``; OSError when it is gone."""
    rss = anon = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("RssAnon:"):
                anon = int(line.split()[1])
    return rss, anon, len(os.listdir(f"/proc/{pid}/fd"))


class ProcSampler:
    def __init__(self, layout: Layout, t0: float, interval: float) -> None:
        self.layout = layout
        self.t0 = t0
        self.interval = interval
        self.samples: list[ProcSample] = []
        self.failed_rounds = 0
        self._task: asyncio.Task[None] | None = None

    def sample(self) -> None:
        now = time.monotonic() - self.t0
        for name in self.layout.targets():
            proc = self.layout.node(name).process
            pid = proc.pid
            if pid is None or not proc.alive or proc.paused:
                continue
            try:
                rss, anon, fds = read_proc(pid)
            except OSError:
                continue  # killed between the check and the read
            self.samples.append(ProcSample(round(now, 2), name, pid, rss, anon, fds))

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="soak-sampler")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            try:
                self.sample()
            except Exception:
                self.failed_rounds += 1
                log.exception("soak sampler: round failed (%d so far); going on", self.failed_rounds)
            await asyncio.sleep(self.interval)
