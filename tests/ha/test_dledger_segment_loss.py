"""Segment loss in a real 3-broker DLedger group: while one member is down (SIGKILL), its
FIRST data file is cut short or deleted, or its DLedger index file is cut short or deleted
(a broker's index files hold 5 Mi units each: the first is the only one). The member must
find the loss when it starts, not hold entries it cannot read, and get back what the data
lost from the group (the index it rebuilds from its own data); afterwards every
acknowledged message is on every member (docs/dledger.md, "Disks that lie").

Before, a first data file cut short passed for whole (its digest made start-up trust it)
until the scrub's next pass, an hour by default; an index file cut short kept the broker
from starting at all.
"""

from __future__ import annotations

import os
from pathlib import Path

from ledgermq.store.dledger import INDEX_UNIT_SIZE
from tests.ha.dledger_damage import a_follower, damage_one_member, member_files, the_leader
from tests.ha.dledger_group import DLedgerGroup


def _first_data_file(group: DLedgerGroup, n: str) -> Path:
    return member_files(group, n)[0]


def _first_index_file(group: DLedgerGroup, n: str) -> Path:
    return member_files(group, n, "index")[0]


def _cut_to_a_third(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 3)


def _cut_units_in_half(path: Path) -> None:
    """Keep half of the units written (and a few bytes of the next): a sparse 160 MiB file
    cut to a fraction of its size would still hold every unit of a short test."""
    units = len(path.read_bytes().rstrip(b"\0")) // INDEX_UNIT_SIZE
    assert units > 1000, units
    os.truncate(path, units // 2 * INDEX_UNIT_SIZE + 7)


def test_a_follower_whose_first_data_file_was_cut_short_repairs_it_at_start(tmp_path: Path) -> None:
    damage_one_member(
        tmp_path,
        a_follower,
        _first_data_file,
        _cut_to_a_third,
        log_says=("was cut to", "is damaged at index", "repaired: the log holds every entry"),
    )


def test_a_leader_whose_first_data_file_was_deleted_refills_its_log_from_the_group(tmp_path: Path) -> None:
    damage_one_member(
        tmp_path,
        the_leader,
        _first_data_file,
        Path.unlink,
        log_says=("where retention left it) is missing", "is damaged at index 0", "repaired: the log holds every"),
    )


def test_a_follower_whose_index_file_was_cut_short_rebuilds_it_from_its_data(tmp_path: Path) -> None:
    damage_one_member(
        tmp_path,
        a_follower,
        _first_index_file,
        _cut_units_in_half,
        log_says=("rebuilding the index from the data", "rebuilding index units from index"),
        repairs=False,
    )


def test_a_leader_whose_index_file_was_deleted_rebuilds_it_from_its_data(tmp_path: Path) -> None:
    damage_one_member(
        tmp_path,
        the_leader,
        _first_index_file,
        Path.unlink,
        log_says=("rebuilding index units from index 0",),
        repairs=False,
    )
