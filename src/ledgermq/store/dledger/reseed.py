"""Re-seed a DLedger member's store from a copy of another member's: the way back for a
follower the leader's retention left behind (there are no snapshots), or a new machine.

``reseed_store(source_root, source_id, target_root, target_id)``; the target broker must be
stopped, the source may be running. What makes a copy of a running store safe:

* the two checkpoints are copied *first* (the DLedger ``checkpoint``: committed index; the
  store's ``checkpoint``: how far consume queues and the index were flushed), so every
  file copied after them is at least as new as what they promise (data files only grow
  above the committed index; a torn tail above it is cut by recovery);
* ``abort`` comes along if the source was running, so the copy starts with the thorough
  recovery of a crashed store; ``lock`` is never copied;
* ``dledger-<source_id>`` becomes ``dledger-<target_id>``;
* the term and vote (``currterm``) stay the target's own unless the copy's term is higher:
  then the copy's term with no vote (the target never took part in that term, so it cannot
  have voted in it; keeping the source's vote would be harmless but is not this node's).
  A vote is never dropped within a term the target was in: it could vote twice.

The target's old directory is moved aside (``<target>.before-reseed-<n>``), never deleted.
Only the default layout is handled: DLedger data under ``<root>/dledger-<id>/data``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ledgermq.errors import StoreError
from ledgermq.store.dledger.metadata import CHECKPOINT_FILE, TERM_FILE, TermState, load_term_state, save_term_state
from ledgermq.store.lockfile import StoreLock

STORE_CHECKPOINT = "checkpoint"  # the message store's own (store/checkpoint.py)
_NEVER_COPIED = {"lock"}


def reseed_store(source_root: Path, source_id: str, target_root: Path, target_id: str) -> Path | None:
    """Replace the stopped target's store with a copy of the source's; returns where the
    target's old directory was moved (None if there was none)."""
    src, dst = source_root.resolve(), target_root.resolve()
    if src == dst or src in dst.parents or dst in src.parents:
        raise StoreError(f"source {source_root} and target {target_root} must be separate directories")
    src_ledger = source_root / f"dledger-{source_id}"
    if not (src_ledger / "data").is_dir():
        raise StoreError(f"{src_ledger}/data is not a DLedger data directory")
    old_term = TermState()
    aside: Path | None = None
    if target_root.exists():
        lock = StoreLock(target_root)
        lock.acquire()  # StoreLockedError while the target broker runs
        lock.release()
        old_term = load_term_state(target_root / f"dledger-{target_id}")
        aside = _free_name(target_root)
        target_root.rename(aside)
    dst_ledger = target_root / f"dledger-{target_id}"
    dst_ledger.mkdir(parents=True)
    for src, dst in ((src_ledger / CHECKPOINT_FILE, dst_ledger), (source_root / STORE_CHECKPOINT, target_root)):
        if src.exists():
            shutil.copy2(src, dst / src.name)
    _copy_tree(source_root, target_root, skip={source_root / STORE_CHECKPOINT, src_ledger})
    _copy_tree(src_ledger, dst_ledger, skip={src_ledger / CHECKPOINT_FILE, src_ledger / TERM_FILE})
    copied = load_term_state(src_ledger)
    keep = old_term if old_term.current_term >= copied.current_term else TermState(copied.current_term, None)
    save_term_state(dst_ledger, keep)
    return aside


def _copy_tree(src: Path, dst: Path, skip: set[Path]) -> None:
    for item in sorted(src.iterdir()):
        if item in skip or item.name in _NEVER_COPIED:
            continue
        if item.is_dir():
            shutil.copytree(item, dst / item.name, dirs_exist_ok=True)
        else:
            shutil.copy2(item, dst / item.name)


def _free_name(root: Path) -> Path:
    n = 1
    while (candidate := root.with_name(f"{root.name}.before-reseed-{n}")).exists():
        n += 1
    return candidate
