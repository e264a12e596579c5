"""Settings of a DLedger store, and where its files live (DLedgerConfig's layout).

``<store_base_dir>/dledger-<self_id>/`` holds ``data/`` (entries), ``index/`` (32-byte
units), ``currterm`` (term and vote) and ``checkpoint`` (committed index). RocketMQ sets
store_base_dir to storePathRootDir and may move ``data/`` elsewhere with
storePathDLedgerCommitLog (``data_store_path`` here).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ledgermq.config import StoreConfig
from ledgermq.errors import ConfigError
from ledgermq.store.dledger.entry import BODY_OFFSET, INDEX_UNIT_SIZE, MIN_BLANK_LEN

DEFAULT_DATA_FILE_SIZE = 1024 * 1024 * 1024  # mappedFileSizeForEntryData (RocketMQ passes mappedFileSizeCommitLog)
DEFAULT_INDEX_FILE_SIZE = INDEX_UNIT_SIZE * 5 * 1024 * 1024  # mappedFileSizeForEntryIndex: 5 Mi units
DEFAULT_RECOVER_LAST_FILES = 3  # DLedgerMmapFileStore.recover starts at mappedFiles.size() - 3


@dataclass(frozen=True, slots=True)
class DLedgerStoreConfig:
    store_base_dir: str
    self_id: str = "n0"
    data_store_path: str | None = None
    data_file_size: int = DEFAULT_DATA_FILE_SIZE
    index_file_size: int = DEFAULT_INDEX_FILE_SIZE
    # Recovery validates entries from this many data files before the last (0: all of them).
    recover_last_files: int = DEFAULT_RECOVER_LAST_FILES
    check_body_crc: bool = True
    # Where the first data file starts in an empty store: RocketMQ's dividedCommitlogOffset
    # when a broker switches to DLedger with an old commit log in place.
    first_data_offset: int = 0
    # Damage recovery finds (rot with valid entries after it, a missing or short data file, an
    # entry below the checkpoint's committed index) is cut and marked for repair by a Raft
    # member (docs/dledger.md, "Disks that lie") instead of stopping start-up.
    repair_damage: bool = False
    # Keep a digest (per-64 KiB CRC32s) of every sealed data file in ``default_path/digests``
    # and trust it at start: recovery then walks only the last files, the one holding the
    # committed entry and after, and every earlier file without a digest (or with damage
    # recorded in ``default_path/damagedRanges``); the scrub re-reads the rest in the
    # background (store/dledger/scrub.py). Without it, files before the last
    # ``recover_last_files`` are trusted as DLedger does.
    digests: bool = False

    def __post_init__(self) -> None:
        if not self.self_id or "/" in self.self_id:
            raise ConfigError(f"dLegerSelfId {self.self_id!r} cannot name a directory")
        if self.data_file_size < BODY_OFFSET + 2 * MIN_BLANK_LEN:
            raise ConfigError(f"data_file_size {self.data_file_size} is too small for one entry")
        if self.index_file_size <= 0 or self.index_file_size % INDEX_UNIT_SIZE:
            raise ConfigError(f"index_file_size {self.index_file_size} is not a multiple of {INDEX_UNIT_SIZE}")
        if self.first_data_offset < 0 or self.first_data_offset % self.data_file_size:
            raise ConfigError(f"first_data_offset {self.first_data_offset} is not a multiple of data_file_size")
        if self.recover_last_files < 0:
            raise ConfigError("recover_last_files must be >= 0")

    @property
    def default_path(self) -> Path:
        """DLedgerConfig.getDefaultPath: ``<storeBaseDir>/dledger-<selfId>``."""
        return Path(self.store_base_dir) / f"dledger-{self.self_id}"

    @property
    def data_dir(self) -> Path:
        return Path(self.data_store_path) if self.data_store_path else self.default_path / "data"

    @property
    def index_dir(self) -> Path:
        return self.default_path / "index"

    @property
    def digest_dir(self) -> Path:
        """Outside the data directory (DLedger maps every file it finds there)."""
        return self.default_path / "digests"

    @property
    def damage_path(self) -> Path:
        return self.default_path / "damagedRanges"

    @property
    def max_body_size(self) -> int:
        """The largest body an empty data file takes (entry plus the blank it must leave)."""
        return self.data_file_size - BODY_OFFSET - MIN_BLANK_LEN


def dledger_store_config(config: StoreConfig) -> DLedgerStoreConfig:
    """The DLedger files of a store in DLedger mode (as DLedgerCommitLog configures DLedger:
    base dir storePathRootDir, data files of mappedFileSizeCommitLog). Unlike DLedger, every
    data file is verified: at start the ones a crash may have left unverified and those
    without a digest, the others by the scrub; damage is repaired from the group rather
    than refused."""
    return DLedgerStoreConfig(
        store_base_dir=config.root_dir,
        self_id=config.dleger_self_id,
        data_store_path=config.store_path_dleger_commit_log or None,
        data_file_size=config.mapped_file_size_commitlog,
        recover_last_files=DEFAULT_RECOVER_LAST_FILES,
        repair_damage=True,
        digests=True,
    )
