"""The pull path's record check (``stored_run_problem``): sound runs pass, whatever their
hosts' address family; any damage is named with its reason, like ``stored_record_problem``."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ledgermq.protocol import message as M
from ledgermq.store.message_input import MessageInput
from ledgermq.store.message_store import MessageStore
from ledgermq.store.record_check import stored_record_problem, stored_run_problem

HOSTS = [("127.0.0.1", 5000), ("::1", 5000)]


@pytest.mark.parametrize("born", HOSTS)
@pytest.mark.parametrize("stored", HOSTS)
def test_sound_runs_pass_and_damage_is_named(
    store_factory: Callable[..., MessageStore], born: M.Host, stored: M.Host
) -> None:
    store = store_factory()
    spans = []
    for n, size in enumerate((10, 3000, 700)):  # one body above the copy threshold
        msg = MessageInput(topic="Rc", body=bytes([n]) * size, born_host=born, store_host=stored,
                           properties={"KEYS": f"k{n}"})  # fmt: skip
        r = store.put_message(msg)
        assert r.ok and r.append is not None
        spans.append((r.append.wrote_offset, r.append.next_offset))
    start, end = spans[0][0], spans[-1][1]
    run = store.commitlog.read(start, end - start)
    assert run is not None and stored_run_problem(run, start) is None

    second, third = spans[1][0] - start, spans[2][0] - start
    body_at = second + M.body_end(run[second : second + M.MAX_HEAD_SIZE]) - 100
    topic_len_at = third + M.body_end(run[third : third + M.MAX_HEAD_SIZE])
    for at, reason in ((body_at, "body CRC mismatch"), (second + 5, "bad magic"), (topic_len_at, "fields")):
        bad = bytearray(run)
        bad[at] ^= 0x41
        problem = stored_run_problem(bytes(bad), start)
        assert problem is not None and reason in problem, (at, problem)
        assert problem == stored_record_problem(bytes(bad), *_record_of(spans, start, at))
    assert "trailing bytes" in (stored_run_problem(run + bytes(10), start) or "")


def _record_of(spans: list[tuple[int, int]], start: int, at: int) -> tuple[int, int, int]:
    s, e = next(sp for sp in spans if sp[0] - start <= at < sp[1] - start)
    return s - start, e - s, s
