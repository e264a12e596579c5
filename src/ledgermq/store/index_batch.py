"""A dispatch round's index puts through the compiled path (src/ledgermq/_index_put.c).

``IndexService.build_staged`` (a master's round of DispatchRequests) and ``build_rows``
(a replica's round of scanned rows) put one or two keys per message; in Python that was
~1 us of interpreter work per key, the largest per-message Python cost left on batch
sends. Here a round is done in two passes: the keys are hashed (in C) and gathered, with
the same skips the Python loop makes, and then handed to ``IndexFile.put_run`` a file at a
time, rolling to a new file where the loop would. The Python loops in store/index.py stay
the reference and the pure-Python path (``LEDGERMQ_PURE_PYTHON=1``); the two leave the
same bytes, the same header fields, the same replay guard (``_next_phy``) and name the same
request in ``IndexNotBuilt`` (tests/store/test_index_put_c.py).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from ledgermq import speedups
from ledgermq.protocol import sysflag as SF
from ledgermq.protocol.javahash import java_string_hash, java_utf8_hash
from ledgermq.protocol.properties import KEY_SEPARATOR
from ledgermq.store.dispatch import DispatchRequest
from ledgermq.store.record_scan import KEYS, PHYS, STORE_TS, SYSFLAG, TOPIC, UNIQ, Row


class RunFile(Protocol):
    """What the round needs of an index file (store/index.py's ``IndexFile``)."""

    def put_run(self, flat: list[int], start: int) -> int: ...


F = TypeVar("F", bound=RunFile)


class IndexRounds(Protocol[F]):
    """What the round needs of the index service (store/index.py's ``IndexService``, which
    imports this module: naming it here would make an import circle)."""

    _next_phy: int

    def _writable(self) -> F: ...

    def _put(self, f: F, java_hash: int, phy: int, ts: int) -> F: ...


_KEY_SEPARATOR_B = KEY_SEPARATOR.encode()
_TX_MASK = SF.TRANSACTION_MASK
_ROLLBACK = SF.TRANSACTION_ROLLBACK_TYPE
_C = speedups.recordc
_ascii_hash: Callable[[bytes], int | None] = _C.java_ascii_hash if _C is not None else (lambda data: None)


class IndexNotBuilt(Exception):
    """``IndexService.build_rows`` or ``build_staged`` stopped at row ``failed`` (the rows
    before it are indexed); the cause is chained."""

    def __init__(self, failed: int) -> None:
        super().__init__(f"row {failed} could not be indexed")
        self.failed = failed


def build_staged_c(svc: IndexRounds[F], reqs: Sequence[DispatchRequest], count: int) -> None:
    """``IndexService.build_staged``'s loop with the puts in C; the caller holds the lock.

    ``flat`` holds [java_hash, phy, store_ts] per key; ``ends[j]`` is its length after the
    j-th request indexed, ``done[j]`` that request's position: what a failed put needs to
    name the request and set the replay guard as the Python loop would have."""
    flat: list[int] = []
    ends: list[int] = []
    done: list[int] = []
    next_phy = svc._next_phy
    f: F | None = None
    failure: tuple[int, Exception] | None = None
    i = 0
    try:
        for i in range(count):
            req = reqs[i]
            uniq, keys = req.uniq_key, req.keys
            if not uniq and not keys:
                continue
            phy = req.commit_log_offset
            if phy < next_phy or req.sysflag & _TX_MASK == _ROLLBACK:
                continue
            ts, prefix = req.store_timestamp, req.topic + "#"
            if f is None:
                f = svc._writable()  # where the loop looks for it: before the first key's hash
            if uniq:
                flat += (java_string_hash(prefix + uniq), phy, ts)
            if keys:
                for k in keys.split(KEY_SEPARATOR):
                    if k:
                        flat += (java_string_hash(prefix + k), phy, ts)
            next_phy = phy + 1
            ends.append(len(flat))
            done.append(i)
    except Exception as exc:  # the keys gathered so far are put first, as the loop had put them
        failure = (i, exc)
    _put_gathered(svc, f, flat, ends, done, lambda j: reqs[j].commit_log_offset, failure)


def build_rows_c(svc: IndexRounds[F], rows: Sequence[Row], count: int) -> None:
    """``IndexService.build_rows``'s loop with the puts in C (see ``build_staged_c``); the
    caller holds the lock."""
    flat: list[int] = []
    ends: list[int] = []
    done: list[int] = []
    prefixes: dict[str, bytes] = {}
    next_phy = svc._next_phy
    f: F | None = None
    failure: tuple[int, Exception] | None = None
    i = 0
    try:
        for i in range(count):
            row = rows[i]
            uniq, keys = row[UNIQ], row[KEYS]
            if uniq is None and keys is None:
                continue
            phy = row[PHYS]
            if phy < next_phy or row[SYSFLAG] & _TX_MASK == _ROLLBACK:
                continue
            topic = row[TOPIC]
            prefix = prefixes.get(topic)
            if prefix is None:
                prefix = prefixes[topic] = (topic + "#").encode()
            ts = row[STORE_TS]
            if f is None:
                f = svc._writable()
            if uniq is not None:
                data = prefix + uniq
                h = _ascii_hash(data)
                flat += (java_utf8_hash(data) if h is None else h, phy, ts)
            if keys is not None:
                for k in keys.split(_KEY_SEPARATOR_B):
                    if k:
                        flat += (java_utf8_hash(prefix + k), phy, ts)
            next_phy = phy + 1
            ends.append(len(flat))
            done.append(i)
    except Exception as exc:
        failure = (i, exc)
    _put_gathered(svc, f, flat, ends, done, lambda j: rows[j][PHYS], failure)


def _put_gathered(
    svc: IndexRounds[F],
    f: F | None,
    flat: list[int],
    ends: list[int],
    done: list[int],
    phy_of: Callable[[int], int],
    failure: tuple[int, Exception] | None,
) -> None:
    """Put the gathered keys into ``f`` and the files rolled after it, then set the replay
    guard; raise ``IndexNotBuilt`` for the first request not fully indexed.

    A key the C put stops at goes to ``IndexService._put``, the Python loop's own step: it
    rolls when the file is full (and drops the key if even the new file is, as the loop
    does) and puts or raises for a value C does not hold."""
    pos, n = 0, len(flat) // 3
    try:
        while pos < n:
            assert f is not None  # a key was gathered only after the file was found
            pos += f.put_run(flat, pos)
            if pos < n:
                at = 3 * pos
                f = svc._put(f, flat[at], flat[at + 1], flat[at + 2])
                pos += 1
    except Exception as exc:
        j = bisect_right(ends, 3 * pos)  # the first request whose keys reach past the failed one
        if j:
            svc._next_phy = phy_of(done[j - 1]) + 1
        raise IndexNotBuilt(done[j] if j < len(done) else failure[0] if failure else -1) from exc
    if done:
        svc._next_phy = phy_of(done[-1]) + 1
    if failure is not None:
        raise IndexNotBuilt(failure[0]) from failure[1]
