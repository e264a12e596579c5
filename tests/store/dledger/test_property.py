"""Random appends, truncations, flushes, checkpoints, reopens and lost unflushed tails,
checked against a list of (term, body) after every step."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledgermq.store.dledger import DLedgerStore, DLedgerStoreConfig
from ledgermq.store.dledger.entry import BODY_OFFSET

DATA = 1024
SECTOR = 512
CFG = dict(data_file_size=DATA, index_file_size=32 * 8, recover_last_files=2)

append_op = st.tuples(st.just("append"), st.lists(st.integers(0, 400), min_size=1, max_size=6), st.booleans())
truncate_op = st.tuples(st.just("truncate"), st.integers(0, 10**6))
ops = st.lists(
    st.one_of(
        append_op,
        append_op,
        truncate_op,
        st.tuples(st.just("flush")),
        st.tuples(st.just("commit"), st.integers(0, 10**6)),
        st.tuples(st.just("reopen")),
        st.tuples(st.just("lose_unflushed"), st.integers(0, 10**6)),
    ),
    max_size=25,
)


@dataclass
class Model:
    entries: list[tuple[int, bytes, int]] = field(default_factory=list)  # term, body, pos
    persisted: int = -1
    committed: int = -1

    @property
    def last(self) -> int:
        return len(self.entries) - 1


def _check(store: DLedgerStore, m: Model) -> None:
    assert store.last_index == m.last
    assert store.last_term == (m.entries[-1][0] if m.entries else -1)
    assert store.committed_index == m.committed
    spans = list(store.entries_from(0))
    assert [(s.index, s.pos) for s in spans] == [(i, e[2]) for i, e in enumerate(m.entries)]
    for i, (term, body, pos) in enumerate(m.entries):
        assert store.get(i) == (term, body, pos)


def _lose_after(cfg: DLedgerStoreConfig, cut: int) -> None:
    for path in cfg.data_dir.iterdir() if cfg.data_dir.exists() else ():
        start = int(path.name)
        if start + DATA > cut:
            with path.open("r+b") as f:
                lo = max(cut - start, 0)
                f.seek(lo)
                f.write(bytes(DATA - lo))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_store_matches_a_list(steps: list[tuple[object, ...]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = DLedgerStoreConfig(store_base_dir=tmp, **CFG)  # type: ignore[arg-type]
        store = DLedgerStore.open(cfg)
        m = Model()
        term = 1
        try:
            for step in steps:
                kind = step[0]
                if kind == "append":
                    sizes, bump = step[1], step[2]
                    assert isinstance(sizes, list)
                    term += int(bool(bump))
                    first = m.last + 1
                    bodies = [bytes([(first + k) % 251 + 1]) * n for k, n in enumerate(sizes)]
                    positions = store.append([(first + k, term, b) for k, b in enumerate(bodies)])
                    m.entries += [(term, b, p) for b, p in zip(bodies, positions, strict=True)]
                elif kind == "truncate":
                    low = max(m.committed, -1)
                    if m.last > low:
                        keep = low + int(step[1]) % (m.last - low)  # type: ignore[call-overload]
                        store.truncate_after(keep)
                        del m.entries[keep + 1 :]
                        m.persisted = min(m.persisted, keep)
                elif kind == "flush":
                    m.persisted = store.flush()
                    assert m.persisted == m.last
                elif kind == "commit":
                    want = int(step[1]) % (m.last + 2) - 1  # type: ignore[call-overload]
                    m.committed = max(min(want, m.persisted), m.committed)
                    assert store.save_committed_index(want) == m.committed
                elif kind == "reopen":
                    store.close(flush=False)
                    store = DLedgerStore.open(cfg)
                    m.persisted = m.last  # recovery syncs what it keeps
                elif kind == "lose_unflushed":
                    # A crash that loses the sectors past the persisted entries. Disks lose
                    # whole sectors (512 bytes or more), so the cut is sector-aligned: a tear
                    # at an arbitrary byte inside the first 24 bytes of the entry at position
                    # 0 could zero a term without changing anything else that is checked.
                    store.close(flush=False)
                    start = m.entries[m.persisted + 1][2] if m.persisted < m.last else store.end_pos
                    end = store.end_pos
                    cut = start + int(step[1]) % (end - start + 1)  # type: ignore[call-overload]
                    cut = -(-cut // SECTOR) * SECTOR
                    _lose_after(cfg, cut)
                    store = DLedgerStore.open(cfg)
                    while m.entries and m.entries[-1][2] + BODY_OFFSET + len(m.entries[-1][1]) > cut:
                        m.entries.pop()
                    m.persisted = m.last
                _check(store, m)
        finally:
            store.close(flush=False)
