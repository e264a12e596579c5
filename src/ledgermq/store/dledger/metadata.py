"""The two small DLedger state files, in DLedger's names and java.util.Properties text.

``<default_path>/currterm`` (MemberState.persistTerm)::

    currTerm=3
    voteLeader=n1        (empty when this node voted for nobody in the term)

``<default_path>/checkpoint`` (DLedgerMmapFileStore.persistCheckPoint)::

    endIndex=41
    committedIndex=40

DLedger writes ``key=value`` lines through IOUtils.string2File (temp file, a ``.bak`` of
the previous content, delete, rename: a crash between delete and rename loses the file).
We write with ``atomic_file`` (temp, fsync, rename, fsync of the directory), so a
reader sees the old or the new content, never neither. We read strictly: a file that is
present but does not parse, or lacks a key DLedger always writes, stops start-up with an
error naming the file, because a term or vote silently reset to 0 lets a node vote twice
in one term, and a lost committed index hides lost data.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from ledgermq.atomic_file import fsync_dir, temp_files, write_atomic
from ledgermq.errors import StoreError
from ledgermq.failpoints import failpoint

log = logging.getLogger(__name__)

TERM_FILE = "currterm"  # MemberState.TERM_PERSIST_FILE
TERM_KEY = "currTerm"  # MemberState.TERM_PERSIST_KEY_TERM
VOTE_KEY = "voteLeader"  # MemberState.TERM_PERSIST_KEY_VOTE_FOR
CHECKPOINT_FILE = "checkpoint"  # DLedgerMmapFileStore.CHECK_POINT_FILE
REPAIR_FILE = "repair"  # ledgermq's own: present while the log is being repaired
REPAIR_UNTIL_KEY = "repairUntilIndex"
REPAIR_TERM_KEY = "repairLastTerm"
FIRST_BAD_KEY = "firstBadIndex"
END_INDEX_KEY = "endIndex"
COMMITTED_INDEX_KEY = "committedIndex"


class MetadataError(StoreError):
    """A DLedger state file is present but unreadable; the message names it."""


@dataclass(frozen=True, slots=True)
class TermState:
    current_term: int = 0
    vote_for: str | None = None


@dataclass(frozen=True, slots=True)
class LedgerCheckpoint:
    end_index: int = -1
    committed_index: int = -1


def format_properties(pairs: list[tuple[str, str]]) -> str:
    """IOUtils.properties2String: ``key=value\\n`` per pair."""
    for key, value in pairs:
        if any(c in key + value for c in "\\\n\r=:#!") or key != key.strip():
            raise ValueError(f"{key}={value} cannot be written without escapes")
    return "".join(f"{key}={value}\n" for key, value in pairs)


def parse_properties(text: str, path: Path) -> dict[str, str]:
    """The subset of java.util.Properties DLedger produces: ``key=value`` (or ``key:value``)
    lines, ``#``/``!`` comments and blank lines. Escapes and continuations are refused."""
    out: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        if "\\" in line:
            raise MetadataError(f"{path}: line {number} uses an escape this reader does not take: {raw!r}")
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut <= 0:
            raise MetadataError(f"{path}: line {number} is not key=value: {raw!r}")
        out[line[:cut].strip()] = line[cut + 1 :].strip()
    return out


def _read(path: Path) -> dict[str, str] | None:
    if not path.exists():
        if leftovers := temp_files(path):
            log.warning("%s is missing but %s exists: a first write was interrupted", path, leftovers[0].name)
        return None
    try:
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise MetadataError(f"{path}: cannot read: {exc}") from exc
    return parse_properties(text, path)


def _int(props: dict[str, str], key: str, path: Path, low: int) -> int:
    if key not in props:
        raise MetadataError(f"{path}: no {key} (found {sorted(props)}); refusing to guess it")
    value = props[key]
    try:
        number = int(value)
    except ValueError:
        raise MetadataError(f"{path}: {key}={value!r} is not an integer") from None
    if number < low or number >= 1 << 63:
        raise MetadataError(f"{path}: {key}={number} is out of range")
    return number


def load_term_state(directory: Path) -> TermState:
    """The persisted term and vote; a fresh node (no file) is in term 0 with no vote."""
    path = directory / TERM_FILE
    props = _read(path)
    if props is None:
        return TermState()
    term = _int(props, TERM_KEY, path, 0)
    vote = props.get(VOTE_KEY, "")
    return TermState(term, vote or None)


