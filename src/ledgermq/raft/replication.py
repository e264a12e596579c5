"""Log replication (Raft §5.3): the leader's sending and acknowledgement handling, the follower's Append handling."""

from __future__ import annotations

from ledgermq.errors import InvariantViolation
from ledgermq.raft import quorum
from ledgermq.raft.progress import Progress, ProgressState
from ledgermq.raft.state import RaftState
from ledgermq.raft.types import Entry, Message, MsgType, Role


def maybe_send_append(st: RaftState, to: str, send_if_empty: bool = True, *, probe_compacted: bool = False) -> bool:
    """Send the next batch to ``to`` if its window allows; an empty Append still carries the commit index.

    Durable entries are read back from storage here, ``max_bytes_per_append`` at a time,
    so a follower catching up from far behind never makes the leader load its log.
    """
    pr = st.prs[to]
    log = st.log
    last = log.last_index
    if not send_if_empty and not probe_compacted and pr.next == last + 1:
        return False  # nothing new for it: the common case of every Ready and every ack, kept cheap
    if pr.is_paused():
        return False
    prev_index = pr.next - 1
    if prev_index > last:
        raise InvariantViolation(f"progress of {to} points past our log: next={pr.next} last={last}")
    prev_term = log.term(prev_index)
    if prev_term is None:
        # The follower needs entries our storage has compacted away; only a snapshot could
        # help, and the core has none yet, so it stays behind rather than crash the leader.
        # Once per heartbeat answer (``probe_compacted``) an empty probe asks whether it
        # holds our first entry after all (its store re-seeded from a copy): if so it is
        # caught up from there; if not, its rejection puts it back here until the next one.
        if not probe_compacted:
            return False
        prev_index = st.log.first_index - 1
        prev_term = st.log.term(prev_index)
        if prev_term is None:
            return False
        if pr.state is ProgressState.REPLICATE:
            pr.become_probe()
        pr.next = prev_index + 1
        entries: list[Entry] = []
    else:
        entries = log.slice(pr.next, last + 1, st.cfg.max_entries_per_append, st.cfg.max_bytes_per_append)
    if not entries and not send_if_empty:
        return False
    st.send(
        Message(
            MsgType.APPEND,
            st.id,
            to,
            st.term,
            log_term=prev_term,
            index=prev_index,
            entries=tuple(entries),
            commit=st.log.committed,
        )
    )
    pr.sent_commit = st.log.committed
    if entries:
        pr.sent_entries(entries[-1].index)
    elif pr.state is ProgressState.PROBE:
        pr.probe_sent = True
    return True


def bcast_append(st: RaftState) -> None:
    for peer in st.peers:
        maybe_send_append(st, peer)


def flush_deferred_bcast(st: RaftState) -> None:
    """Send what proposals and commit advances since the last Ready left for each peer.

    A leader under load takes many proposals and acknowledgements between two Readies;
    broadcasting after each would send one Append per peer per proposal (and one more per
    commit advance). Deferring to ``ready()`` sends one Append per peer with every new
    entry, or an empty one only to a peer that has not yet heard the current commit index
    (and, without ``eager_commit_notice``, not even that: the next Append or heartbeat tells it).
    """
    if not st.bcast_pending:
        return
    st.bcast_pending = False
    if st.role is not Role.LEADER:
        return
    committed = st.log.committed
    eager = st.cfg.eager_commit_notice
    for peer in st.peers:
        maybe_send_append(st, peer, send_if_empty=eager and st.prs[peer].sent_commit < committed)


def bcast_heartbeat(st: RaftState) -> None:
    for peer in st.peers:
        pr = st.prs[peer]
        # Never tell a follower to commit past what it is known to hold (etcd does the same).
        commit = min(pr.match, st.log.committed)
        st.send(Message(MsgType.HEARTBEAT, st.id, peer, st.term, commit=commit))


def maybe_commit(st: RaftState) -> bool:
    """Advance the commit index to what a majority durably holds, but only via an entry of our own term.

    Raft §5.4.2 (Figure 8): counting replicas of an older term's entry is unsafe, since a
    later leader may still overwrite it; committing one of our own entries commits
    everything before it indirectly.
    """
    index = quorum.committed_index(st.voters, {v: pr.quorum_match for v, pr in st.prs.items()})
    if index <= st.log.committed or st.log.term(index) != st.term:
        return False
    return st.log.commit_to(index)


def leader_append(st: RaftState, data: bytes) -> int:
    index = st.log.last_index + 1
    st.log.append([Entry(index, st.term, data)])
    st.bcast_pending = True  # sent by the next ready(), with every other proposal until then
    return index


def leader_persisted(st: RaftState) -> None:
    """Our own log counts toward the quorum only once the caller says it is durable."""
    if st.prs[st.id].maybe_update(st.log.persisted) and maybe_commit(st):
        st.bcast_pending = True


