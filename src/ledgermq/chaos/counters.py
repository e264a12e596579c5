"""The brokers' corruption and repair counters over a run, from their runtime info.

A broker's counters (``storeCorruptionsFound``, ``storeRepairs``, the DLedger store's, ...)
count from its start, so a node killed and restarted starts again from 0. The sampler asks
every running node every ``interval_s`` and keeps the latest answer of each life (a node's
start count tells lives apart); ``totals`` adds the lives up per node. Gauges (what is
damaged now, when the last scrub ran) are the latest value, not a sum. What a life counted
after its last sample and before it was killed is missed: the summary says how often each
node was sampled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from typing import Any

from ledgermq.chaos.layout import Layout

log = logging.getLogger(__name__)
INTERESTING = re.compile(r"corrupt|repair|damaged|scrub", re.IGNORECASE)
GAUGES = ("storeDamagedRanges", "storeDamagedBytes", "storeLastScrubMillis")


class RepairCounters:
    def __init__(self, layout: Layout, interval_s: float = 2.0) -> None:
        self.layout = layout
        self.interval_s = interval_s
        self.lives: dict[tuple[str, int], dict[str, int]] = {}  # (node, start count) -> latest counters
        self.samples = 0
        self.failures = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def sample(self) -> None:
        """One round: every running node's interesting runtime-info keys."""
        for name in self.layout.targets():
            node = self.layout.node(name)
            if not node.process.alive or node.process.paused:
                continue
            try:
                async with self.layout.admin() as admin:
                    info = await admin.broker_runtime_info(node.addr)
            except Exception:
                self.failures += 1
                continue
            self.samples += 1
            found = {k: _int(v) for k, v in info.items() if INTERESTING.search(k)}
            self.lives[(name, node.process.starts)] = found

    async def _run(self) -> None:
        while True:
            try:
                await self.sample()
            except Exception:  # a sampler that dies would hide repairs: say so and go on
                log.exception("chaos: sampling the repair counters failed")
            await asyncio.sleep(self.interval_s)

    def totals(self) -> dict[str, Any]:
        """Per node: every counter summed over its lives, gauges as last seen; and the
        group's sums. Empty when no broker reports any such key (older stores)."""
        per_node: dict[str, dict[str, int]] = {}
        for (name, _life), counters in sorted(self.lives.items()):
            into = per_node.setdefault(name, {})
            for key, value in counters.items():
                into[key] = value if key in GAUGES else into.get(key, 0) + value
        group: dict[str, int] = {}
        for counters in per_node.values():
            for key, value in counters.items():
                if key == "storeLastScrubMillis":  # a time, not an amount: the latest of any node
                    group[key] = max(group.get(key, 0), value)
                else:
                    group[key] = group.get(key, 0) + value
        return {"nodes": per_node, "group": group, "samples": self.samples, "failed_samples": self.failures}


def _int(value: object) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0
