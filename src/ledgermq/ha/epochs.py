"""Replication epochs, and where a master and a slave agree their logs match.

RocketMQ 4.x's HA protocol lets a slave report any offset and a master stream from it.
That is only safe while the two logs are prefixes of each other. They stop being so when a
master loses the unflushed tail of its commit log (a power cut, a kernel crash) and writes
new records at offsets its slave already holds different records at: the slave's report
then lands inside a record of the master's new log, and the copy goes on through the
divergence. RocketMQ 5 answers this with epochs; so do we, in our own shape.

*Epoch*: every time a broker starts serving as a master it begins a new epoch, numbered
one above the last it knew, starting at its commit log's end. The list of (epoch, start
offset) pairs says which master generation wrote which part of the log. A slave copies its
master's list, so the same epoch number always means the same bytes on both. The list is
persisted (``epoch_file.py``) before the master takes its first write of the epoch.

*Reconciling* (``reconcile``), when a slave connects: it says the epoch of its last byte
and its log end (always a record boundary; it trims a partly copied record first). The
master answers with the offset both logs agree up to:

* the slave's end, if the master's log holds that epoch at least that far;
* otherwise the end of that epoch in the master's log: the slave truncates its tail there
  (bytes a master lost and replaced, or never had);
* a slave whose epoch the master never had is refused (it was a master itself, or the
  master lost its epoch file): nobody truncates anything, an operator decides.

*Recovering*: a master that restarted after a crash has not begun its new epoch yet and
refuses writes. If a slave of its last epoch holds more of that epoch than the master
kept, the master takes those bytes back from the slave (``Fetch``) before it begins the
new epoch, so messages that were acknowledged because the slave held them survive the
master's lost tail.

Pure: no I/O, no clock. Offsets are commit-log (physical) offsets.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Epoch:
    number: int
    start: int
    # Random, drawn when the epoch begins: epoch numbers alone cannot tell this master's
    # epoch 1 from an unrelated log's (another group's master, a wiped store). 0: unknown.
    ident: int = 0


class EpochLog:
    """The (epoch, start) list, epochs strictly increasing and starts non-decreasing.

    Data below the first entry's start belongs to epoch 0 (a log written before epochs
    were kept, or by a RocketMQ broker)."""

    __slots__ = ("entries",)

    def __init__(self, entries: Iterable[Epoch | tuple[int, int] | tuple[int, int, int]] = ()) -> None:
        items = [e if isinstance(e, Epoch) else Epoch(*(int(v) for v in e)) for e in entries]
        for before, after in itertools.pairwise(items):
            if after.number <= before.number or after.start < before.start:
                raise ValueError(f"epochs out of order: {before} then {after}")
        if items and (items[0].number < 1 or items[0].start < 0):
            raise ValueError(f"bad first epoch {items[0]}")
        self.entries: tuple[Epoch, ...] = tuple(items)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EpochLog) and other.entries == self.entries

    def __repr__(self) -> str:
        return f"EpochLog({self.pairs()})"

    def pairs(self) -> list[tuple[int, int, int]]:
        return [(e.number, e.start, e.ident) for e in self.entries]

    def ident_of(self, epoch: int) -> int:
        for e in self.entries:
            if e.number == epoch:
                return e.ident
        return 0

    @property
    def last_epoch(self) -> int:
        return self.entries[-1].number if self.entries else 0

    def epoch_at(self, end: int) -> int:
        """The epoch that wrote the byte just below ``end`` (0 for an empty log)."""
        found = 0
        for e in self.entries:
            if e.start < end:
                found = e.number
            else:
                break
        return found

    def knows(self, epoch: int) -> bool:
        return epoch == 0 or any(e.number == epoch for e in self.entries)

    def end_of(self, epoch: int, log_end: int) -> int:
        """Where ``epoch``'s bytes end in this log: the next epoch's start, or the log end."""
        for e in self.entries:
            if e.number > epoch:
                return min(e.start, log_end)
        return log_end

    def begin(self, log_end: int, ident: int = 0, number: int = 0) -> EpochLog:
        """A new epoch starting at ``log_end``; entries that start beyond it are dropped (their
        bytes were lost), but the new number is above every number ever used: ``number``
        (controller mode: the controller's master epoch) when it is, else one above the last."""
        kept = [e for e in self.entries if e.start <= log_end]
        return EpochLog([*kept, Epoch(max(self.last_epoch + 1, number), log_end, ident)])


# -- a slave's arrival ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Agree:
    """Both logs match below ``offset``: the slave truncates anything beyond it, reports
    it, and the master streams from there."""

    offset: int


@dataclass(frozen=True, slots=True)
class Fetch:
    """The recovering master takes ``[start, end)`` back from the slave first."""

    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Refuse:
    reason: str


Decision = Agree | Fetch | Refuse


def reconcile(
    master: EpochLog,
    master_end: int,
    slave_epoch: int,
    slave_end: int,
    *,
    recovering: bool,
    slave_start: int = 0,
    slave_epoch_ident: int = 0,
) -> Decision:
    """What a master answers a slave that holds ``[slave_start, slave_end)`` ending in ``slave_epoch``."""
    if slave_end == 0:
        return Agree(0)
    ours = master.ident_of(slave_epoch)
    if slave_epoch and slave_epoch_ident and ours and ours != slave_epoch_ident:
        return Refuse(
            f"the slave's epoch {slave_epoch} is not this master's epoch {slave_epoch} (different identities): "
            "its log was copied from another master (another group's, or this store before it was wiped). "
            "Nothing is truncated: an operator must decide which log to keep"
        )
    if not master.knows(slave_epoch) or slave_epoch > master.last_epoch:
        return Refuse(
            f"the slave's log ends in epoch {slave_epoch}, which this master never had (its epochs: "
            f"{master.pairs()}); was the slave a master itself, or is the master's epoch file lost? "
            "Nothing is truncated: an operator must decide which log to keep"
        )
    end = master.end_of(slave_epoch, master_end)
    if slave_end <= end:
        return Agree(slave_end)
    if recovering and slave_epoch == master.last_epoch:
        if slave_start > master_end:
            return Refuse(
                f"this master lost its log beyond {master_end} but the slave holds only [{slave_start}, "
                f"{slave_end}): what lies between is on neither, so the slave's part cannot be taken back. "
                "Writes stay refused until an operator decides (restart the master with haRecoveryWaitMillis=0 "
                "to accept the loss)"
            )
        return Fetch(master_end, slave_end)
    return Agree(end)


def describe_truncation(slave_end: int, agreed: int) -> str:
    return (
        f"the slave's log ({slave_end}) is ahead of or diverges from its master's beyond {agreed}: "
        f"{slave_end - agreed} bytes truncated"
    )


def validate_pairs(raw: Sequence[object]) -> EpochLog:
    """An epoch list from JSON (a peer's answer or a file), or ValueError."""
    entries: list[Epoch] = []
    for item in raw:
        if not isinstance(item, (list, tuple)) or len(item) not in (2, 3):
            raise ValueError(f"epoch entry {item!r} is not [epoch, start, identity]")
        if not all(isinstance(v, int) for v in item):
            raise ValueError(f"epoch entry {item!r} is not integers")
        entries.append(Epoch(*item))
    return EpochLog(entries)