def step_leader(st: RaftState, m: Message) -> None:
    pr = st.prs.get(m.src)
    if pr is None:
        return
    if _note_repair(pr, m):
        pr.last_active = st.leader_ticks
        maybe_send_append(st, m.src)  # go on from what this answer vouches for
        return
    if m.type is MsgType.APPEND_RESP:
        pr.last_active = st.leader_ticks
        if m.reject:
            _handle_reject(st, m)
            return
        was_paused = pr.is_paused()
        if pr.maybe_update(m.index):
            if pr.state is ProgressState.PROBE:
                pr.become_replicate()
            else:
                pr.inflights.free_le(m.index)
            # Only this peer's match moved: at or below the commit index it changes no
            # majority above it (the second ack of a round in a group of three, say).
            if pr.quorum_match > st.log.committed and maybe_commit(st):
                st.bcast_pending = True
            if was_paused:
                maybe_send_append(st, m.src)
            # Stream what is left while the window allows.
            while maybe_send_append(st, m.src, send_if_empty=False):
                pass
            if m.src == st.lead_transferee and pr.match == st.log.last_index:
                send_timeout_now(st, m.src)
    elif m.type is MsgType.HEARTBEAT_RESP:
        pr.last_active = st.leader_ticks
        pr.probe_sent = False
        if pr.state is ProgressState.REPLICATE and pr.inflights.full:
            pr.inflights.free_first_one()
        if pr.match < st.log.last_index:
            maybe_send_append(st, m.src, probe_compacted=True)


def _note_repair(pr: Progress, m: Message) -> bool:
    """A follower says it is repairing (its log lost entries), so what we believed it held may
    be gone: its match falls to what this answer vouches for (an acceptance: its index; a
    rejection at or below the match: nothing), and it counts toward a commit quorum only once
    its match reaches the bound again (``Progress.quorum_match``). Normal Raft never lowers a
    match, and would take such a rejection for a reordered old one. True if the progress
    was reset (the caller sends from the new position)."""
    if m.repair_until <= 0:
        if pr.repair_until and pr.match >= pr.repair_until:
            pr.repair_until = 0  # repaired, and answering as a normal member again
        return False
    newly = m.repair_until > pr.repair_until
    pr.repair_until = max(pr.repair_until, m.repair_until)
    if m.type is MsgType.APPEND_RESP and not m.reject:
        if not newly and m.index >= pr.match:
            return False
        pr.match = m.index
        pr.become_replicate()
        return True
    if not newly and not (m.type is MsgType.APPEND_RESP and m.index <= pr.match):
        return False
    old_next = pr.next
    pr.match = 0
    pr.become_probe()
    hint = m.reject_hint if m.type is MsgType.APPEND_RESP else old_next - 1
    pr.next = max(1, min(old_next, hint + 1))
    return True


def _handle_reject(st: RaftState, m: Message) -> None:
    pr = st.prs[m.src]
    hint = m.reject_hint
    if m.log_term > 0:
        # Skip every entry of ours whose term is above the follower's term at the hint:
        # none of them can match (thesis §5.3's optimisation, as etcd implements it).
        hint, _ = st.log.find_conflict_by_term(hint, m.log_term)
    if pr.maybe_decr_to(m.index, hint):
        if pr.state is ProgressState.REPLICATE:
            pr.become_probe()
        maybe_send_append(st, m.src)


def send_timeout_now(st: RaftState, to: str) -> None:
    st.send(Message(MsgType.TIMEOUT_NOW, st.id, to, st.term))


def handle_append(st: RaftState, m: Message) -> None:
    """Accept or reject an Append; an acceptance is only released once the entries are durable."""
    if m.index < st.log.committed:
        # Everything up to our commit already matches the leader: say so instead of re-checking.
        _ack_after_persist(st, m, st.log.committed)
        return
    last_new = st.log.maybe_append(m.index, m.log_term, m.entries)
    if last_new is not None:
        st.log.commit_to(min(m.commit, last_new))
        _ack_after_persist(st, m, last_new)
        return
    hint_index, hint_term = st.log.find_conflict_by_term(min(m.index, st.log.last_index), m.log_term)
    st.send(
        Message(
            MsgType.APPEND_RESP,
            st.id,
            m.src,
            st.term,
            index=m.index,
            reject=True,
            reject_hint=hint_index,
            log_term=hint_term,
            repair_until=st.repair_until,
        )
    )


def _ack_after_persist(st: RaftState, m: Message, index: int) -> None:
    st.msgs_after_persist.append(
        Message(MsgType.APPEND_RESP, st.id, m.src, st.term, index=index, repair_until=st.repair_until)
    )


def handle_heartbeat(st: RaftState, m: Message) -> None:
    st.log.commit_to(min(m.commit, st.log.last_index))
    st.send(Message(MsgType.HEARTBEAT_RESP, st.id, m.src, st.term, repair_until=st.repair_until))


def release_acks(st: RaftState) -> list[Message]:
    """The held-back acks whose entries are now durable (they were queued in index order per leader).

    An acceptance says "I hold everything through ``index``", so of several released to
    the same leader in the same term only the highest says anything: one is sent.
    """
    persisted = st.log.persisted
    ready = [m for m in st.msgs_after_persist if m.index <= persisted]
    if not ready:
        return ready
    st.msgs_after_persist = [m for m in st.msgs_after_persist if m.index > persisted]
    if len(ready) == 1:
        return ready
    highest: dict[tuple[str, int], Message] = {}
    for m in ready:
        key = (m.dst, m.term)
        best = highest.get(key)
        if best is None or m.index > best.index:
            highest[key] = m
    return list(highest.values())
