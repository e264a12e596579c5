"""A slave (or DLedger follower) adopting its master's topics while its disk is full: the
table is served from memory, and the next sync writes the file again instead of skipping
it because the version already matches (the DLedger chaos run found a follower that lost a
synced topic when it was killed after such a failed write)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from ledgermq import failpoints
from ledgermq.broker.topics import TopicConfigManager
from ledgermq.clock import SYSTEM_CLOCK
from ledgermq.protocol.route import DataVersion, TopicConfig
from tests.broker.harness import broker_config


def _enospc() -> None:
    raise OSError(errno.ENOSPC, "No space left on device (failpoint)")


def test_a_failed_write_of_synced_topics_is_written_by_the_next_sync(tmp_path: Path) -> None:
    path = tmp_path / "topics.json"
    topics = TopicConfigManager(path, broker_config(10911), SYSTEM_CLOCK)
    topics.load()
    master_table = {"T": TopicConfig("T", 4, 4, 6)}
    version = DataVersion(timestamp=123, counter=7)
    failpoints.arm("atomic_file.before_fsync", _enospc)
    try:
        with pytest.raises(OSError):
            topics.replace_all(master_table, version)
    finally:
        failpoints.disarm("atomic_file.before_fsync")
    assert topics.get("T") is not None  # served from memory meanwhile
    topics.replace_all(master_table, version)  # the next sync: same version, written now
    again = TopicConfigManager(path, broker_config(10911), SYSTEM_CLOCK)
    again.load()
    assert again.get("T") is not None and again.data_version == version
