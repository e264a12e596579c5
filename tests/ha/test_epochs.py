"""The pure epoch arithmetic and the reconcile decision, case by case and as properties."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledgermq.errors import ConfigError
from ledgermq.ha.epoch_file import EpochFile, EpochState
from ledgermq.ha.epochs import Agree, EpochLog, Fetch, Refuse, reconcile, validate_pairs
from ledgermq.ha.handshake import Hello, decode_answer, decode_hello, encode_answer, encode_hello

L = EpochLog([(1, 0, 11), (2, 1000, 22), (3, 1500, 33)])


def test_epoch_at_and_end_of() -> None:
    assert L.epoch_at(0) == 0 and L.epoch_at(1) == 1 and L.epoch_at(1000) == 1 and L.epoch_at(1001) == 2
    assert L.end_of(1, 5000) == 1000 and L.end_of(2, 5000) == 1500 and L.end_of(3, 5000) == 5000
    assert L.end_of(1, 800) == 800  # the log was cut below the next epoch's start
    assert L.begin(1200, 44).pairs() == [(1, 0, 11), (2, 1000, 22), (4, 1200, 44)]  # numbers never reused


@pytest.mark.parametrize(
    ("slave_epoch", "slave_end", "recovering", "slave_start", "expected"),
    [
        (0, 0, False, 0, Agree(0)),  # empty slave
        (2, 1200, False, 0, Agree(1200)),  # within epoch 2
        (2, 1800, False, 0, Agree(1500)),  # beyond epoch 2's end: truncate
        (3, 1800, False, 0, Agree(1800)),  # current epoch, behind the master
        (3, 2500, False, 0, Agree(2000)),  # ahead of a master that does not recover: truncate
        (3, 2500, True, 0, Fetch(2000, 2500)),  # a recovering master takes it back
        (3, 2500, True, 2200, Refuse),  # ... unless there is a hole between the two
        (2, 1800, True, 0, Agree(1500)),  # an older epoch is never fetched
        (4, 2100, False, 0, Refuse),  # an epoch the master never had
    ],
)
def test_reconcile_cases(
    slave_epoch: int, slave_end: int, recovering: bool, slave_start: int, expected: object
) -> None:
    got = reconcile(L, 2000, slave_epoch, slave_end, recovering=recovering, slave_start=slave_start)
    if expected is Refuse:
        assert isinstance(got, Refuse) and "operator" in got.reason
    else:
        assert got == expected


def test_same_number_other_identity_is_refused() -> None:
    got = reconcile(L, 2000, 2, 1200, recovering=False, slave_epoch_ident=99)
    assert isinstance(got, Refuse) and "another master" in got.reason
    assert reconcile(L, 2000, 2, 1200, recovering=False, slave_epoch_ident=22) == Agree(1200)


@given(
    starts=st.lists(st.integers(0, 10_000), min_size=1, max_size=6),
    master_end=st.integers(0, 12_000),
    slave_end=st.integers(0, 12_000),
    pick=st.integers(0, 6),
    recovering=st.booleans(),
)
def test_reconcile_never_agrees_beyond_either_log_or_the_epochs_end(
    starts: list[int], master_end: int, slave_end: int, pick: int, recovering: bool
) -> None:
    log = EpochLog([(i + 1, s, i + 100) for i, s in enumerate(sorted(starts))])
    epoch = min(pick, log.last_epoch)
    got = reconcile(log, master_end, epoch, slave_end, recovering=recovering)
    if isinstance(got, Agree):
        assert got.offset <= slave_end and got.offset <= master_end
        assert got.offset <= log.end_of(epoch, master_end)
    elif isinstance(got, Fetch):
        assert recovering and epoch == log.last_epoch and got == Fetch(master_end, slave_end)


def test_bad_epoch_lists_are_refused() -> None:
    with pytest.raises(ValueError):
        EpochLog([(2, 0), (1, 10)])
    with pytest.raises(ValueError):
        validate_pairs([[1, "x"]])
    assert validate_pairs([[1, 0]]).pairs() == [(1, 0, 0)]  # entries written without an identity


def test_handshake_round_trips() -> None:
    raw = encode_hello(3, 1800, 64, 33)
    assert decode_hello(raw[12:]) == Hello(3, 33, 1800, 64)
    for decision in (Agree(5), Fetch(1, 9), Refuse("no")):
        reply = decode_answer(encode_answer(decision, L, (1, 2))[12:])
        assert reply.decision == decision
        if isinstance(decision, Agree):
            assert reply.epochs == L and reply.check == (1, 2)


def test_epoch_file_keeps_the_sync_state_set_members_and_refuses_a_malformed_list(tmp_path: Path) -> None:
    f = EpochFile(tmp_path)
    state = EpochState(EpochLog([(1, 0, 7)]), slave_attached=True, in_sync_slaves=frozenset({2, 3}))
    f.save(state)
    assert f.load() == state
    f.save(EpochState(EpochLog([(1, 0, 7)])))
    assert b"inSyncSlaves" not in f.path.read_bytes()  # absent when empty: the 4.x-era file shape
    assert f.load().in_sync_slaves == frozenset()
    f.path.write_bytes(b'{"epochs": [[1, 0, 7]], "inSyncSlaves": ["2"]}')
    with pytest.raises(ConfigError, match="inSyncSlaves"):
        f.load()
