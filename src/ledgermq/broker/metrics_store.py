"""The store's metric families: offsets, dispatch, files, disk, corruption and repairs,
consume-queue and index rebuilds (scraped by ``BrokerCollector``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client.metrics_core import Metric

from ledgermq.store.retention import disk_usage_ratio

if TYPE_CHECKING:
    from ledgermq.broker.metrics import BrokerCollector


def store_metrics(collector: BrokerCollector) -> Iterator[Metric]:
    b = collector.broker
    store = b.store
    for metric, doc, value in (
        ("ledgermq_commitlog_max_offset", "Commit-log max (write) offset in bytes.", store.max_phy_offset),
        (
            "ledgermq_commitlog_min_offset",
            "Commit-log min offset (start of the oldest segment).",
            store.min_phy_offset,
        ),
        (
            "ledgermq_store_dispatch_behind_bytes",
            "Commit-log bytes not yet dispatched.",
            store.dispatch_behind_bytes,
        ),
        (
            "ledgermq_store_dispatch_failing",
            "1 while stored messages cannot be dispatched into their consume queues or their queue "
            "files cannot be created (puts are refused meanwhile; the reason is in the log and in "
            "brokerStatus' dispatchError).",
            1 if store.dispatch_problem else 0,
        ),
        ("ledgermq_store_consume_queues", "Consume queues in the store.", len(store.queues.queues)),
        (
            "ledgermq_store_consume_queue_open_files",
            "Descriptors open on consume-queue files (bounded by maxOpenConsumeQueueFiles).",
            store.queues.open_files.open_count,
        ),
        (
            "ledgermq_store_consume_queue_files_pending",
            "New consume-queue segments still held in memory, their files not yet created.",
            store.queues.creator.backlog,
        ),
        (
            "ledgermq_store_commitlog_size_bytes",
            "Bytes of commit-log segment files on disk (segments times their fixed size).",
            sum(mf.size for mf in list(store.commitlog.queue.files)),
        ),
        (
            "ledgermq_store_disk_used_ratio",
            "Used fraction of the partition holding the commit log (-1: unknown); retention "
            "deletes at diskMaxUsedSpaceRatio and refuses writes near full.",
            _disk_ratio(Path(b.store_config.commitlog_path)),
        ),
    ):
        yield collector.one_gauge(metric, doc, value)
    yield collector.one_counter(
        "ledgermq_store_dispatch_failures",
        "Failed attempts to dispatch a record or create a consume-queue file.",
        store.dispatch_failures,
    )
    damage = store.damage
    yield collector.one_counter(
        "ledgermq_store_corruptions_found",
        "Corrupt commit-log ranges found by this process (recovery, scrub, reads, replication).",
        damage.corruptions_found,
    )
    yield collector.one_counter(
        "ledgermq_store_repairs", "Damaged commit-log ranges repaired from a replica.", damage.repairs
    )
    yield collector.one_gauge(
        "ledgermq_store_damaged_bytes", "Commit-log bytes known corrupt and refused.", damage.damaged_bytes
    )
    yield collector.one_gauge(
        "ledgermq_store_damaged_ranges", "Commit-log ranges known corrupt and refused.", len(damage.ranges())
    )
    yield collector.one_counter(
        "ledgermq_store_scrubbed_bytes",
        "Sealed commit-log bytes re-read by the scrub.",
        store.scrubber.scrubbed_bytes if store.scrubber else 0,
    )
    qstats = store.queues.stats
    for metric, doc, value in (
        ("ledgermq_store_queue_rebuilds", "Consume queues re-derived from the commit log.", qstats.queue_rebuilds),
        (
            "ledgermq_store_queue_units_rewritten",
            "Consume-queue units that disagreed with their record and were rewritten.",
            qstats.units_rewritten,
        ),
        (
            "ledgermq_store_queue_placeholders",
            "Consume-queue units written for records lost in damaged ranges (refused until repaired).",
            qstats.placeholders,
        ),
        (
            "ledgermq_store_index_rebuilds",
            "Index files that failed their checks and were dropped and rebuilt.",
            store.index.files_dropped if store.index is not None else 0,
        ),
    ):
        yield collector.one_counter(metric, doc, value)


def _disk_ratio(path: Path) -> float:
    """Used fraction of the partition that holds (or will hold) ``path``; -1 if unknown."""
    while not path.exists() and path.parent != path:
        path = path.parent
    try:
        return disk_usage_ratio(path)
    except OSError:
        return -1.0
