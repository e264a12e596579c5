"""The metadata change log in-process: round trips, replay over a snapshot that already
holds the changes, torn and damaged lines, size-triggered compaction, failed appends, and
a clean close that leaves a snapshot the old loader (plain ``load_json``) reads whole."""

from __future__ import annotations

import asyncio
import errno
import shutil
from pathlib import Path

import pytest

from ledgermq import failpoints
from ledgermq.broker.json_file import load_json
from ledgermq.broker.metadata_log import Change, MetadataLogSettings, encode_line, read_current
from ledgermq.broker.offsets import ConsumerOffsetManager
from ledgermq.broker.subscriptions import SubscriptionGroupConfig, SubscriptionGroupManager
from ledgermq.broker.topics import TopicConfigManager
from ledgermq.clock import SYSTEM_CLOCK
from ledgermq.errors import ConfigError
from ledgermq.protocol import fastjson
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.route import TopicConfig
from tests.broker.harness import broker_config, running_broker
from tests.broker.test_admin import create_topic

SMALL = MetadataLogSettings(compact_min_bytes=4096)


def _topics(path: Path, settings: MetadataLogSettings | None = None) -> TopicConfigManager:
    topics = TopicConfigManager(path, broker_config(10911), SYSTEM_CLOCK, settings)
    topics.load()
    return topics


def _enospc() -> None:
    raise OSError(errno.ENOSPC, "No space left on device (failpoint)")


def test_topics_round_trip_with_data_version(tmp_path: Path) -> None:
    path = tmp_path / "topics.json"
    topics = _topics(path)
    topics.persist()  # as the broker does at start
    for i in range(20):
        topics.update(TopicConfig(f"T{i}", 4, 4))
    topics.update(TopicConfig("T3", 8, 8, perm=4))
    assert topics.delete("T5")
    assert path.with_name("topics.json.changes").stat().st_size > 0  # in the log, not the snapshot
    again = _topics(path)
    assert again.table == topics.table
    assert again.data_version == topics.data_version  # the last change was a delete: its version counts
    assert "T5" not in again.table and again.table["T3"].perm == 4


def test_groups_and_offsets_round_trip(tmp_path: Path) -> None:
    groups = SubscriptionGroupManager(tmp_path / "subscriptionGroup.json", SYSTEM_CLOCK, True)
    groups.load()
    groups.update(SubscriptionGroupConfig("g1", retry_max_times=3))
    assert groups.find("auto") is not None  # auto-created: recorded too
    assert groups.delete("g1")
    groups.update(SubscriptionGroupConfig("g2", retry_queue_nums=2))
    offsets = ConsumerOffsetManager(tmp_path / "consumerOffset.json")
    offsets.load()
    offsets.commit("g", "T", 0, 5)
    offsets.commit("g", "T", 1, 9)
    offsets.persist()
    offsets.commit("g", "T", 0, 6)
    offsets.commit("h", "T", 0, 1)
    offsets.persist()

    groups2 = SubscriptionGroupManager(tmp_path / "subscriptionGroup.json", SYSTEM_CLOCK, True)
    groups2.load()
    assert groups2.table == groups.table and groups2.data_version == groups.data_version
    offsets2 = ConsumerOffsetManager(tmp_path / "consumerOffset.json")
    offsets2.load()
    assert offsets2.table == {"T@g": {0: 6, 1: 9}, "T@h": {0: 1}}


def test_offset_persist_records_only_the_queues_that_changed(tmp_path: Path) -> None:
    offsets = ConsumerOffsetManager(tmp_path / "consumerOffset.json")
    offsets.load()
    for q in range(1000):
        offsets.commit("g", f"T{q % 10}", q, q)
    offsets.persist()
    size = offsets.log.log_size
    offsets.commit("g", "T7", 7, 70)
    offsets.persist()
    tail = offsets.log.changes_path.read_bytes()[size:]
    assert tail == encode_line(Change("merge", "T7@g", {7: 70}))
    offsets.persist()  # nothing changed: nothing written
    assert offsets.log.log_size == size + len(tail)


