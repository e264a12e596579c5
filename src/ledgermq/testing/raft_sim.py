"""A seeded, deterministic simulation of a Raft cluster under loss, reordering, partitions and crashes.

One ``random.Random(seed)`` drives every choice (delays, faults, proposals and each
node's election jitter), so a seed replays exactly: ``python -m
ledgermq.testing.raft_sim SEED --nodes N [--calm] [--trace LINES]`` reruns one and prints
its trace tail on failure; ``A:B`` instead of a seed summarizes liveness over a range.

Time is in ticks; each tick is ``rounds_per_tick`` rounds of message delivery, disk
completion and Ready processing. A node's disk keeps the hard state (written at once,
as the contract requires before sending) and a ``MemoryStorage`` holding the entries
whose write completed; the node reads its durable entries from that same storage, as
DLedger's node reads its commit log. A crash drops pending writes, so the node
restarts over exactly what reached the storage. After every step the
``ClusterChecker`` runs.
"""

from __future__ import annotations

import argparse
import heapq
import random
from collections import deque
from dataclasses import dataclass, field, replace

from ledgermq.raft import Entry, HardState, Message, ProposalDroppedError, RaftConfig, RaftNode, Ready, Repair, Role
from ledgermq.raft.storage import MemoryStorage
from ledgermq.testing.raft_interaction import fmt_msg
from ledgermq.testing.raft_invariants import ClusterChecker, InvariantFailure
from ledgermq.testing.raft_sim_profile import CALM, SimConfig, SimStats, random_profile

__all__ = ["CALM", "SimConfig", "SimStats", "Simulation", "SimulationFailure", "random_profile", "run_seed"]

MAX_BACKLOG = 32
HEALED_LOSS = 0.05
RUNAWAY = 10_000
"""Bounds that turn a livelock or message storm into a failure instead of a hung test."""


class SimulationFailure(AssertionError):
    """A safety or liveness failure, with the seed to replay it and the last steps that led to it."""


@dataclass(slots=True)
class _Disk:
    hard_state: HardState = field(default_factory=HardState)
    storage: MemoryStorage = field(default_factory=MemoryStorage)
    """The durable log: what completed writes put there survives a crash, nothing else."""
    pending: deque[tuple[int, tuple[Entry, ...]]] = field(default_factory=deque)
    """(due round, entries) writes not yet durable; completed in order."""
    repair: Repair | None = None
    """The persisted repair marker of a node whose log rotted; cleared once the node says it
    is repaired (the driver deletes the marker file then)."""


