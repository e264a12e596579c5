"""Configuration as frozen dataclasses, read from RocketMQ ``.properties`` key names.

Each field carries its RocketMQ key in its metadata, so one loader serves every config
class: it converts strings by the field's type and names the key in every error.
"""

from __future__ import annotations

import dataclasses
import enum
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, get_type_hints

from ledgermq.errors import ConfigError


class FlushDiskType(enum.Enum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


class BrokerRole(enum.Enum):
    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


_SLAVE = BrokerRole.SLAVE  # ``is_slave`` runs twice per send: a member through its class is a lookup


def key(name: str, default: Any, **kw: Any) -> Any:
    """A dataclass field bound to a RocketMQ config key."""
    return field(default=default, metadata={"key": name}, **kw)


DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """Message-store settings (RocketMQ ``MessageStoreConfig``), defaults as in 4.9.7."""

    root_dir: str = key("storePathRootDir", str(Path.home() / "store"))
    commitlog_dir: str = key("storePathCommitLog", "")
    mapped_file_size_commitlog: int = key("mappedFileSizeCommitLog", 1024 * 1024 * 1024)
    mapped_file_size_consume_queue: int = key("mappedFileSizeConsumeQueue", 300_000 * 20)
    flush_disk_type: FlushDiskType = key("flushDiskType", FlushDiskType.ASYNC_FLUSH)
    broker_role: BrokerRole = key("brokerRole", BrokerRole.ASYNC_MASTER)
    flush_interval_commitlog_ms: int = key("flushIntervalCommitLog", 500)
    flush_interval_consume_queue_ms: int = key("flushIntervalConsumeQueue", 1000)
    sync_flush_timeout_ms: int = key("syncFlushTimeout", 5000)
    file_reserved_time_hours: float = key("fileReservedTime", 72.0)
    delete_when: str = key("deleteWhen", "04")
    disk_max_used_space_ratio: int = key("diskMaxUsedSpaceRatio", 75)
    clean_resource_interval_ms: int = key("cleanResourceInterval", 10_000)
    delete_commitlog_files_interval_ms: int = key("deleteCommitLogFilesInterval", 100)
    destroy_mapped_file_interval_forcibly_ms: int = key("destroyMapedFileIntervalForcibly", 120_000)
    # Past the forcible ratio (85% disk use) retention deletes files whatever their age
    # (RocketMQ's cleanImmediately); false keeps fileReservedTime even then.
    clean_file_forcibly_enable: bool = key("cleanFileForciblyEnable", True)
    max_message_size: int = key("maxMessageSize", 4 * 1024 * 1024)
    check_crc_on_recover: bool = key("checkCRCOnRecover", True)
    message_index_enable: bool = key("messageIndexEnable", True)
    max_hash_slot_num: int = key("maxHashSlotNum", 5_000_000)
    max_index_num: int = key("maxIndexNum", 20_000_000)
    max_transfer_bytes_in_memory: int = key("maxTransferBytesOnMessageInMemory", 256 * 1024)
    max_transfer_count_in_memory: int = key("maxTransferCountOnMessageInMemory", 32)
    max_transfer_bytes_on_disk: int = key("maxTransferBytesOnMessageInDisk", 64 * 1024)
    max_transfer_count_on_disk: int = key("maxTransferCountOnMessageInDisk", 8)
    access_message_in_memory_max_ratio: int = key("accessMessageInMemoryMaxRatio", 40)
    message_delay_level: str = key("messageDelayLevel", DEFAULT_DELAY_LEVELS)
    # DLedger mode (MessageStoreConfig's dLeger* keys, spelled as RocketMQ spells them): the
    # commit log is the Raft log under <root>/dledger-<selfId>/ (store/dledger/).
    enable_dleger_commit_log: bool = key("enableDLegerCommitLog", False)
    dleger_group: str = key("dLegerGroup", "")
    dleger_peers: str = key("dLegerPeers", "")
    dleger_self_id: str = key("dLegerSelfId", "")
    store_path_dleger_commit_log: str = key("storePathDLedgerCommitLog", "")
    # ledgermq's own timing knobs (RocketMQ cannot set DLedger's from the broker config):
    # the leader's heartbeat (the Raft tick) and the base election timeout; a follower
    # campaigns after a random [T, 2T) without hearing from its leader.
    dleger_heartbeat_interval_ms: int = key("dLegerHeartBeatIntervalMs", 100)
    dleger_election_timeout_ms: int = key("dLegerElectionTimeoutMs", 800)
    # ledgermq's own: consume-queue files share at most this many open descriptors (fewer
    # under a low open-file limit); see store/open_files.py.
    max_open_consume_queue_files: int = key("maxOpenConsumeQueueFiles", 1024)
    # ledgermq's own: the background scrub re-reads sealed commit-log segments (digests,
    # records) at most this fast, a full pass at most this often (store/scrub.py).
    store_scrub_enable: bool = key("storeScrubEnable", True)
    store_scrub_bytes_per_second: int = key("storeScrubBytesPerSecond", 32 * 1024 * 1024)
    store_scrub_interval_seconds: int = key("storeScrubIntervalSeconds", 3600)
    # Timer messages (RocketMQ 5's MessageStoreConfig timer* keys, RIP-43; docs/timers.md)
    timer_wheel_enable: bool = key("timerWheelEnable", True)
    timer_precision_ms: int = key("timerPrecisionMs", 1000)  # rounded down to 100/200/500/1000
    timer_max_delay_sec: int = key("timerMaxDelaySec", 3600 * 24 * 3)
    timer_roll_window_slot: int = key("timerRollWindowSlot", 3600 * 24 * 2)
    timer_flush_interval_ms: int = key("timerFlushIntervalMs", 1000)
    timer_intercept_delay_level: bool = key("timerInterceptDelayLevel", False)
    mapped_file_size_timer_log: int = key("mappedFileSizeTimerLog", 100 * 1024 * 1024)

    @property
    def commitlog_path(self) -> Path:
        return Path(self.commitlog_dir) if self.commitlog_dir else Path(self.root_dir) / "commitlog"

    @property
    def consume_queue_path(self) -> Path:
        return Path(self.root_dir) / "consumequeue"

    @property
    def index_path(self) -> Path:
        return Path(self.root_dir) / "index"

    @property
    def is_slave(self) -> bool:
        return self.broker_role is _SLAVE

    def delay_levels_ms(self) -> list[int]:
        """Delay of each level (index 0 = level 1) in milliseconds."""
        return parse_delay_levels(self.message_delay_level)

    def __post_init__(self) -> None:
        if self.dleger_heartbeat_interval_ms <= 0:
            raise ConfigError("dLegerHeartBeatIntervalMs must be positive")
        if self.dleger_election_timeout_ms < 3 * self.dleger_heartbeat_interval_ms:
            raise ConfigError("dLegerElectionTimeoutMs must be at least 3 times dLegerHeartBeatIntervalMs")
        if self.mapped_file_size_commitlog < 4096:
            raise ConfigError("mappedFileSizeCommitLog must be at least 4096")
        if self.mapped_file_size_consume_queue % 20 or self.mapped_file_size_consume_queue <= 0:
            raise ConfigError("mappedFileSizeConsumeQueue must be a positive multiple of 20")
        if self.max_open_consume_queue_files < 8:
            raise ConfigError("maxOpenConsumeQueueFiles must be at least 8")
        if not 10 <= self.disk_max_used_space_ratio <= 95:
            raise ConfigError("diskMaxUsedSpaceRatio must be within 10..95")
        if self.max_hash_slot_num <= 0 or self.max_index_num <= 1:
            raise ConfigError("maxHashSlotNum and maxIndexNum must be positive")
        parse_delay_levels(self.message_delay_level)
        parse_delete_when(self.delete_when)
        if self.timer_precision_ms <= 0:
            raise ConfigError("timerPrecisionMs must be positive")
        if self.timer_max_delay_sec <= 0 or self.timer_flush_interval_ms <= 0:
            raise ConfigError("timerMaxDelaySec and timerFlushIntervalMs must be positive")
        if self.mapped_file_size_timer_log < 4096 or self.mapped_file_size_timer_log % 4096:
            raise ConfigError("mappedFileSizeTimerLog must be a positive multiple of 4096")


_UNITS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(text: str) -> list[int]:
    levels: list[int] = []
    for token in text.split():
        unit = _UNITS_MS.get(token[-1:])
        if unit is None or not token[:-1].isdigit():
            raise ConfigError(f"messageDelayLevel: {token!r} is not <number><s|m|h|d>")
        levels.append(int(token[:-1]) * unit)
    if not levels:
        raise ConfigError("messageDelayLevel: no levels")
    return levels


def parse_delete_when(text: str) -> list[int]:
    """``deleteWhen`` is one or more hours of the day separated by ';' (e.g. "04;05")."""
    hours: list[int] = []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        if not part.isdigit() or not 0 <= int(part) <= 23:
            raise ConfigError(f"deleteWhen: {part!r} is not an hour 00..23")
        hours.append(int(part))
    return hours


def parse_properties(text: str) -> dict[str, str]:
    """Parse a Java ``.properties`` file: ``key=value`` or ``key: value``, '#'/'!' comments."""
    props: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\"):
            pending = line[:-1]
            continue
        for i, ch in enumerate(line):
            if ch in "=:":
                props[line[:i].strip()] = line[i + 1 :].strip()
                break
        else:
            props[line] = ""
    return props


T = TypeVar("T")


def _convert(key_name: str, typ: Any, raw: str) -> Any:
    try:
        if typ is bool:
            low = raw.strip().lower()
            if low not in ("true", "false"):
                raise ValueError("expected true or false")
            return low == "true"
        if typ is int:
            return int(raw.strip())
        if typ is float:
            return float(raw.strip())
        if isinstance(typ, type) and issubclass(typ, enum.Enum):
            return typ(raw.strip())
        return os.path.expanduser(raw.strip()) if key_name.startswith("storePath") else raw
    except ValueError as exc:
        raise ConfigError(f"{key_name}={raw!r}: {exc}") from exc


def config_from_properties(cls: type[T], props: Mapping[str, str], **overrides: Any) -> T:
    """Build ``cls`` from RocketMQ keys; keys it does not know are left for other configs."""
    hints = get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        name = f.metadata.get("key")
        if name and name in props:
            values[f.name] = _convert(name, hints[f.name], props[name])
    values.update(overrides)
    return cls(**values)


def known_keys(cls: type) -> set[str]:
    return {f.metadata["key"] for f in dataclasses.fields(cls) if "key" in f.metadata}
