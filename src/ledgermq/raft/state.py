"""The node's mutable state and its role transitions, shared by the election and replication halves.

The role modules (``election.py``, ``replication.py``) are functions over this object,
as etcd's ``stepLeader(r, m)`` is over its ``raft`` struct; ``RaftNode`` is the only
public face.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from ledgermq.errors import InvariantViolation
from ledgermq.raft.config import RaftConfig
from ledgermq.raft.log import RaftLog
from ledgermq.raft.progress import Progress
from ledgermq.raft.storage import LogStorage
from ledgermq.raft.types import Entry, EntryKind, HardState, Message, Repair, Role


class RaftState:
    def __init__(
        self,
        config: RaftConfig,
        peers: Iterable[str],
        hard_state: HardState,
        storage: LogStorage,
        applied: int,
        rng: random.Random,
        repair: Repair | None = None,
    ) -> None:
        self.cfg = config
        self.id = config.node_id
        self.voters: tuple[str, ...] = tuple(sorted({*peers, config.node_id}))
        self._peers = tuple(v for v in self.voters if v != config.node_id)
        self.rng = rng
        self.term = hard_state.term
        self.vote = hard_state.vote
        self.log = RaftLog(storage, committed=hard_state.commit, applied=applied)
        if self.log.last_term > self.term:
            raise InvariantViolation(f"log term {self.log.last_term} above hard-state term {self.term}")
        self.role = Role.FOLLOWER
        self.lead: str | None = None
        self.prs: dict[str, Progress] = {}
        self.votes: dict[str, bool] = {}
        self.msgs: list[Message] = []
        self.msgs_after_persist: list[Message] = []
        """AppendResp acks held back until the entries they vouch for are durable here."""
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self.randomized_timeout = config.election_timeout_ticks
        self.lead_transferee: str | None = None
        self.bcast_pending = False
        """New entries or a new commit index wait for the next ``ready()`` to go to the peers."""
        self.leader_ticks = 0
        """Ticks since this node became leader; the clock for each peer's ``last_active``."""
        self.repair = repair
        """Set while this node's log has not yet regained what it lost (``Repair``)."""
        self.end_repair_if_done()
        self.reset_randomized_timeout()

    @property
    def repair_until(self) -> int:
        """The index the log must reach again; 0 when not repairing."""
        return self.repair.until if self.repair is not None else 0

    def end_repair_if_done(self) -> bool:
        """The durable log reached the repair bound: a normal member again. True if it ended now."""
        if self.repair is not None and self.log.persisted >= self.repair.until:
            self.repair = None
            return True
        return False

    @property
    def peers(self) -> tuple[str, ...]:
        """The other voters (fixed for the node's life: read per Ready and per broadcast)."""
        return self._peers

    def send(self, msg: Message) -> None:
        self.msgs.append(msg)

    def reset_randomized_timeout(self) -> None:
        t = self.cfg.election_timeout_ticks
        self.randomized_timeout = t + self.rng.randrange(t)

    def past_election_timeout(self) -> bool:
        return self.election_elapsed >= self.randomized_timeout

    def in_lease(self) -> bool:
        """We heard from a live leader less than one election timeout ago (thesis §4.2.3)."""
        cfg = self.cfg
        return cfg.check_quorum and self.lead is not None and self.election_elapsed < cfg.election_timeout_ticks

    # -- transitions ---------------------------------------------------------------------

    def _reset(self, term: int) -> None:
        if term != self.term:
            self.term = term
            self.vote = None
        self.lead = None
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self.reset_randomized_timeout()
        self.lead_transferee = None
        self.bcast_pending = False
        self.votes = {}
        self.prs = {}
        # Acks promised to an older term's leader would only confuse the new one.
        self.msgs_after_persist = [m for m in self.msgs_after_persist if m.term == term]

    def become_follower(self, term: int, lead: str | None) -> None:
        self._reset(term)
        self.role = Role.FOLLOWER
        self.lead = lead

    def become_pre_candidate(self) -> None:
        """Changes role only: the term and vote stay, so a failed pre-vote leaves no trace (thesis §9.6)."""
        if self.role is Role.LEADER:
            raise InvariantViolation("invalid transition leader -> pre-candidate")
        self.role = Role.PRE_CANDIDATE
        self.lead = None
        self.votes = {}
        self.election_elapsed = 0
        self.reset_randomized_timeout()

    def become_candidate(self) -> None:
        if self.role is Role.LEADER:
            raise InvariantViolation("invalid transition leader -> candidate")
        self._reset(self.term + 1)
        self.vote = self.id
        self.role = Role.CANDIDATE

    def become_leader(self) -> None:
        if self.role is Role.FOLLOWER:
            raise InvariantViolation("invalid transition follower -> leader")
        if self.repair is not None:
            raise InvariantViolation(f"a node repairing until {self.repair.until} cannot lead")
        self._reset(self.term)
        self.role = Role.LEADER
        self.lead = self.id
        self.leader_ticks = 0
        nxt = self.log.last_index + 1
        for v in self.voters:
            self.prs[v] = Progress(nxt, self.cfg.max_inflight)
        me = self.prs[self.id]
        me.match = self.log.persisted
        me.become_replicate()
        if self.cfg.append_noop_on_election:
            self.log.append([Entry(nxt, self.term, b"", EntryKind.NOOP)])

    def hard_state(self) -> HardState:
        return HardState(self.term, self.vote, self.log.applicable)