class Simulation:
    def __init__(self, seed: int, config: SimConfig | None = None) -> None:
        self.seed = seed
        self.cfg = cfg = config or SimConfig()
        self.rng = random.Random(seed)
        self.ids = [f"n{i}" for i in range(cfg.nodes)]
        self.disks = {i: _Disk() for i in self.ids}
        self.nodes: dict[str, RaftNode | None] = {i: self._boot(i) for i in self.ids}
        self.checker = ClusterChecker()
        self.stats = SimStats(seed)
        self.now = 0  # rounds
        self.tick_no = 0
        self._queue: list[tuple[int, int, Message]] = []
        self._seq = 0
        self.blocked: set[tuple[str, str]] = set()
        self.loss = cfg.loss
        self.stalled_until: dict[str, int] = {}
        self.trace: deque[tuple[int, int, str, Message | Ready | None]] = deque(maxlen=60)
        """(tick, round, text, object): formatting waits until a failure needs it."""
        self._proposal_no = 0
        self.damaged: dict[str, int] = {}
        """Nodes whose log rotted, until their durable log is back to where it was."""

    # -- running ---------------------------------------------------------------------

    def run(self) -> SimStats:
        try:
            self._run()
        except (InvariantFailure, SimulationFailure) as exc:
            raise SimulationFailure(self.describe(str(exc))) from exc
        return self.stats

    def describe(self, reason: str) -> str:
        tail = "\n".join(f"  {line}" for line in self.trace_lines())
        return f"seed={self.seed} nodes={self.cfg.nodes} tick={self.tick_no}: {reason}\ntrace tail:\n{tail}"

    def _run(self) -> None:
        cfg = self.cfg
        for _ in range(cfg.chaos_ticks):
            self._tick(faults=True)
        self._heal_all()
        heal_start = self.tick_no
        seen = self.checker.committed_index
        last_try = -cfg.election_timeout
        while self.stats.recovery_ticks is None or self.stats.heal_commit_ticks is None:
            if self.tick_no - heal_start >= cfg.heal_ticks:
                raise SimulationFailure(f"no progress within {cfg.heal_ticks} ticks after faults healed")
            # Clients retry: a proposal can die with the leader that took it.
            if self.tick_no - last_try >= cfg.election_timeout and self._propose_heal():
                last_try = self.tick_no
            if self.stats.recovery_ticks is None and self._serving():
                self.stats.recovery_ticks = self.tick_no - heal_start
            self._tick(faults=False)
            top = self.checker.committed_index
            if any(self.checker.committed_entry(i).data == b"heal" for i in range(seen + 1, top + 1)):
                self.stats.heal_commit_ticks = self.tick_no - heal_start
            seen = top
        # Let the cluster settle so the final cross-check sees caught-up logs too.
        for _ in range(3 * cfg.election_timeout):
            self._tick(faults=False)
        live = [n for n in self.nodes.values() if n is not None]
        self.checker.check_logs_agree(live)
        self.stats.committed = self.checker.committed_index
        self.stats.terms = max(n.term for n in live)

    def _serving(self) -> bool:
        """A leader has committed an entry of its own term, so it can commit new writes."""
        leader = self.leader()
        return leader is not None and leader.commit > 0 and leader.log_term(leader.commit) == leader.term

    def _propose_heal(self) -> bool:
        leader = self.leader()
        if leader is None:
            return False
        try:
            index = leader.propose(b"heal")
        except ProposalDroppedError:
            return False
        self._after(leader, f"{leader.id} propose heal -> {index}")
        return True

    def leader(self) -> RaftNode | None:
        leaders = [n for n in self.nodes.values() if n is not None and n.role is Role.LEADER]
        return max(leaders, key=lambda n: n.term) if leaders else None

    def _tick(self, faults: bool) -> None:
        self.tick_no += 1
        for nid in self.ids:
            n = self.nodes[nid]
            if n is not None:
                n.tick()
                self._after(n, nid + " tick")
        for _ in range(self.cfg.rounds_per_tick):
            self._round(faults)
        if self.stats.first_leader_tick is None and self.leader() is not None:
            self.stats.first_leader_tick = self.tick_no

    def _round(self, faults: bool) -> None:
        """One round: maybe a fault or input, then disks, Ready processing and due messages.

        Faults land between any two rounds, not only on tick boundaries, so a crash can
        fall between a Ready and the durability of its entries.
        """
        self.now += 1
        rng, cfg = self.rng, self.cfg
        per_round = 1 / cfg.rounds_per_tick
        if faults and rng.random() < cfg.fault_rate * per_round:
            self._fault()
        if faults and rng.random() < cfg.propose_rate * per_round:
            self._propose()
        if faults and rng.random() < cfg.transfer_rate * per_round:
            self._transfer()
        if faults and cfg.corrupt_rate and rng.random() < cfg.corrupt_rate * per_round:
            self._corrupt(rng.choice(self.ids))
        for nid in self.ids:
            self._complete_writes(nid)
        for nid in self.ids:
            self._drain_ready(nid)
        while self._queue and self._queue[0][0] <= self.now:
            _, _, m = heapq.heappop(self._queue)
            n = self.nodes[m.dst]
            if n is None or (m.src, m.dst) in self.blocked:
                continue
            self.stats.delivered += 1
            n.step(m)
            self._after(n, "deliver ", m)
            self._drain_ready(m.dst)

    def _after(self, n: RaftNode, what: str, obj: Message | None = None) -> None:
        self._log(what, obj)
        self.checker.check_node(n)
        until = self.damaged.get(n.id)
        if until is not None and n.persisted_index >= until:
            del self.damaged[n.id]
        disk = self.disks[n.id]
        if disk.repair is not None and n.repair_until == 0:
            disk.repair = None  # the core says its durable log regained what it lost
            self.stats.repairs_done += 1
            self._log(f"{n.id} repaired")

    def _log(self, text: str, obj: Message | Ready | None = None) -> None:
        self.trace.append((self.tick_no, self.now, text, obj))

    def trace_lines(self) -> list[str]:
        out = []
        for tick, rnd, text, obj in self.trace:
            detail = "" if obj is None else fmt_msg(obj) if isinstance(obj, Message) else _fmt_ready(obj)
            out.append(f"t{tick}.r{rnd} {text}{detail}")
        return out

    # -- the caller's loop, as docs/raft.md describes it --------------------------------

    def _drain_ready(self, nid: str) -> None:
        n = self.nodes[nid]
        for _ in range(RUNAWAY):
            if n is None or not n.has_ready():
                return
            rd = n.ready()
            disk = self.disks[nid]
            if rd.hard_state is not None:
                self.checker.check_hard_state(nid, disk.hard_state, rd.hard_state)
                disk.hard_state = rd.hard_state
            if rd.entries_to_persist:
                self.checker.check_persist(n, rd.entries_to_persist)
                due = self.now + self.rng.randrange(self.cfg.max_disk_delay_rounds + 1)
                if disk.pending:
                    due = max(due, disk.pending[-1][0])
                due = max(due, self.stalled_until.get(nid, 0))
                disk.pending.append((due, rd.entries_to_persist))
            for m in rd.messages:
                self._send(m)
            if self.cfg.acks_at_persist:
                self._complete_writes(nid)  # what is due now is written while carrying out the Ready
            self.checker.check_apply(nid, rd.committed_entries)
            n.advance(rd)
            self._log(f"{nid} ready ", rd)
            self._complete_writes(nid)
        raise SimulationFailure(f"{nid} still has a Ready after {RUNAWAY} in a row (livelock)")

    def _complete_writes(self, nid: str) -> None:
        n, disk = self.nodes[nid], self.disks[nid]
        while n is not None and disk.pending and disk.pending[0][0] <= self.now:
            _, entries = disk.pending.popleft()
            disk.storage.append(entries)  # drops the stored suffix from entries[0].index on
            last = entries[-1]
            n.persisted(last.index, last.term)
            p = n.persisted_index
            if p > disk.storage.last_index():
                raise InvariantFailure(f"{nid} counts {p} as persisted but its disk holds {disk.storage.last_index()}")
            self._after(n, f"{nid} persisted {last.index}/{last.term}")
            if self.cfg.acks_at_persist:
                for m in n.take_persisted_acks():
                    self._send(m)

    def _send(self, m: Message) -> None:
        rng = self.rng
        if rng.random() < self.loss:
            return
        if len(self._queue) > RUNAWAY * 10:
            raise SimulationFailure(f"{len(self._queue)} messages in flight (message storm)")
        copies = 2 if rng.random() < self.cfg.duplicate else 1
        for _ in range(copies):
            self._seq += 1
            heapq.heappush(self._queue, (self.now + 1 + rng.randrange(self.cfg.max_delay_rounds), self._seq, m))

    # -- inputs and faults -----------------------------------------------------------------

    def _propose(self) -> None:
        up = [n for n in self.nodes.values() if n is not None]
        if not up:
            return
        leader = self.leader()
        n = leader if leader is not None and self.rng.random() < 0.8 else self.rng.choice(up)
        if n.last_index - n.commit > MAX_BACKLOG:
            return  # clients back off from a leader that cannot commit, as DLedger's pending limit makes them
        self._proposal_no += 1
        try:
            index = n.propose(b"p%d" % self._proposal_no)
        except ProposalDroppedError as exc:
            self._log(f"{n.id} propose dropped: {type(exc).__name__}")
            return
        self._after(n, f"{n.id} propose p{self._proposal_no} -> {index}")

    def _transfer(self) -> None:
        leader = self.leader()
        if leader is None:
            return
        target = self.rng.choice(self.ids)
        self.stats.transfers += 1
        leader.transfer_leader(target)
        self._after(leader, f"{leader.id} transfer leadership to {target}")

    def _fault(self) -> None:
        kinds = ("crash", "crash_leader", "restart", "isolate_leader", "split", "one_way", "stall_disk", "heal")
        kind = self.rng.choice(kinds)
        if kind == "crash":
            self._crash(self.rng.choice(self.ids))
        elif kind == "crash_leader":
            leader = self.leader()
            if leader is not None:
                self._crash(leader.id)
        elif kind == "restart":
            down = [i for i in self.ids if self.nodes[i] is None]
            if down:
                self._restart(self.rng.choice(down))
        elif kind == "isolate_leader":
            leader = self.leader()
            if leader is not None:
                others = [i for i in self.ids if i != leader.id]
                minority = self.rng.sample(others, (self.cfg.nodes - 1) // 2 - 1 + (self.cfg.nodes % 2 == 0))
                self._split({leader.id, *minority})
        elif kind == "split":
            self._split(set(self.rng.sample(self.ids, self.rng.randrange(1, self.cfg.nodes))))
        elif kind == "stall_disk":
            # An fsync that hangs: writes queue up behind it, and a crash meanwhile loses them all.
            nid = self.rng.choice(self.ids)
            self.stalled_until[nid] = self.now + self.rng.randrange(3, 40) * self.cfg.rounds_per_tick
            self._log(f"stall {nid}'s disk until r{self.stalled_until[nid]}")
        elif kind == "one_way":
            a, b = self.rng.sample(self.ids, 2)
            self.blocked.add((a, b))
            self.stats.partitions += 1
            self._log(f"block {a}->{b}")
        else:
            self.blocked.clear()
            self._log("heal network")

    def _split(self, side: set[str]) -> None:
        self.blocked = {(a, b) for a in self.ids for b in self.ids if (a in side) != (b in side)}
        self.stats.partitions += 1
        self._log(f"partition {sorted(side)} | {sorted(set(self.ids) - side)}")

    def _crash(self, nid: str) -> None:
        if self.nodes[nid] is None:
            return
        self.nodes[nid] = None
        self.disks[nid].pending.clear()
        self.stats.crashes += 1
        self._log(f"crash {nid}")

    def _corrupt(self, nid: str) -> None:
        """Rot in ``nid``'s log, found by its recovery: everything from a random entry on is
        cut, the commit it recorded falls below the cut, and it restarts repairing until its
        old last index (the entries it may have acknowledged). Skipped while another node is
        still damaged: a majority losing the same committed entry is beyond any protocol."""
        if any(i != nid for i in self.damaged):
            return
        disk = self.disks[nid]
        last = disk.storage.last_index()
        if last == 0:
            return
        self._crash(nid)
        cut = self.rng.randrange(1, last + 1)
        old = disk.repair
        until = max(last, disk.hard_state.commit, old.until if old is not None else 0)
        last_term = max(disk.storage.term(last), old.last_term if old is not None else 0)
        disk.storage.truncate_after(cut - 1)
        disk.hard_state = replace(disk.hard_state, commit=min(disk.hard_state.commit, cut - 1))
        disk.repair = Repair(until, last_term) if self.cfg.repair_rule else None
        self.damaged[nid] = until
        self.stats.corruptions += 1
        self._log(f"rot in {nid}'s log from {cut} (had {last}); repairing until {until}")
        self._restart(nid)

    def _restart(self, nid: str) -> None:
        n = self.nodes[nid] = self._boot(nid)
        self.checker.restarted(nid, applied=0)
        disk = self.disks[nid]
        self._after(n, f"restart {nid} with {disk.storage.last_index()} entries, {disk.hard_state}")

    def _boot(self, nid: str) -> RaftNode:
        cfg, disk = self.cfg, self.disks[nid]
        rc = RaftConfig(
            nid,
            election_timeout_ticks=cfg.election_timeout,
            heartbeat_ticks=cfg.heartbeat,
            pre_vote=cfg.pre_vote,
            check_quorum=cfg.check_quorum,
            max_inflight=cfg.max_inflight,
            max_entries_per_append=cfg.max_entries_per_append,
            append_noop_on_election=cfg.append_noop,
            eager_commit_notice=cfg.eager_commit_notice,
        )
        rng = random.Random(self.rng.getrandbits(64))
        return RaftNode(rc, self.ids, disk.hard_state, disk.storage, rng=rng, repair=disk.repair)

    def _heal_all(self) -> None:
        """End the faults: reconnect, restart, and cap loss at HEALED_LOSS so liveness has a fair bound."""
        self.blocked.clear()
        self.loss = min(self.loss, HEALED_LOSS)
        self.stalled_until.clear()
        for nid in self.ids:
            if self.nodes[nid] is None:
                self._restart(nid)
        self._log("heal everything")


def _fmt_ready(rd: Ready) -> str:
    parts = [rd.soft_state.role.value]
    if rd.hard_state is not None:
        parts.append(f"hs={rd.hard_state.term}/{rd.hard_state.vote}/{rd.hard_state.commit}")
    for name, ents in (("persist", rd.entries_to_persist), ("apply", rd.committed_entries)):
        if ents:
            parts.append(f"{name}[{ents[0].index}..{ents[-1].index}]")
    if rd.messages:
        parts.append(f"msgs={len(rd.messages)}")
    return " ".join(parts)


def run_seed(seed: int, nodes: int = 3, calm: bool = False, trace: int = 60, **overrides: object) -> SimStats:
    """Run one seed; raises SimulationFailure with the replay recipe on any violation."""
    base = random_profile(random.Random(f"profile-{seed}"), nodes)
    cfg = replace(base, **{**(CALM if calm else {}), **overrides})  # type: ignore[arg-type]
    sim = Simulation(seed, cfg)
    sim.trace = deque(maxlen=trace)
    try:
        return sim.run()
    except SimulationFailure as exc:
        recipe = f"replay: python -m ledgermq.testing.raft_sim {seed} --nodes {nodes}{' --calm' if calm else ''}"
        raise SimulationFailure(f"{exc}\n{recipe} --trace 500") from exc


def summarize(stats: list[SimStats]) -> str:
    first = sorted(s.first_leader_tick for s in stats if s.first_leader_tick is not None)
    recovery = sorted(s.recovery_ticks for s in stats if s.recovery_ticks is not None)
    heal = sorted(s.heal_commit_ticks for s in stats if s.heal_commit_ticks is not None)

    def pct(xs: list[int], q: float) -> int:
        return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else -1

    return (
        f"{len(stats)} seeds; first leader tick p50={pct(first, 0.5)} p99={pct(first, 0.99)} max={pct(first, 1)};"
        f" leader serving after heal p50={pct(recovery, 0.5)} p99={pct(recovery, 0.99)} max={pct(recovery, 1)};"
        f" new proposal committed p50={pct(heal, 0.5)} p99={pct(heal, 0.99)} max={pct(heal, 1)};"
        f" committed total={sum(s.committed for s in stats)}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ledgermq.testing.raft_sim", description=__doc__)
    parser.add_argument("seed", help="one seed, or a range A:B for a summary")
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--calm", action="store_true", help="no faults, loss or duplication")
    parser.add_argument("--trace", type=int, default=60, help="trace lines to print on failure")
    args = parser.parse_args(argv)
    lo, _, hi = args.seed.partition(":")
    seeds = range(int(lo), int(hi)) if hi else range(int(lo), int(lo) + 1)
    stats: list[SimStats] = []
    for seed in seeds:
        try:
            stats.append(run_seed(seed, args.nodes, calm=args.calm, trace=args.trace))
        except SimulationFailure as exc:
            print(exc)
            return 1
    print(stats[0] if len(stats) == 1 else summarize(stats))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
