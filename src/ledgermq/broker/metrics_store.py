"""The store's metric families: offsets, dispatch, files, disk, corruption and repairs,
consume-queue and index rebuilds (scraped by ``BrokerCollector``).

Every family is one row of ``FAMILIES`` (kind, name, help, how to read it from the
broker), so adding one is adding a row, and the exposition order is the table's order."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from prometheus_client.metrics_core import Metric

from ledgermq.store.message_store import MessageStore
from ledgermq.store.native_store import NativeMessageStore
from ledgermq.store.retention import disk_usage_ratio

if TYPE_CHECKING:
    from ledgermq.broker.context import Broker


class Kind(Enum):
    GAUGE = "gauge"
    COUNTER = "counter"


@dataclass(frozen=True, slots=True)
class Family:
    """One single-sample family, read at scrape time (event-loop thread)."""

    kind: Kind
    name: str
    doc: str
    read: Callable[[Broker], float]


def _disk_ratio(path: Path) -> float:
    """Used fraction of the partition that holds (or will hold) ``path``; -1 if unknown."""
    while not path.exists() and path.parent != path:
        path = path.parent
    try:
        return disk_usage_ratio(path)
    except OSError:
        return -1.0


def _scrubbed_bytes(store: MessageStore) -> int:
    """Bytes the commit-log scrub re-read (a native store's; DLedger mode scrubs in broker/dledger.py)."""
    scrubber = store.scrubber if isinstance(store, NativeMessageStore) else None
    return scrubber.scrubbed_bytes if scrubber is not None else 0


_G, _C = Kind.GAUGE, Kind.COUNTER
FAMILIES: tuple[Family, ...] = (
    Family(
        _G, "ledgermq_commitlog_max_offset", "Commit-log max (write) offset in bytes.", lambda b: b.store.max_phy_offset
    ),
    Family(
        _G,
        "ledgermq_commitlog_min_offset",
        "Commit-log min offset (start of the oldest segment).",
        lambda b: b.store.min_phy_offset,
    ),
    Family(
        _G,
        "ledgermq_store_dispatch_behind_bytes",
        "Commit-log bytes not yet dispatched.",
        lambda b: b.store.dispatch_behind_bytes,
    ),
    Family(
        _G,
        "ledgermq_store_dispatch_failing",
        "1 while stored messages cannot be dispatched into their consume queues or their queue "
        "files cannot be created (puts are refused meanwhile; the reason is in the log and in "
        "brokerStatus' dispatchError).",
        lambda b: 1 if b.store.dispatch_problem else 0,
    ),
    Family(_G, "ledgermq_store_consume_queues", "Consume queues in the store.", lambda b: len(b.store.queues.queues)),
    Family(
        _G,
        "ledgermq_store_consume_queue_open_files",
        "Descriptors open on consume-queue files (bounded by maxOpenConsumeQueueFiles).",
        lambda b: b.store.queues.open_files.open_count,
    ),
    Family(
        _G,
        "ledgermq_store_consume_queue_files_pending",
        "New consume-queue segments still held in memory, their files not yet created.",
        lambda b: b.store.queues.creator.backlog,
    ),
    Family(
        _G,
        "ledgermq_store_commitlog_size_bytes",
        "Bytes of commit-log segment files on disk (segments times their fixed size).",
        lambda b: sum(mf.size for mf in b.store.commitlog.segment_files()),
    ),
    Family(
        _G,
        "ledgermq_store_disk_used_ratio",
        "Used fraction of the partition holding the commit log (-1: unknown); retention "
        "deletes at diskMaxUsedSpaceRatio and refuses writes near full.",
        lambda b: _disk_ratio(Path(b.store_config.commitlog_path)),
    ),
    Family(
        _C,
        "ledgermq_store_dispatch_failures",
        "Failed attempts to dispatch a record or create a consume-queue file.",
        lambda b: b.store.dispatch_failures,
    ),
    Family(
        _C,
        "ledgermq_store_corruptions_found",
        "Corrupt commit-log ranges found by this process (recovery, scrub, reads, replication).",
        lambda b: b.store.damage_summary().corruptions_found,
    ),
    Family(
        _C,
        "ledgermq_store_repairs",
        "Damaged commit-log ranges repaired from a replica.",
        lambda b: b.store.damage_summary().repairs,
    ),
    Family(
        _G,
        "ledgermq_store_damaged_bytes",
        "Commit-log bytes known corrupt and refused.",
        lambda b: b.store.damage_summary().damaged_bytes,
    ),
    Family(
        _G,
        "ledgermq_store_damaged_ranges",
        "Commit-log ranges known corrupt and refused.",
        lambda b: b.store.damage_summary().ranges,
    ),
    Family(
        _C,
        "ledgermq_store_scrubbed_bytes",
        "Sealed commit-log bytes re-read by the scrub.",
        lambda b: _scrubbed_bytes(b.store),
    ),
    Family(
        _C,
        "ledgermq_store_queue_rebuilds",
        "Consume queues re-derived from the commit log.",
        lambda b: b.store.queues.stats.queue_rebuilds,
    ),
    Family(
        _C,
        "ledgermq_store_queue_units_rewritten",
        "Consume-queue units that disagreed with their record and were rewritten.",
        lambda b: b.store.queues.stats.units_rewritten,
    ),
    Family(
        _C,
        "ledgermq_store_queue_placeholders",
        "Consume-queue units written for records lost in damaged ranges (refused until repaired).",
        lambda b: b.store.queues.stats.placeholders,
    ),
    Family(
        _C,
        "ledgermq_store_index_rebuilds",
        "Index files that failed their checks and were dropped and rebuilt.",
        lambda b: b.store.index.files_dropped if b.store.index is not None else 0,
    ),
)


class SingleSamples(Protocol):
    """Makes a one-sample family with the broker's labels (``BrokerCollector`` does)."""

    def one_gauge(self, name: str, doc: str, value: float) -> Metric: ...

    def one_counter(self, name: str, doc: str, value: float) -> Metric: ...


def store_metrics(broker: Broker, samples: SingleSamples) -> Iterator[Metric]:
    for family in FAMILIES:
        value = family.read(broker)
        if family.kind is Kind.GAUGE:
            yield samples.one_gauge(family.name, family.doc, value)
        else:
            yield samples.one_counter(family.name, family.doc, value)
