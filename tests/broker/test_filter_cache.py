"""The dispatch-time SQL92 answers (DispatchMatchCache), without a store."""

from __future__ import annotations

from ledgermq.broker import filter_cache as FC
from ledgermq.broker.filter_cache import DispatchMatchCache
from ledgermq.clock import ManualClock
from ledgermq.filter import compile_expression
from ledgermq.protocol.properties import encode_properties
from ledgermq.store.dispatch import DispatchRequest

EXPR = compile_expression("a > 5")


def req(topic: str, queue_offset: int, a: str | None, phy: int | None = None, sysflag: int = 0) -> DispatchRequest:
    props = encode_properties({"TAGS": "t"} | ({"a": a} if a is not None else {}))
    phy = queue_offset * 100 if phy is None else phy
    return DispatchRequest(topic, 0, phy, 100, 0, 0, queue_offset, sysflag, None, None, 0, props)


def test_answers_known_unknown_and_checked_against_the_record() -> None:
    cache = DispatchMatchCache(ManualClock())
    cache.on_dispatch(req("T", 0, "9"))  # not watched yet: nothing kept
    cache.watch("T", EXPR)
    for n, a in enumerate(["9", "1", None, "x", "6"], start=1):
        cache.on_dispatch(req("T", n, a))
    cache.on_dispatch(req("U", 6, "9"))  # another topic: not evaluated
    v = cache.verdict_of("T", 0, EXPR)
    assert [v(n, n * 100) for n in range(7)] == [None, True, False, False, False, True, None]
    assert v(1, 999) is None  # a different record at that queue offset
    assert cache.verdict_of("T", 1, EXPR)(1, 100) is None  # another queue
    assert cache.verdict_of("U", 0, EXPR)(6, 600) is None
    assert cache.verdict_of("T", 0, compile_expression("a > 6"))(1, 100) is None  # another expression


def test_a_dispatch_going_backwards_forgets_everything() -> None:
    cache = DispatchMatchCache(ManualClock())
    cache.watch("T", EXPR)
    for n in range(10):
        cache.on_dispatch(req("T", n, "9"))
    cache.on_dispatch(req("T", 5, "1", phy=450))  # the log was cut at 450 and is written again
    v = cache.verdict_of("T", 0, EXPR)
    assert v(2, 200) is None and v(5, 450) is False


def test_memory_is_bounded_and_idle_expressions_are_dropped() -> None:
    clock = ManualClock()
    cache = DispatchMatchCache(clock)
    cache.watch("T", EXPR)
    total = FC.CHUNK * (FC.MAX_CHUNKS + 3)
    for n in range(0, total, 7):
        cache.on_dispatch(req("T", n, "9"))
    watched = cache._by_topic["T"][EXPR.text]
    assert len(watched.queues[0]) == FC.MAX_CHUNKS
    v = cache.verdict_of("T", 0, EXPR)
    assert v(0, 0) is None  # the oldest chunks went first
    last = (total - 1) // 7 * 7
    assert v(last, last * 100) is True
    clock.advance(FC.IDLE_MS / 1000 + 1)
    for n in range(total, total + 4096 * 7, 7):
        cache.on_dispatch(req("T", n, "9"))
    assert "T" not in cache._by_topic  # no pull used it for IDLE_MS: no longer evaluated
