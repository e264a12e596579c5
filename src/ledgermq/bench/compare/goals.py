"""The rate-ratio goals issue #12 sets for the compare bench, keyed by the ids of a row.

One table, so the plot (and anything else that judges a run) reads the goals from a single
place. A key names both sides by the model's system and workload keys rather than by the
row's display label, which changes with the settings ("256 sends in flight").
"""

from __future__ import annotations

from dataclasses import dataclass

from ledgermq.bench.compare.model import (
    ASYNC_CAPACITY,
    ASYNC_GATHER,
    BATCH,
    DRAIN_LITE,
    DRAIN_PULL,
    DRAIN_PUSH,
    INFLIGHT,
    JETSTREAM,
    LEDGERMQ,
    LEDGERMQ_SYNC_FLUSH,
    LEDGERMQ_SYNC_MASTER,
    SYNC,
)


@dataclass(frozen=True, slots=True)
class RowKey:
    """The two sides of one comparison row: measured (system, workload) / baseline."""

    system: str
    workload: str
    base_system: str
    base_workload: str


# Minimum rate ratio (measured / baseline msgs/s). A row absent here (batch of 64, a batch
# size of one's own choosing) has no goal. The in-flight goals hold for whatever --inflight
# was; the issue states them for 256.
GOALS: dict[RowKey, float] = {
    RowKey(LEDGERMQ, SYNC, JETSTREAM, SYNC): 1.0,
    RowKey(LEDGERMQ, INFLIGHT, JETSTREAM, INFLIGHT): 1.0,
    RowKey(LEDGERMQ, BATCH.format(32), JETSTREAM, BATCH.format(32)): 2.0,
    RowKey(LEDGERMQ, DRAIN_PUSH, JETSTREAM, DRAIN_PULL): 1.5,
    RowKey(LEDGERMQ, DRAIN_LITE, JETSTREAM, DRAIN_PULL): 1.5,
    RowKey(LEDGERMQ_SYNC_MASTER, SYNC, LEDGERMQ, SYNC): 0.9,
    RowKey(LEDGERMQ_SYNC_MASTER, INFLIGHT, LEDGERMQ, INFLIGHT): 0.9,
    RowKey(LEDGERMQ_SYNC_FLUSH, INFLIGHT, LEDGERMQ, INFLIGHT): 0.7,
    # issue #24: every way of sending at least 0.8x the best (tasks awaiting send)
    RowKey(LEDGERMQ, ASYNC_GATHER, LEDGERMQ, INFLIGHT): 0.8,
    RowKey(LEDGERMQ, ASYNC_CAPACITY, LEDGERMQ, INFLIGHT): 0.8,
}


def goal_for(key: RowKey | None) -> float | None:
    """The row's goal, or None when it has none (or its sides are unknown)."""
    return None if key is None else GOALS.get(key)
