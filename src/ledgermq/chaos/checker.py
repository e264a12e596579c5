"""Verdicts on a run: pure functions of the attempts, the faults and what was read back.

* **lost**: an acknowledged (SEND_OK) sequence number a source does not hold (a loss the
  layout's flush mode allows through a power loss is counted apart: ``promise.py``);
* **corrupt served**: a chaos message a source served with a body other than the one
  sent (by content hash), or an answer whose records did not decode;
* **duplicates**: a sequence number held at more than one offset of one source's queues;
* **misplaced**: an acknowledged message whose (queue, offset) holds something else;
* **order**: within a queue, the acknowledged numbers of one sender must increase with the
  offset (a sender waits for each answer, so its acknowledged sends are ordered in time);
* **divergence**: the same (queue, offset) holding different messages (or the same
  message with different content) on the master and another broker, and offsets a
  replica holds past the master's end;
* **unavailability windows** (openchaos' RTO): for each fault, from the start of the first
  failed send (any outcome but SEND_OK) that ends after the fault began to the earliest
  end of a SEND_OK that started after it; 0 when no send failed; None when none succeeded
  before the next fault. Summarised as min/median/max per fault label (kind:role).
  A client that rides a fault out inside its send calls (waiting for a new master,
  retrying there) fails nothing, and its window is 0; so each fault also gets
* **resume**: from the fault's injection to the earliest end of a SEND_OK that began at
  or after it (None when none did before the next fault): how long writes stalled,
  failed or not. A fault that misses the sends' path shows a few milliseconds.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ledgermq.chaos.faults import FaultRecord
from ledgermq.chaos.readback import ReadBack
from ledgermq.chaos.workload import Attempt

EXAMPLES = 10  # how many of each problem a report lists


@dataclass(slots=True)
class SourceVerdict:
    source: str
    records: int
    chaos_records: int
    lost: list[int]
    duplicates: list[int]
    misplaced: list[int]
    order_violations: list[str]
    unacked_stored: int  # sends that failed or timed out and were stored anyway
    errors: list[str]
    corrupt: list[str] = field(default_factory=list)  # "q<id>@<offset>: seq <n>" served with other content
    corrupt_pulls: int = 0

    @property
    def corrupt_served(self) -> int:
        return len(self.corrupt) + self.corrupt_pulls

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "records": self.records,
            "chaos_records": self.chaos_records,
            "lost": len(self.lost),
            "lost_examples": self.lost[:EXAMPLES],
            "duplicates": len(self.duplicates),
            "duplicate_examples": self.duplicates[:EXAMPLES],
            "misplaced": len(self.misplaced),
            "misplaced_examples": self.misplaced[:EXAMPLES],
            "order_violations": len(self.order_violations),
            "order_examples": self.order_violations[:EXAMPLES],
            "unacked_stored": self.unacked_stored,
            "corrupt_served": self.corrupt_served,
            "corrupt_examples": self.corrupt[:EXAMPLES],
            "undecodable_answers": self.corrupt_pulls,
            "errors": self.errors[:EXAMPLES],
        }


@dataclass(slots=True)
class Divergence:
    replica: str
    differing: list[str]  # "q<id>@<offset>: master <seq> / replica <seq>"
    replica_ahead: int  # offsets the replica holds past the master's end of that queue
    master_ahead: int  # offsets the master holds past the replica's end (lag, not divergence)

    @property
    def diverged(self) -> bool:
        return bool(self.differing) or self.replica_ahead > 0

    def to_json(self) -> dict[str, Any]:
        return {
            "replica": self.replica,
            "differing": len(self.differing),
            "examples": self.differing[:EXAMPLES],
            "replica_ahead": self.replica_ahead,
            "master_ahead": self.master_ahead,
        }


@dataclass(slots=True)
class Window:
    index: int
    label: str
    seconds: float | None  # None: no SEND_OK after the first failure before the next fault
    failed_sends: int
    at_least_s: float = 0.0  # when not recovered: from the first failure to the next fault (or the run's end)
    slowest_send_s: float = 0.0  # the longest attempt in the fault's span (a stall that failed nothing shows here)
    resume_s: float | None = None  # injection -> the first SEND_OK of a send begun after it


@dataclass(slots=True)
class WindowSummary:
    label: str
    faults: int
    unavailable: int  # faults with at least one failed send
    not_recovered: int
    min_s: float
    median_s: float
    max_s: float
    open_at_least_s: float = 0.0  # the longest lower bound among the windows that never closed
    slowest_send_s: float = 0.0  # the longest send attempt during any of these faults
    resume_median_s: float = 0.0  # over the faults with a resume (see the module notes)
    resume_max_s: float = 0.0
    not_resumed: int = 0  # faults with no SEND_OK begun after them before the next fault
    resume_min_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "faults": self.faults,
            "unavailable": self.unavailable,
            "not_recovered": self.not_recovered,
            "open_at_least_s": round(self.open_at_least_s, 3),
            "slowest_send_s": round(self.slowest_send_s, 3),
            "resume_min_s": round(self.resume_min_s, 3),
            "resume_median_s": round(self.resume_median_s, 3),
            "resume_max_s": round(self.resume_max_s, 3),
            "not_resumed": self.not_resumed,
            "min_s": round(self.min_s, 3),
            "median_s": round(self.median_s, 3),
            "max_s": round(self.max_s, 3),
        }


@dataclass(slots=True)
class Verdict:
    attempts: int
    acked: int
    outcomes: dict[str, int]
    sources: list[SourceVerdict]
    divergence: list[Divergence]
    windows: list[Window]
    summaries: list[WindowSummary]
    notes: list[str] = field(default_factory=list)
    allowed: dict[int, str] = field(default_factory=dict)  # seq -> why the mode allows losing it
    promise: str = ""
    unrepaired: list[str] = field(default_factory=list)  # data faults not found or repaired in time
    # the run did not do what it was asked: its fault cycles stopped early, or a node did not
    # come back from a fault. Nothing lost in the part that ran is no pass for the rest.
    incomplete: list[str] = field(default_factory=list)

    def _missing(self) -> set[int]:
        missing: set[int] = set()
        for s in self.sources:
            missing.update(s.lost)
        return missing

    @property
    def lost(self) -> int:
        """Acknowledged messages missing from at least one source, the allowed ones aside."""
        return len(self._missing() - self.allowed.keys())

    @property
    def lost_allowed(self) -> list[int]:
        """Acknowledged messages missing that the mode allows to lose (a power loss)."""
        return sorted(self._missing() & self.allowed.keys())

    @property
    def corrupt_served(self) -> int:
        return sum(s.corrupt_served for s in self.sources)

    @property
    def diverged(self) -> bool:
        return any(d.diverged for d in self.divergence)

    @property
    def failed(self) -> bool:
        return (
            self.lost > 0 or self.diverged or self.corrupt_served > 0 or bool(self.unrepaired) or bool(self.incomplete)
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "attempts": self.attempts,
            "acked": self.acked,
            "outcomes": self.outcomes,
            "lost": self.lost,
            "corrupt_served": self.corrupt_served,
            "promise": self.promise,
            "lost_allowed": len(self.lost_allowed),
            "lost_allowed_examples": [f"{seq}: {self.allowed[seq]}" for seq in self.lost_allowed[:EXAMPLES]],
            "diverged": self.diverged,
            "unrepaired": self.unrepaired,
            "incomplete": self.incomplete,
            "failed": self.failed,
            "sources": [s.to_json() for s in self.sources],
            "divergence": [d.to_json() for d in self.divergence],
            "windows": [w.to_json() for w in self.summaries],
            "fault_windows": [
                {
                    "index": w.index,
                    "label": w.label,
                    "seconds": w.seconds,
                    "failed_sends": w.failed_sends,
                    "at_least_s": w.at_least_s,
                    "slowest_send_s": round(w.slowest_send_s, 3),
                    "resume_s": None if w.resume_s is None else round(w.resume_s, 3),
                }
                for w in self.windows
            ],
            "notes": self.notes,
        }


def check_source(read: ReadBack, attempts: Sequence[Attempt]) -> SourceVerdict:
    acked = {a.seq: a for a in attempts if a.acked}
    failed = {a.seq for a in attempts if not a.acked}
    where: dict[int, list[tuple[int, int]]] = {}
    order: list[str] = []
    records = 0
    for qid in sorted(read.queues):
        last_by_sender: dict[int, int] = {}
        seen_in_queue: set[int] = set()
        for offset in sorted(read.queues[qid]):
            records += 1
            entry = read.queues[qid][offset]
            if entry is None:
                continue
            seq, sender = entry
            where.setdefault(seq, []).append((qid, offset))
            if seq not in acked or seq in seen_in_queue:
                continue
            seen_in_queue.add(seq)
            last = last_by_sender.get(sender)
            if last is not None and seq < last:
                order.append(f"q{qid}@{offset}: sender {sender} seq {seq} after {last}")
            last_by_sender[sender] = max(seq, last if last is not None else seq)
    lost = sorted(seq for seq in acked if seq not in where)
    dups = sorted(seq for seq, places in where.items() if len(places) > 1)
    sent = {a.seq: a.digest for a in attempts if a.digest}
    corrupt = [
        f"q{qid}@{offset}: seq {entry[0]}"
        for qid, digests in sorted(read.digests.items())
        for offset, digest in sorted(digests.items())
        if (entry := read.queues.get(qid, {}).get(offset)) is not None and entry[0] in sent and sent[entry[0]] != digest
    ]
    misplaced = sorted(
        seq
        for seq, a in acked.items()
        if seq in where
        and a.queue_offset >= 0
        and read.queues.get(a.queue_id, {}).get(a.queue_offset) != (seq, a.sender)
    )
    return SourceVerdict(
        read.source,
        records,
        len(where),
        lost,
        dups,
        misplaced,
        order,
        sum(1 for seq in where if seq in failed),
        list(read.errors),
        corrupt,
        read.corrupt_pulls,
    )


def check_divergence(master: ReadBack, replica: ReadBack) -> Divergence:
    differing: list[str] = []
    replica_ahead = master_ahead = 0
    for qid in sorted(set(master.queues) | set(replica.queues)):
        m, r = master.queues.get(qid, {}), replica.queues.get(qid, {})
        m_end = max(m) + 1 if m else 0
        r_end = max(r) + 1 if r else 0
        md, rd = master.digests.get(qid, {}), replica.digests.get(qid, {})
        for offset in sorted(set(m) & set(r)):
            if m[offset] != r[offset]:
                differing.append(f"q{qid}@{offset}: master {_seq(m[offset])} / {replica.source} {_seq(r[offset])}")
            elif md.get(offset) != rd.get(offset):
                differing.append(f"q{qid}@{offset}: {_seq(m[offset])} with other content on {replica.source}")
        replica_ahead += max(0, r_end - m_end)
        master_ahead += max(0, m_end - r_end)
    return Divergence(replica.source, differing, replica_ahead, master_ahead)


def _seq(entry: tuple[int, int] | None) -> str:
    return "non-chaos record" if entry is None else str(entry[0])


def windows(attempts: Sequence[Attempt], faults: Sequence[FaultRecord], run_end: float) -> list[Window]:
    ordered = sorted(attempts, key=lambda a: a.start)
    starts = sorted(f.injected_at for f in faults)
    out = []
    for f in sorted(faults, key=lambda f: f.injected_at):
        later = [s for s in starts if s > f.injected_at]
        horizon = later[0] if later else run_end
        span = [a for a in ordered if a.end >= f.injected_at and a.start < horizon]
        slowest = max((a.end - a.start for a in span), default=0.0)
        resumed = min(
            (a.end for a in ordered if a.acked and f.injected_at <= a.start < horizon),
            default=None,
        )
        resume = None if resumed is None else resumed - f.injected_at
        failures = [a for a in span if not a.acked]
        if not failures:
            out.append(Window(f.index, f.label, 0.0, 0, slowest_send_s=slowest, resume_s=resume))
            continue
        first = failures[0]
        # The earliest-ending SEND_OK that started after the first failure: with several
        # senders, one that started first may still be waiting on a stopped broker.
        ok = min(
            (a for a in ordered if a.acked and a.start >= first.start and a.start < horizon),
            key=lambda a: a.end,
            default=None,
        )
        if ok is None:
            out.append(Window(f.index, f.label, None, len(failures), horizon - first.start, slowest, resume))
        else:
            out.append(
                Window(f.index, f.label, ok.end - first.start, len(failures), slowest_send_s=slowest, resume_s=resume)
            )
    return out


def summarise(ws: Iterable[Window]) -> list[WindowSummary]:
    by_label: dict[str, list[Window]] = {}
    for w in ws:
        by_label.setdefault(w.label, []).append(w)
    out = []
    for label in sorted(by_label):
        group = by_label[label]
        secs = [w.seconds for w in group if w.seconds is not None]
        resumes = [w.resume_s for w in group if w.resume_s is not None]
        out.append(
            WindowSummary(
                label,
                len(group),
                sum(1 for w in group if w.failed_sends),
                sum(1 for w in group if w.seconds is None),
                min(secs) if secs else 0.0,
                statistics.median(secs) if secs else 0.0,
                max(secs) if secs else 0.0,
                max((w.at_least_s for w in group if w.seconds is None), default=0.0),
                max(w.slowest_send_s for w in group),
                statistics.median(resumes) if resumes else 0.0,
                max(resumes, default=0.0),
                len(group) - len(resumes),
                min(resumes, default=0.0),
            )
        )
    return out


def check(
    attempts: Sequence[Attempt],
    faults: Sequence[FaultRecord],
    reads: Sequence[ReadBack],
    run_end: float,
    master_source: str = "master",
    allowed: dict[int, str] | None = None,
    promise: str = "",
) -> Verdict:
    """``reads``: one per source; the one named ``master_source`` is compared with every
    other broker source (a source named "client" is checked, not compared). ``allowed``:
    the acknowledged messages the mode may lose, and why (``promise.allowed_losses``)."""
    by_name = {r.source: r for r in reads}
    master = by_name.get(master_source)
    divergence = [
        check_divergence(master, r) for r in reads if master is not None and r.source not in (master_source, "client")
    ]
    ws = windows(attempts, faults, run_end)
    return Verdict(
        len(attempts),
        sum(1 for a in attempts if a.acked),
        dict(Counter(a.outcome for a in attempts)),
        [check_source(r, attempts) for r in reads],
        divergence,
        ws,
        summarise(ws),
        allowed=dict(allowed or {}),
        promise=promise,
    )
