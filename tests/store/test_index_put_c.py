"""The index file's puts in C (src/ledgermq/_index_put.c, store/index_batch.py) against
the Python loop they replace (``IndexFile.put_hashed``, ``IndexService.build_staged`` and
``build_rows`` with ``put_in_c`` off): the same bytes in every index file, the same header
fields, the same files, the same replay guard and the same ``IndexNotBuilt``, whatever the
hashes (Integer.MIN_VALUE, collisions in one slot), the time stamps (before the file's
begin, a begin of 0), full files, and slots left pointing past the count by a crash."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledgermq import speedups
from ledgermq.clock import ManualClock
from ledgermq.protocol import sysflag as SF
from ledgermq.store.dispatch import DispatchRequest
from ledgermq.store.index import HEADER_SIZE, IndexNotBuilt, IndexService
from ledgermq.store.index_batch import _put_gathered
from ledgermq.store.record_scan import Row

PURE = os.environ.get("LEDGERMQ_PURE_PYTHON", "") not in ("", "0")
needs_c = pytest.mark.skipif(speedups.recordc is None, reason="the compiled record path is not built or turned off")
_SETTINGS = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def test_the_compiled_index_put_is_used_unless_turned_off(tmp_path: Path) -> None:
    """A build without the put (or without the extension) would leave the C path untested."""
    svc = IndexService(tmp_path, 4, 8, ManualClock())
    if PURE:
        assert speedups.recordc is None and not svc.put_in_c
    else:
        assert speedups.recordc is not None, "ledgermq._recordc was not built (pip install -e . needs a C compiler)"
        assert hasattr(speedups.recordc, "index_put_run"), "ledgermq._recordc is an old build: rebuild it"
        assert svc.put_in_c


def _pair(root: Path, slots: int, max_entries: int) -> tuple[IndexService, IndexService]:
    """The C service and the Python one, in their own directories, on equal clocks."""
    c = IndexService(root / "c", slots, max_entries, ManualClock(wall_ms=1_700_000_000_000))
    py = IndexService(root / "py", slots, max_entries, ManualClock(wall_ms=1_700_000_000_000))
    py.put_in_c = False
    return c, py


def _assert_same(c: IndexService, py: IndexService) -> None:
    assert len(c.files) == len(py.files)
    assert c._next_phy == py._next_phy
    for fc, fp in zip(c.files, py.files, strict=True):
        state = ("count", "slot_count", "begin_phy", "begin_ts", "end_phy", "end_ts", "dirty")
        assert [getattr(fc, a) for a in state] == [getattr(fp, a) for a in state]
        fc._write_header()
        fp._write_header()
        assert fc.mm[:] == fp.mm[:]


def _crash(svc: IndexService, back: int, slot_writes: list[tuple[int, int]]) -> None:
    """A crash's leftovers: the newest file's count set back (its later entries and the
    slots naming them stay), and stray slot values (negative, past the file's end)."""
    if not svc.files:
        return
    f = svc.files[-1]
    f.count = max(1, f.count - back)
    for slot, value in slot_writes:
        f.mm[HEADER_SIZE + 4 * (slot % f.slots) : HEADER_SIZE + 4 * (slot % f.slots) + 4] = value.to_bytes(
            4, "big", signed=True
        )


def _put_each_key_as_a_request(svc: IndexService, flat: list[int]) -> None:
    """The C path's puts (``_put_gathered``) of ``flat``, each key a request of its own."""
    n = len(flat) // 3
    _put_gathered(
        svc, svc._writable(), flat, [3 * (k + 1) for k in range(n)], list(range(n)), lambda j: flat[3 * j + 1], None
    )


_HASH = st.one_of(
    st.integers(-(2**31), 2**31 - 1),
    st.sampled_from([-(2**31), 2**31 - 1, -(2**31) + 1, 0, -1, 1, 7, -7, 14]),  # 7, -7, 14 share slots
)
_T0 = 1_700_000_000_000
_TS = st.one_of(
    st.sampled_from([0, -1, 999, 1000, _T0]),
    st.integers(-3, 4).map(lambda s: _T0 + 1000 * s - 1),  # a millisecond short of a second boundary
    st.integers(-(10**4), 2**62),
)
_KEY = st.tuples(_HASH, st.integers(0, 5000), _TS)  # (hash, phy step, store ts)
_CRASH = st.tuples(
    st.integers(0, 6), st.lists(st.tuples(st.integers(0, 8), st.integers(-(2**31), 2**31 - 1)), max_size=3)
)
_ROUND = st.tuples(st.lists(_KEY, max_size=25), st.one_of(st.none(), _CRASH))


@needs_c
@_SETTINGS
@given(
    slots=st.integers(1, 7),
    max_entries=st.integers(1, 12),
    rounds=st.lists(_ROUND, min_size=1, max_size=6),
)
def test_runs_of_hashed_keys_write_what_put_hashed_writes(
    tmp_path_factory: Any, slots: int, max_entries: int, rounds: list[Any]
) -> None:
    c, py = _pair(tmp_path_factory.mktemp("idx"), slots, max_entries)
    phy = 0
    for keys, crash in rounds:
        flat: list[int] = []
        for h, step, ts in keys:
            phy += step
            flat += (h, phy, ts)
        if flat:
            f = py._writable()
            for at in range(0, len(flat), 3):
                f = py._put(f, flat[at], flat[at + 1], flat[at + 2])
            py._next_phy = flat[-2] + 1
            _put_each_key_as_a_request(c, flat)
        _assert_same(c, py)
        if crash is not None:
            for svc in (c, py):
                _crash(svc, *crash)
    for svc in (c, py):
        svc.close()


_TEXT = st.one_of(
    st.none(), st.just(""), st.text(max_size=6), st.sampled_from(["k", "é", "𝄞x", "a b", " k ", "Aa", "BB"])
)
_REQ = st.tuples(
    st.sampled_from(["T", "TopicB", "Tö"]),
    _TEXT,  # UNIQ_KEY
    _TEXT,  # KEYS
    st.integers(-3, 5000),  # phy step: a few go back (replayed records the guard skips)
    _TS,
    st.sampled_from([0, SF.TRANSACTION_ROLLBACK_TYPE, SF.TRANSACTION_COMMIT_TYPE, SF.TRANSACTION_PREPARED_TYPE]),
)


def _requests(spec: list[Any], phy: int) -> tuple[list[DispatchRequest], int]:
    reqs = []
    for topic, uniq, keys, step, ts, sysflag in spec:
        phy = max(phy + step, 0)
        reqs.append(DispatchRequest(topic, 0, phy, 100, 0, ts, 0, sysflag, keys, uniq, 0))
    return reqs, phy


def _row(req: DispatchRequest) -> Row:
    def raw(text: str | None) -> bytes | None:
        return text.encode("utf-8", "surrogatepass") if text else None  # the scan gives None for empty values

    phy, sysflag, ts = req.commit_log_offset, req.sysflag, req.store_timestamp
    return (100, 0, 0, phy, sysflag, ts, 0, 0, req.topic, raw(req.uniq_key), raw(req.keys), b"")


def _failing_roll(svc: IndexService, nth: int | None) -> None:
    """Make the service's ``nth`` roll (from now) raise, as a full disk would."""
    if nth is None:
        return
    real = svc._roll
    calls = [0]

    def roll() -> Any:
        calls[0] += 1
        if calls[0] == nth:
            raise OSError(28, "No space left on device")
        return real()

    svc._roll = roll  # type: ignore[method-assign]


def _build(svc: IndexService, rows: bool, reqs: list[DispatchRequest], count: int) -> int | None:
    build: Callable[[Any, int], None] = svc.build_rows if rows else svc.build_staged
    try:
        build([_row(r) for r in reqs] if rows else reqs, count)
    except IndexNotBuilt as exc:
        return exc.failed
    return None


@needs_c
@_SETTINGS
@given(
    rows=st.booleans(),
    slots=st.integers(1, 5),
    max_entries=st.integers(2, 9),
    rounds=st.lists(
        st.tuples(st.lists(_REQ, max_size=12), st.integers(0, 12), st.one_of(st.none(), st.integers(1, 3))),
        min_size=1,
        max_size=5,
    ),
)
def test_build_staged_and_build_rows_index_what_the_python_loops_index(
    tmp_path_factory: Any, rows: bool, slots: int, max_entries: int, rounds: list[Any]
) -> None:
    """Whole rounds through ``build_staged`` (DispatchRequests) or ``build_rows`` (rows as
    the scan gives them), a roll failing now and then: the same files, the same failed
    request, the same replay guard, and every key found the same."""
    c, py = _pair(tmp_path_factory.mktemp("idx"), slots, max_entries)
    phy, all_reqs = 0, []
    for spec, count, fail_at in rounds:
        reqs, phy = _requests(spec, phy)
        all_reqs += reqs
        count = min(count, len(reqs))
        for svc in (c, py):
            _failing_roll(svc, fail_at)
        assert _build(c, rows, reqs, count) == _build(py, rows, reqs, count)
        for svc in (c, py):
            vars(svc).pop("_roll", None)
        _assert_same(c, py)
    for r in all_reqs:
        for key in [r.uniq_key or "", *(r.keys or "").split(" ")]:
            if key:
                assert c.query(r.topic, key, 64, 0, 2**63) == py.query(r.topic, key, 64, 0, 2**63)
    for svc in (c, py):
        svc.close()


@needs_c
@pytest.mark.parametrize("back", range(60, 70))
def test_a_long_stale_chain_is_followed_as_far_as_put_hashed_follows_it(tmp_path: Path, back: int) -> None:
    """One slot, its chain left ``back`` entries past the count by a crash: both walk it
    back at most 64 entries (``IndexFile._newest_before``), no further and no less."""
    c, py = _pair(tmp_path, 1, 200)
    for svc in (c, py):
        f = svc._writable()
        for k in range(100):
            f.put_hashed(5, k, _T0 + k)
        f.count -= back
    flat = [5, 500, _T0 + 500, 9, 501, _T0 + 501]
    f = py._writable()
    for at in range(0, len(flat), 3):
        f = py._put(f, flat[at], flat[at + 1], flat[at + 2])
    py._next_phy = 502
    _put_each_key_as_a_request(c, flat)
    _assert_same(c, py)
