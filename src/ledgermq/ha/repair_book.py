"""What one broker's HA code knows about damaged commit-log ranges, and what it repaired.

Both ends keep one: a master counts the ranges it took from slaves and gave to them, a
slave the ranges it took from its master. The damaged ranges themselves live in the store
(``NativeMessageStore.damaged_ranges``); ``damaged`` is a copy the event loop reads on every
transfer plan without taking the store's lock, refreshed whenever the ranges may have
changed (a damage listener's hop to the loop, a repair). A range nobody could repair
keeps a note saying why, logged once at ERROR and shown by ``admin haStatus`` as "no
replica holds [a, b)". Event-loop thread only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ledgermq.ha.repair import Range, describe, first_damage_at_or_after
from ledgermq.store.native_store import NativeMessageStore

log = logging.getLogger(__name__)

_MAX_NOTES = 64


@dataclass(frozen=True, slots=True)
class RepairStatus:
    damaged: list[Range]  # pending in the store
    unrepaired: list[str]  # "no replica holds [a, b): why", one per range with a note
    taken: int  # ranges rewritten here from a peer's bytes
    taken_bytes: int
    given: int  # ranges sent to a peer that holds them damaged
    given_bytes: int
    last: str  # the latest repair, "" if none
    expired: int = 0  # damaged ranges let go here because the group's master no longer holds them
    expired_bytes: int = 0


class RepairBook:
    def __init__(self, store: NativeMessageStore) -> None:
        self.store = store
        self.damaged: list[Range] = []
        self.taken = 0
        self.taken_bytes = 0
        self.given = 0
        self.given_bytes = 0
        self.expired_count = 0
        self.expired_bytes = 0
        self.last = ""
        self._notes: dict[Range, str] = {}
        self.awaiting_holder: set[Range] = set()
        """Damaged ranges no connected slave held when they were found (e.g. found while the
        only slave was still in its handshake, after its repair plan was made): the first
        slave that acknowledges past one is asked to re-handshake, which takes it back."""

    def refresh(self) -> list[Range]:
        """Re-read the store's damaged ranges; notes of ranges no longer damaged go."""
        self.damaged = [(a, b) for a, b in self.store.damaged_ranges()]
        self._notes = {r: why for r, why in self._notes.items() if _overlaps_any(r, self.damaged)}
        self.awaiting_holder = {r for r in self.awaiting_holder if _overlaps_any(r, self.damaged)}
        return self.damaged

    def await_holder(self, start: int, end: int, why: str) -> None:
        """[start, end) is damaged and no connected slave holds it now: noted (``note_unrepaired``)
        and retried as soon as one does (``awaiting_holder``)."""
        self.awaiting_holder.add((start, end))
        self.note_unrepaired(start, end, why)

    def held_by(self, holds: Callable[[int, int], bool]) -> list[Range]:
        """The ranges awaiting a holder that ``holds``; they stop awaiting (one retry each)."""
        found = [r for r in self.awaiting_holder if holds(*r)]
        self.awaiting_holder.difference_update(found)
        return found

    def stop_for(self, offset: int | None) -> int | None:
        """Where a transfer from ``offset`` must stop (the first damaged byte), None if nowhere.

        A transfer held at a damaged range looks at the store again each time it asks, so
        it goes on as soon as the range is repaired, by whoever repaired it."""
        if not self.damaged or offset is None:
            return None
        stop = first_damage_at_or_after(self.damaged, offset)
        if stop == offset:
            self.refresh()
            stop = first_damage_at_or_after(self.damaged, offset)
        return stop

    def note_unrepaired(self, start: int, end: int, why: str, *, logged: bool = False) -> None:
        """[start, end) stays damaged: say so once (ERROR, unless the caller ``logged`` it
        already) and keep the reason for haStatus."""
        key = (start, end)
        if self._notes.get(key) == why:
            return
        if len(self._notes) >= _MAX_NOTES and key not in self._notes:
            self._notes.pop(next(iter(self._notes)))
        self._notes[key] = why
        if logged:
            return
        log.error("HA: no replica holds commit log [%d, %d) healthy: %s; it stays refused", start, end, why)

    def took(self, start: int, end: int, source: str) -> None:
        self.taken += 1
        self.taken_bytes += end - start
        self.last = f"took [{start}, {end}) from {source}"
        self._notes.pop((start, end), None)
        log.info("HA: repaired commit log [%d, %d) with the bytes of %s", start, end, source)

    def gave(self, start: int, end: int, peer: str) -> None:
        self.given += 1
        self.given_bytes += end - start
        self.last = f"gave [{start}, {end}) to {peer}"
        log.warning("HA: sent commit log [%d, %d) to %s, which holds it damaged", start, end, peer)

    def expired(self, ranges: Sequence[Range], why: str) -> None:
        """``ranges`` were let go: the group's master no longer holds them (store/damage_expiry.py)."""
        self.expired_count += len(ranges)
        self.expired_bytes += sum(b - a for a, b in ranges)
        self.last = f"let {describe(ranges)} go: {why} (the group expired them)"
        self.refresh()

    def status(self) -> RepairStatus:
        notes = [f"no replica holds [{a}, {b}): {why}" for (a, b), why in sorted(self._notes.items())]
        return RepairStatus(
            list(self.damaged),
            notes,
            self.taken,
            self.taken_bytes,
            self.given,
            self.given_bytes,
            self.last,
            self.expired_count,
            self.expired_bytes,
        )


def _overlaps_any(r: Range, ranges: Sequence[Range]) -> bool:
    return any(a < r[1] and r[0] < b for a, b in ranges)