def save_term_state(directory: Path, state: TermState) -> None:
    """Persist before answering a vote or acting in a new term (Raft's stable storage)."""
    if state.current_term < 0:
        raise ValueError(f"term {state.current_term} < 0")
    text = format_properties([(TERM_KEY, str(state.current_term)), (VOTE_KEY, state.vote_for or "")])
    directory.mkdir(parents=True, exist_ok=True)
    failpoint("dledger.before_term_write")
    write_atomic(directory / TERM_FILE, text.encode())


def load_checkpoint(directory: Path) -> LedgerCheckpoint | None:
    path = directory / CHECKPOINT_FILE
    props = _read(path)
    if props is None:
        return None
    return LedgerCheckpoint(_int(props, END_INDEX_KEY, path, -1), _int(props, COMMITTED_INDEX_KEY, path, -1))


def save_checkpoint(directory: Path, checkpoint: LedgerCheckpoint) -> None:
    text = format_properties(
        [(END_INDEX_KEY, str(checkpoint.end_index)), (COMMITTED_INDEX_KEY, str(checkpoint.committed_index))]
    )
    directory.mkdir(parents=True, exist_ok=True)
    failpoint("dledger.before_checkpoint_write")
    write_atomic(directory / CHECKPOINT_FILE, text.encode())


@dataclass(frozen=True, slots=True)
class RepairMarker:
    """A log that lost entries (rot or a missing file found by recovery) is being repaired
    from the leader: until its entries reach ``until`` again (DLedger index) the member must
    not act as if it held them (docs/dledger.md, "Disks that lie"). ``last_term`` is the term
    of the last entry found (-1 unknown); ``first_bad`` the first entry that was lost."""

    until: int
    last_term: int
    first_bad: int


def load_repair(directory: Path) -> RepairMarker | None:
    path = directory / REPAIR_FILE
    props = _read(path)
    if props is None:
        return None
    return RepairMarker(
        _int(props, REPAIR_UNTIL_KEY, path, 0),
        _int(props, REPAIR_TERM_KEY, path, -1),
        _int(props, FIRST_BAD_KEY, path, 0),
    )


def save_repair(directory: Path, marker: RepairMarker) -> None:
    """Written (atomically, durably) before recovery cuts anything, so a crash mid-repair
    still knows what the log had."""
    text = format_properties(
        [
            (REPAIR_UNTIL_KEY, str(marker.until)),
            (REPAIR_TERM_KEY, str(marker.last_term)),
            (FIRST_BAD_KEY, str(marker.first_bad)),
        ]
    )
    directory.mkdir(parents=True, exist_ok=True)
    write_atomic(directory / REPAIR_FILE, text.encode())


def clear_repair(directory: Path) -> None:
    path = directory / REPAIR_FILE
    if path.exists():
        path.unlink()
        fsync_dir(directory)


LOG_START_FILE = "logstart"  # ledgermq's own: where retention left the log's beginning
FIRST_INDEX_KEY = "firstIndex"
FIRST_POS_KEY = "firstDataPos"
DATA_BEGIN_KEY = "dataBeginPos"


@dataclass(frozen=True, slots=True)
class LogStart:
    """Where the log begins, as only retention may move it: ``first_index`` is the first
    entry retention left and ``first_pos`` the start of its data file; ``data_begin`` is
    where index 0 was written (RocketMQ's divided offset). Retention writes this *before* it
    unlinks a file, so a first data file that starts above ``first_pos`` was lost, not
    deleted (docs/dledger.md, "Disks that lie")."""

    first_index: int
    first_pos: int
    data_begin: int


def load_log_start(directory: Path) -> LogStart | None:
    path = directory / LOG_START_FILE
    props = _read(path)
    if props is None:
        return None
    start = LogStart(
        _int(props, FIRST_INDEX_KEY, path, 0), _int(props, FIRST_POS_KEY, path, 0), _int(props, DATA_BEGIN_KEY, path, 0)
    )
    if start.first_pos < start.data_begin:
        raise MetadataError(f"{path}: {FIRST_POS_KEY}={start.first_pos} is below {DATA_BEGIN_KEY}={start.data_begin}")
    return start


def save_log_start(directory: Path, start: LogStart) -> None:
    """Atomic and durable: retention calls it before each unlink."""
    text = format_properties(
        [
            (FIRST_INDEX_KEY, str(start.first_index)),
            (FIRST_POS_KEY, str(start.first_pos)),
            (DATA_BEGIN_KEY, str(start.data_begin)),
        ]
    )
    directory.mkdir(parents=True, exist_ok=True)
    failpoint("dledger.before_log_start_write")
    write_atomic(directory / LOG_START_FILE, text.encode())