def test_removed_then_recommitted_offsets_replay_without_the_old_queues(tmp_path: Path) -> None:
    offsets = ConsumerOffsetManager(tmp_path / "consumerOffset.json")
    offsets.load()
    offsets.commit("g", "T", 0, 5)
    offsets.commit("g", "T", 1, 5)
    offsets.persist()
    assert offsets.remove("T@g")
    offsets.commit("g", "T", 2, 8)
    offsets.persist()
    again = ConsumerOffsetManager(tmp_path / "consumerOffset.json")
    again.load()
    assert again.table == {"T@g": {2: 8}}


def test_replay_over_a_snapshot_that_already_holds_the_changes(tmp_path: Path) -> None:
    """A crash after a compaction wrote the snapshot but before it emptied the log."""
    path = tmp_path / "topics.json"
    topics = _topics(path)
    for i in range(10):
        topics.update(TopicConfig(f"T{i}", 2, 2))
    topics.delete("T4")
    topics.update(TopicConfig("T4", 3, 3))
    topics.delete("T6")
    stale = tmp_path / "log-before-compaction"
    shutil.copy(topics.log.changes_path, stale)
    topics.persist()
    assert topics.log.changes_path.stat().st_size == 0
    shutil.copy(stale, topics.log.changes_path)  # the truncation never happened
    again = _topics(path)
    assert again.table == topics.table and again.data_version == topics.data_version


