"""``RaftNode``: the public face of the core. Inputs are ``step``/``tick``/``propose``; output is ``Ready``.

``step`` settles term comparisons in one place (Raft §5.1: a higher term converts us
to follower, a lower term is stale) and then hands the message to the role's
handler, as etcd's ``Step`` does. Time is a tick count and randomness a seeded
``random.Random``, so a run replays exactly.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence

from ledgermq.errors import InvariantViolation
from ledgermq.raft import election, quorum, replication
from ledgermq.raft.config import RaftConfig
from ledgermq.raft.errors import LeaderTransferInProgressError, NotLeaderError
from ledgermq.raft.progress import ProgressState
from ledgermq.raft.state import RaftState
from ledgermq.raft.storage import LogStorage, MemoryStorage
from ledgermq.raft.types import Entry, HardState, Message, MsgType, Ready, Repair, Role, SoftState

__all__ = ["RaftConfig", "RaftNode"]

_VOTES = (MsgType.VOTE, MsgType.PRE_VOTE)


class RaftNode:
    """One Raft peer; not thread-safe (drive it from one loop).

    ``hard_state`` and ``storage`` are what the caller persisted before a restart;
    everything in storage counts as durable, and the caller keeps writing to the same
    storage object (see docs/raft.md). ``entries=`` is a shorthand for
    ``storage=MemoryStorage(entries)`` kept for tests. ``applied`` is how far the
    caller's state machine already got, so those entries are not handed out again.
    ``repair``: the storage lost entries this node once held (see ``Repair``).
    """

    def __init__(
        self,
        config: RaftConfig,
        peers: Iterable[str],
        hard_state: HardState | None = None,
        storage: LogStorage | None = None,
        *,
        applied: int = 0,
        rng: random.Random | None = None,
        entries: Sequence[Entry] | None = None,
        repair: Repair | None = None,
    ) -> None:
        if isinstance(storage, (list, tuple)):
            # The fourth positional argument used to be the restored entries.
            raise TypeError("RaftNode's fourth argument is a LogStorage now; pass entries=... for a list")
        if entries is not None:
            if storage is not None:
                raise ValueError("pass either storage or entries, not both")
            storage = MemoryStorage(entries)
        rng = rng if rng is not None else random.Random(config.seed)
        self._storage = storage if storage is not None else MemoryStorage()
        self._st = RaftState(config, peers, hard_state or HardState(), self._storage, applied, rng, repair)
        self._prev_hs = self._st.hard_state()
        self._prev_ss = self.soft_state()
        self._outstanding: Ready | None = None

    # -- read-only views ---------------------------------------------------------------

    @property
    def id(self) -> str:
        return self._st.id

    @property
    def voters(self) -> tuple[str, ...]:
        return self._st.voters

    @property
    def term(self) -> int:
        return self._st.term

    @property
    def vote(self) -> str | None:
        return self._st.vote

    @property
    def role(self) -> Role:
        return self._st.role

    @property
    def leader(self) -> str | None:
        return self._st.lead

    @property
    def commit(self) -> int:
        """The commit index as this node knows it (may run ahead of what is durable here)."""
        return self._st.log.committed

    @property
    def applied(self) -> int:
        return self._st.log.applied

    @property
    def last_index(self) -> int:
        return self._st.log.last_index

    @property
    def persisted_index(self) -> int:
        return self._st.log.persisted

    @property
    def repair_until(self) -> int:
        """While this node repairs a damaged log: the index its durable log must reach again
        before it votes freely, campaigns or counts toward a quorum; 0 otherwise."""
        return self._st.repair_until

    @property
    def lead_transferee(self) -> str | None:
        return self._st.lead_transferee

    @property
    def storage(self) -> LogStorage:
        """The storage this node reads durable entries from (and the caller writes to)."""
        return self._storage

    def log_term(self, index: int) -> int | None:
        return self._st.log.term(index)

    def entries(self, lo: int, hi: int) -> list[Entry]:
        """Entries ``[lo, hi)`` of the log: durable ones read from storage, the rest from memory."""
        return self._st.log.slice(lo, hi)

    def soft_state(self) -> SoftState:
        return SoftState(self._st.lead, self._st.role)

    def progress(self) -> dict[str, tuple[int, int, ProgressState]]:
        """The leader's view of each voter as ``(match, next, state)``; empty on a non-leader."""
        return {v: (pr.match, pr.next, pr.state) for v, pr in self._st.prs.items()}

    def recently_active(self) -> frozenset[str]:
        """On a leader, the voters it heard from within an election timeout (itself included),
        by check-quorum's measure; empty elsewhere. Retention uses it to tell a connected
        follower, whose needs it respects, from a silent one."""
        st = self._st
        if st.role is not Role.LEADER:
            return frozenset()
        now, timeout = st.leader_ticks, st.cfg.election_timeout_ticks
        return frozenset(v for v, pr in st.prs.items() if v == st.id or now - pr.last_active < timeout)

    # -- inputs ------------------------------------------------------------------------

    def tick(self) -> None:
        """Advance logical time by one tick; the caller decides how long a tick is."""
        st = self._st
        if st.role is Role.LEADER:
            self._tick_heartbeat()
            return
        st.election_elapsed += 1
        if st.past_election_timeout():
            st.election_elapsed = 0
            election.campaign(st)

    def _tick_heartbeat(self) -> None:
        st = self._st
        timeout = st.cfg.election_timeout_ticks
        st.heartbeat_elapsed += 1
        st.election_elapsed += 1
        st.leader_ticks += 1
        if st.cfg.check_quorum:
            now = st.leader_ticks
            active = [v for v, pr in st.prs.items() if v == st.id or now - pr.last_active < timeout]
            if not quorum.has_quorum(st.voters, active):
                # We may be cut off with a minority: stop taking writes that cannot commit, and
                # let the majority's leases expire on the same schedule as ours.
                st.become_follower(st.term, None)
                return
        if st.election_elapsed >= timeout:
            st.election_elapsed = 0
            # A transfer that has not finished within an election timeout has failed.
            st.lead_transferee = None
        if st.heartbeat_elapsed >= st.cfg.heartbeat_ticks:
            st.heartbeat_elapsed = 0
            replication.bcast_heartbeat(st)

    def campaign(self) -> None:
        """Start an election now instead of waiting for the timeout (a no-op on the leader)."""
        election.campaign(self._st)

    def propose(self, data: bytes) -> int:
        """Append ``data`` to the leader's log; returns its index (commit is reported via Ready).

        Raises NotLeaderError (with a leader hint) off the leader, and
        LeaderTransferInProgressError while handing leadership over.
        """
        st = self._st
        if st.role is not Role.LEADER:
            raise NotLeaderError(st.lead)
        if st.lead_transferee is not None:
            raise LeaderTransferInProgressError(st.lead_transferee)
        return replication.leader_append(st, bytes(data))

    def transfer_leader(self, target: str) -> None:
        """Hand leadership to ``target``: catch it up, then tell it to campaign at once (thesis §3.10)."""
        st = self._st
        if st.role is not Role.LEADER:
            raise NotLeaderError(st.lead)
        if target not in st.voters:
            raise ValueError(f"{target!r} is not a voter of this group")
        if target == st.id or target == st.lead_transferee:
            return
        st.lead_transferee = target
        st.election_elapsed = 0
        if st.prs[target].match == st.log.last_index:
            replication.send_timeout_now(st, target)
        else:
            replication.maybe_send_append(st, target)

    def step(self, m: Message) -> None:
        """Feed one message received from a peer; duplicates and reordering are tolerated."""
        st = self._st
        if m.dst != st.id:
            raise ValueError(f"message for {m.dst!r} stepped into {st.id!r}")
        if m.src not in st.voters or m.src == st.id:
            return
        if m.term > st.term:
            if m.type in _VOTES and not m.transfer and st.in_lease():
                # A leader we heard from recently is alive: a rejoining node must not depose it.
                return
            if m.type is MsgType.PRE_VOTE or (m.type is MsgType.PRE_VOTE_RESP and not m.reject):
                pass  # a question or answer about a future term; ours stays
            elif m.type in (MsgType.APPEND, MsgType.HEARTBEAT):
                st.become_follower(m.term, m.src)
            else:
                st.become_follower(m.term, None)
        elif m.term < st.term:
            if (st.cfg.check_quorum or st.cfg.pre_vote) and m.type in (MsgType.APPEND, MsgType.HEARTBEAT):
                # Tell a deposed leader our term so it steps down; without this, a node whose
                # term rose while it could not win would never hear from that leader again.
                st.send(Message(MsgType.APPEND_RESP, st.id, m.src, st.term))
            elif m.type is MsgType.PRE_VOTE:
                st.send(Message(MsgType.PRE_VOTE_RESP, st.id, m.src, st.term, reject=True))
            return
        if m.type in _VOTES:
            election.handle_vote_request(st, m)
        elif st.role is Role.LEADER:
            replication.step_leader(st, m)
        elif st.role is Role.FOLLOWER:
            election.step_follower(st, m)
        else:
            election.step_candidate(st, m)

    def persisted(self, index: int, term: int) -> None:
        """The caller made every entry through ``index`` (whose term is ``term``) durable.

        Acknowledge writes in the order they were handed out. Only now does a leader count
        its own copy toward the quorum, and a follower release its AppendResp.
        """
        st = self._st
        if st.log.persisted_to(index, term):
            st.end_repair_if_done()
            if st.role is Role.LEADER:
                replication.leader_persisted(st)

    def take_persisted_acks(self) -> list[Message]:
        """The acknowledgements ``persisted`` released, for a caller that writes a Ready's
        entries while still carrying it out (a broker under ASYNC_FLUSH copies them into the
        page cache on its loop): sent at once, they need no Ready of their own, and leave
        before the rest of this one (applying committed entries) is done.

        Call only once the hard state of every Ready handed out is durable (after the
        ``must_sync`` step of the one being carried out). If the term or vote changed since
        the last Ready (a message stepped in meanwhile), nothing is released here: the next
        Ready carries the acks after its hard state.
        """
        st = self._st
        hs = self._prev_hs
        if not st.msgs_after_persist or st.term != hs.term or st.vote != hs.vote:
            return []
        return replication.release_acks(st)

    # -- output ------------------------------------------------------------------------

    def has_ready(self) -> bool:
        if self._outstanding is not None:
            return False
        st = self._st
        log = st.log
        # Called once per node per loop iteration by drivers, so compare plain fields
        # rather than building HardState/SoftState objects.
        hs, ss = self._prev_hs, self._prev_ss
        applicable = min(log.committed, log.persisted)
        return bool(
            st.msgs
            or st.bcast_pending
            or log.unsent_from <= log.last_index
            or log.applied < applicable
            or st.term != hs.term
            or st.vote != hs.vote
            or applicable != hs.commit
            or st.lead != ss.leader
            or st.role is not ss.role
            or (bool(st.msgs_after_persist) and any(m.index <= log.persisted for m in st.msgs_after_persist))
        )

    def ready(self) -> Ready:
        """Take the pending work; call ``advance`` with it before asking again."""
        if self._outstanding is not None:
            raise InvariantViolation("ready() called again before advance() of the previous Ready")
        st = self._st
        log = st.log
        replication.flush_deferred_bcast(st)
        entries = log.take_unsent()
        prev = self._prev_hs
        applicable = log.applicable
        # The previous hard and soft states again when unchanged (nearly every Ready).
        if st.term == prev.term and st.vote == prev.vote and applicable == prev.commit:
            hs, changed, must_sync = prev, None, False
        else:
            hs = HardState(st.term, st.vote, applicable)
            changed, must_sync = hs, (hs.term, hs.vote) != (prev.term, prev.vote)
        ss = self._prev_ss
        if st.lead != ss.leader or st.role is not ss.role:
            ss = SoftState(st.lead, st.role)
        acks = replication.release_acks(st) if st.msgs_after_persist else ()
        rd = Ready(
            soft_state=ss,
            hard_state=changed,
            entries_to_persist=tuple(entries),
            committed_entries=(
                tuple(log.entries_to_apply(st.cfg.max_apply_bytes_per_ready)) if log.applied < applicable else ()
            ),
            messages=(*st.msgs, *acks) if acks else tuple(st.msgs),
            must_sync=must_sync,
        )
        st.msgs = []
        self._prev_hs = hs
        self._prev_ss = ss
        self._outstanding = rd
        return rd

    def advance(self, rd: Ready) -> None:
        """The caller has persisted the hard state, sent the messages and applied the entries of ``rd``."""
        if rd is not self._outstanding:
            raise InvariantViolation("advance() with a Ready that is not the outstanding one")
        if rd.committed_entries:
            self._st.log.applied_to(rd.committed_entries[-1].index)
        self._outstanding = None
