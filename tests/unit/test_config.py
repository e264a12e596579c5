"""Store settings come from RocketMQ .properties keys; bad values fail naming the key."""

from __future__ import annotations

import pytest

from ledgermq.config import (
    BrokerRole,
    FlushDiskType,
    StoreConfig,
    config_from_properties,
    known_keys,
    parse_properties,
)
from ledgermq.errors import ConfigError

BROKER_CONF = """
# a RocketMQ broker.conf
brokerClusterName = DefaultCluster
brokerName=broker-a
storePathRootDir=/tmp/ledgermq-test-store
mappedFileSizeCommitLog: 1048576
flushDiskType=SYNC_FLUSH
brokerRole=SLAVE
checkCRCOnRecover=false
deleteWhen=04;16
messageDelayLevel=1s 2m \\
  3h
"""


def test_reads_rocketmq_keys_and_leaves_others_alone() -> None:
    props = parse_properties(BROKER_CONF)
    assert props["brokerName"] == "broker-a"
    assert props["messageDelayLevel"] == "1s 2m 3h"
    cfg = config_from_properties(StoreConfig, props)
    assert cfg.root_dir == "/tmp/ledgermq-test-store"
    assert cfg.mapped_file_size_commitlog == 1048576
    assert cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert cfg.broker_role is BrokerRole.SLAVE and cfg.is_slave
    assert cfg.check_crc_on_recover is False
    assert cfg.delay_levels_ms() == [1000, 120_000, 3 * 3_600_000]
    assert "brokerName" not in known_keys(StoreConfig)
    assert "mappedFileSizeCommitLog" in known_keys(StoreConfig)


def test_defaults_match_rocketmq_4_9_7() -> None:
    cfg = StoreConfig()
    assert cfg.mapped_file_size_commitlog == 1 << 30
    assert cfg.mapped_file_size_consume_queue == 300_000 * 20
    assert cfg.flush_interval_commitlog_ms == 500 and cfg.sync_flush_timeout_ms == 5000
    assert cfg.file_reserved_time_hours == 72 and cfg.delete_when == "04"
    assert cfg.max_hash_slot_num == 5_000_000 and cfg.max_index_num == 20_000_000
    assert len(cfg.delay_levels_ms()) == 18


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("mappedFileSizeCommitLog", "big"),
        ("flushDiskType", "SOMETIMES"),
        ("checkCRCOnRecover", "yes"),
        ("messageDelayLevel", "1x"),
        ("deleteWhen", "25"),
        ("mappedFileSizeConsumeQueue", "30"),
    ],
)
def test_bad_values_name_their_key(key: str, value: str) -> None:
    with pytest.raises(ConfigError) as err:
        config_from_properties(StoreConfig, {key: value})
    assert key in str(err.value)
