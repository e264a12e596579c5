"""What a soak measures, as pure functions: send-latency percentiles per time window, and the
rule that flags a broker whose memory or descriptors grow over the run.

**Growth rule.** Per broker, over the run's samples (every life of the node together, by
time since the soak began): the median of the last quarter of the run is compared with
the median of the second quarter (the first quarter is warm-up: caches fill, segments
are mapped, clients connect). A measure grows when
``last_quarter_median > second_quarter_median * (1 + margin) + slack``. It is applied to
anonymous resident memory (``RssAnon``: the heap, where a leak shows; file-backed pages
of mapped segments come and go with the page cache and are reported, not judged) and to
open descriptors. A restart only lowers a node's figures, so it cannot cause a flag.
Fewer than ``MIN_SAMPLES`` samples in either quarter: no verdict ("too few samples").
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

MIN_SAMPLES = 3


@dataclass(frozen=True, slots=True)
class GrowthRule:
    margin: float = 0.25  # relative growth allowed
    rss_slack_kib: int = 32 * 1024  # absolute growth allowed on top (KiB)
    fd_slack: int = 32

    def describe(self) -> str:
        return (
            f"flag a broker when the median of the run's last quarter exceeds the median of its second "
            f"quarter by more than {self.margin:.0%} plus {self.rss_slack_kib // 1024} MiB (RssAnon) or "
            f"plus {self.fd_slack} descriptors (open fds); at least {MIN_SAMPLES} samples per quarter"
        )


@dataclass(frozen=True, slots=True)
class ProcSample:
    """One look at a broker process (/proc/<pid>): seconds since the soak began."""

    t: float
    node: str
    pid: int
    rss_kib: int
    anon_kib: int
    fds: int


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of already sorted values; 0.0 for none."""
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(round(q * len(sorted_values) / 100, 9)))  # 99.9 % of 1000 is 999, not 999.0000001
    return sorted_values[min(rank, len(sorted_values)) - 1]


def latency_summary(latencies: Iterable[float]) -> dict[str, Any]:
    """Count and p50 / p99 / p999 / max in milliseconds of send latencies in seconds."""
    values = sorted(latencies)
    return {
        "sends": len(values),
        "p50_ms": round(percentile(values, 50) * 1000, 2),
        "p99_ms": round(percentile(values, 99) * 1000, 2),
        "p999_ms": round(percentile(values, 99.9) * 1000, 2),
        "max_ms": round((values[-1] if values else 0.0) * 1000, 2),
    }


def latency_windows(
    sends: Iterable[tuple[float, float, bool]], window_s: float, duration_s: float
) -> list[dict[str, Any]]:
    """``sends``: (end time since the start, latency s, acknowledged). One row per window
    [k*window_s, (k+1)*window_s) up to ``duration_s``: the acknowledged sends' latency
    percentiles and the failed ones counted."""
    count = max(1, math.ceil(round(duration_s / window_s, 3)))  # a run of 600.02 s is one 10-minute window
    ok: list[list[float]] = [[] for _ in range(count)]
    failed = [0] * count
    for end, latency, acked in sends:
        k = min(count - 1, max(0, int(end // window_s)))
        if acked:
            ok[k].append(latency)
        else:
            failed[k] += 1
    return [
        {"from_s": round(k * window_s, 1), "to_s": round(min((k + 1) * window_s, duration_s), 1), "failed": failed[k]}
        | latency_summary(ok[k])
        for k in range(count)
    ]


def window_for(duration_s: float) -> float:
    """Per hour for runs of an hour or more, per 10 minutes for shorter ones."""
    return 3600.0 if duration_s >= 3600 else 600.0


def growth(samples: Sequence[ProcSample], duration_s: float, rule: GrowthRule) -> dict[str, dict[str, Any]]:
    """Per node: the quarter medians of RssAnon, RSS and descriptors, and whether the rule flags them."""
    out: dict[str, dict[str, Any]] = {}
    for node in sorted({s.node for s in samples}):
        mine = [s for s in samples if s.node == node]
        q2 = [s for s in mine if duration_s / 4 <= s.t < duration_s / 2]
        q4 = [s for s in mine if s.t >= duration_s * 3 / 4]
        row: dict[str, Any] = {"samples": len(mine), "lives": len({s.pid for s in mine})}
        if len(q2) < MIN_SAMPLES or len(q4) < MIN_SAMPLES:
            out[node] = row | {"verdict": "too few samples", "grew": []}
            continue
        grew = []
        for field, slack in (("anon_kib", rule.rss_slack_kib), ("fds", rule.fd_slack), ("rss_kib", None)):
            before = statistics.median(getattr(s, field) for s in q2)
            after = statistics.median(getattr(s, field) for s in q4)
            row[field] = {"q2_median": before, "q4_median": after, "max": max(getattr(s, field) for s in mine)}
            if slack is not None and after > before * (1 + rule.margin) + slack:
                grew.append(field)
        out[node] = row | {"verdict": "grew" if grew else "flat", "grew": grew}
    return out
