"""The soak's measures: nearest-rank percentiles, latency windows, and the growth rule
(last quarter's median against the second quarter's, with a margin and a slack)."""

from __future__ import annotations

import random
from collections.abc import Callable

from ledgermq.chaos.soak.stats import GrowthRule, ProcSample, growth, latency_windows, percentile, window_for

MiB = 1024


def test_nearest_rank_percentiles() -> None:
    values = [float(v) for v in range(1, 1001)]  # 1..1000
    assert percentile(values, 50) == 500
    assert percentile(values, 99) == 990
    assert percentile(values, 99.9) == 999
    assert percentile([], 99) == 0.0
    assert percentile([7.0], 99.9) == 7.0


def test_latency_windows_split_by_end_time_and_count_failures_apart() -> None:
    sends = [(10.0, 0.001, True), (20.0, 0.003, True), (610.0, 0.5, True), (611.0, 3.0, False)]
    rows = latency_windows(sends, 600.0, 700.0)
    assert [(r["from_s"], r["to_s"]) for r in rows] == [(0.0, 600.0), (600.0, 700.0)]
    assert rows[0]["sends"] == 2 and rows[0]["failed"] == 0 and rows[0]["p50_ms"] == 1.0 and rows[0]["max_ms"] == 3.0
    assert rows[1]["sends"] == 1 and rows[1]["failed"] == 1 and rows[1]["p999_ms"] == 500.0
    assert window_for(3600) == 3600 and window_for(600) == 600
    assert len(latency_windows(sends, 600.0, 600.02)) == 1  # a run's end a little past its minutes


def _samples(
    node: str,
    anon_kib: Callable[[float], int],
    fds: Callable[[float], int],
    duration: float = 400,
    pid: Callable[[float], int] = lambda t: 1,
) -> list[ProcSample]:
    """One sample every 10 s; RSS is the anonymous memory plus 20 MiB of mapped files."""
    return [
        ProcSample(t, node, pid(t), anon_kib(t) + 20 * MiB, anon_kib(t), fds(t)) for t in range(0, int(duration), 10)
    ]


def test_a_steady_leak_is_flagged_and_a_flat_broker_is_not() -> None:
    rule = GrowthRule()
    leaky = _samples("leaky", lambda t: 40 * MiB + int(t) * 600, lambda t: 60)  # +240 MiB over the run
    flat = _samples("flat", lambda t: 40 * MiB + random.Random(t).randint(0, 4 * MiB), lambda t: 60)
    fd_leak = _samples("fd-leak", lambda t: 40 * MiB, lambda t: 60 + int(t) // 2)
    out = growth(leaky + flat + fd_leak, 400, rule)
    assert out["leaky"]["grew"] == ["anon_kib"] and out["leaky"]["verdict"] == "grew"
    assert out["flat"]["grew"] == [] and out["flat"]["verdict"] == "flat"
    assert out["fd-leak"]["grew"] == ["fds"]


def test_warm_up_and_restarts_do_not_count_as_growth() -> None:
    # Grows fast in the first quarter (warm-up), then flat; restarted at 300 s (a fresh, smaller process).
    def anon(t: float) -> int:
        base = 10 * MiB + int(min(t, 100)) * MiB
        return 20 * MiB if 300 <= t < 320 else base

    out = growth(_samples("n0", anon, lambda t: 60, pid=lambda t: 1 if t < 300 else 2), 400, GrowthRule())
    assert out["n0"]["grew"] == [] and out["n0"]["lives"] == 2


def test_too_few_samples_gives_no_verdict() -> None:
    out = growth(_samples("n0", lambda t: int(t) * MiB, lambda t: int(t), duration=60), 60, GrowthRule())
    assert out["n0"]["verdict"] == "too few samples" and out["n0"]["grew"] == []