def test_a_torn_last_line_is_dropped_and_cut_off(tmp_path: Path) -> None:
    path = tmp_path / "topics.json"
    topics = _topics(path)
    topics.update(TopicConfig("Kept", 2, 2))
    line = encode_line(Change("put", "Torn", TopicConfig("Torn").to_json(), {"counter": 99, "timestamp": 1}))
    with topics.log.changes_path.open("ab") as f:
        f.write(line[: len(line) // 2])  # a write cut short by a crash
    again = _topics(path)
    assert "Kept" in again.table and "Torn" not in again.table
    assert again.data_version == topics.data_version
    again.update(TopicConfig("After", 1, 1))  # appended after the cut, not after the garbage
    third = _topics(path)
    assert {"Kept", "After"} <= third.table.keys() and "Torn" not in third.table


def test_a_complete_last_line_with_a_bad_crc_is_a_torn_write(tmp_path: Path) -> None:
    path = tmp_path / "topics.json"
    topics = _topics(path)
    topics.update(TopicConfig("Kept", 2, 2))
    with topics.log.changes_path.open("ab") as f:
        f.write(b"\0" * 40 + b"\n")  # a power loss: the size grew, the data did not arrive
    assert "Kept" in _topics(path).table


def test_a_damaged_line_in_the_middle_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "topics.json"
    topics = _topics(path)
    for name in ("A", "B", "C"):
        topics.update(TopicConfig(name, 1, 1))
    data = bytearray(topics.log.changes_path.read_bytes())
    second = data.index(b"\n") + 1
    data[second + 20] ^= 0x01  # flip a bit inside line 2
    topics.log.changes_path.write_bytes(bytes(data))
    with pytest.raises(ConfigError, match=r"topics\.json\.changes line 2 is damaged"):
        _topics(path)


def test_compaction_is_triggered_by_size_and_keeps_every_topic(tmp_path: Path) -> None:
    path = tmp_path / "topics.json"
    topics = _topics(path, SMALL)
    topics.persist()
    compactions = 0
    for i in range(400):
        before = topics.log.log_size
        topics.update(TopicConfig(f"T{i:04d}", 4, 4))
        if topics.log.log_size < before:
            compactions += 1
            snapshot_size = path.stat().st_size
        # never more log than max(compact_min_bytes, snapshot): O(1) amortised per change
        assert topics.log.log_size < max(SMALL.compact_min_bytes, path.stat().st_size) + 400
    assert compactions >= 3
    assert snapshot_size > SMALL.compact_min_bytes  # the threshold grew with the snapshot
    doc = load_json(path)
    assert isinstance(doc, dict) and "T0000" in doc["topicConfigTable"]
    assert _topics(path, SMALL).table == topics.table


def test_a_failed_compaction_does_not_fail_the_change(tmp_path: Path) -> None:
    path = tmp_path / "topics.json"
    topics = _topics(path, SMALL)
    topics.persist()
    with failpoints.armed("atomic_file.before_fsync", _enospc):
        for i in range(60):  # compaction is due several times, and fails each time
            topics.update(TopicConfig(f"T{i}", 4, 4))
    assert topics.log.log_size > SMALL.compact_min_bytes
    assert "T59" not in (load_json(path) or {})["topicConfigTable"]
    for i in range(60):  # the disk has room again: a retry, a quarter threshold later, compacts
        topics.update(TopicConfig(f"Later{i}", 1, 1))
    assert "T59" in (load_json(path) or {})["topicConfigTable"]
    assert _topics(path, SMALL).table == topics.table


def test_a_failed_append_is_cut_back_off_the_log(tmp_path: Path) -> None:
    path = tmp_path / "topics.json"
    topics = _topics(path)
    topics.update(TopicConfig("A", 1, 1))

    def half_written_then_full() -> None:
        with topics.log.changes_path.open("ab") as f:
            f.write(b'0badc0de {"op":"put","ke')
        _enospc()

    with failpoints.armed("metadata_log.before_append", half_written_then_full), pytest.raises(OSError):
        topics.update(TopicConfig("B", 1, 1))
    topics.update(TopicConfig("C", 1, 1))  # the disk has room again
    again = _topics(path)
    assert {"A", "C"} <= again.table.keys()  # B was never acknowledged; no damaged middle line


def test_close_leaves_a_complete_snapshot_for_the_old_loader(tmp_path: Path) -> None:
    path = tmp_path / "topics.json"
    topics = _topics(path)
    topics.persist()  # as the broker does at start: the system topics are in the file
    for i in range(30):
        topics.update(TopicConfig(f"T{i}", 4, 4))
    topics.delete("T7")
    current = read_current(path, "topicConfigTable")
    topics.close()
    assert topics.log.changes_path.stat().st_size == 0
    doc = load_json(path)  # no change log: what a Java broker reads
    assert isinstance(doc, dict)
    assert doc == current
    assert doc["dataVersion"] == topics.data_version.to_json()
    assert set(doc["topicConfigTable"]) == set(topics.table)


def test_close_of_a_manager_never_loaded_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "topics.json"
    topics = _topics(path)
    topics.update(TopicConfig("Kept", 1, 1))
    topics.close()
    never = TopicConfigManager(path, broker_config(10911), SYSTEM_CLOCK)
    never.close()  # e.g. a broker whose start failed before loading
    assert "Kept" in _topics(path).table


def test_a_broker_stopped_cleanly_leaves_complete_json_files_and_empty_logs(tmp_path: Path) -> None:
    """What a Java broker taking over this store directory reads: the files alone."""
    group = fastjson.dumps({"groupName": "cg", "retryMaxTimes": 5})

    async def main() -> None:
        async with running_broker(tmp_path) as h:
            for i in range(5):
                assert await create_topic(h, f"Moved{i}") == ResponseCode.SUCCESS
            assert (await h.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, group)).code == 0
            header = {"consumerGroup": "cg", "topic": "Moved1", "queueId": 2, "commitOffset": 42}
            assert (await h.call(RequestCode.UPDATE_CONSUMER_OFFSET, header)).code == ResponseCode.SUCCESS

    asyncio.run(main())
    config = tmp_path / "config"
    names = ("topics.json", "subscriptionGroup.json", "consumerOffset.json")
    for name in names:
        assert (config / f"{name}.changes").stat().st_size == 0, name
    topics, groups, offsets = (load_json(config / name) for name in names)
    assert {f"Moved{i}" for i in range(5)} <= topics["topicConfigTable"].keys()
    assert groups["subscriptionGroupTable"]["cg"]["retryMaxTimes"] == 5
    assert offsets["offsetTable"]["Moved1@cg"] == {"2": 42}
