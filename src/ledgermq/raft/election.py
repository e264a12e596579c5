"""Leader election (Raft §5.2, §5.4.1) with pre-vote and leader leases (thesis §9.6, §4.2.3)."""

from __future__ import annotations

from ledgermq.raft import quorum, replication
from ledgermq.raft.state import RaftState
from ledgermq.raft.types import Message, MsgType, Role


def campaign(st: RaftState, transfer: bool = False) -> None:
    """Start an election; with pre-vote (and not forced by a transfer) first ask whether we could win.

    A transfer skips pre-vote: the old leader asked for it, so the lease that would make
    voters refuse a pre-vote is exactly what must be overridden.
    """
    if st.role is Role.LEADER or st.repair is not None:
        # A repairing node lacks entries it once held (maybe committed ones): it must not lead.
        return
    _run(st, pre=st.cfg.pre_vote and not transfer, transfer=transfer)


def _run(st: RaftState, pre: bool, transfer: bool) -> None:
    if pre:
        st.become_pre_candidate()
        vote_type, term = MsgType.PRE_VOTE, st.term + 1
    else:
        st.become_candidate()
        vote_type, term = MsgType.VOTE, st.term
    st.votes = {st.id: True}
    if _tally(st) is quorum.VoteResult.WON:
        _won(st)
        return
    for peer in st.peers:
        st.send(
            Message(
                vote_type,
                st.id,
                peer,
                term,
                index=st.log.last_index,
                log_term=st.log.last_term,
                transfer=transfer,
            )
        )


def _tally(st: RaftState) -> quorum.VoteResult:
    return quorum.vote_result(st.voters, st.votes)


def _won(st: RaftState) -> None:
    if st.role is Role.PRE_CANDIDATE:
        _run(st, pre=False, transfer=False)
    else:
        st.become_leader()
        replication.bcast_append(st)


def handle_vote_request(st: RaftState, m: Message) -> None:
    """Grant at most one vote per term, and only to a log at least as up to date as ours (§5.4.1).

    A pre-vote is granted on the same terms, but records nothing: it is a question
    about a future term, and answering it must not change our state.
    """
    pre = m.type is MsgType.PRE_VOTE
    can_vote = st.vote == m.src or (st.vote is None and st.lead is None) or (pre and m.term > st.term)
    resp_type = MsgType.PRE_VOTE_RESP if pre else MsgType.VOTE_RESP
    if can_vote and st.log.is_up_to_date(m.index, m.log_term) and _as_up_to_date_as_before_repair(st, m):
        # Reply in the requested term: a pre-candidate counts only answers to its future term.
        st.send(Message(resp_type, st.id, m.src, m.term))
        if not pre:
            st.election_elapsed = 0
            st.vote = m.src
    else:
        st.send(Message(resp_type, st.id, m.src, st.term, reject=True))


def _as_up_to_date_as_before_repair(st: RaftState, m: Message) -> bool:
    """A repairing node votes as the log it had before the damage would have (§5.4.1 against
    ``(repair.last_term, repair.until)``): its lost entries may be committed ones, and a vote
    judged on the shorter log could elect a leader that lacks them."""
    r = st.repair
    return r is None or m.log_term > r.last_term or (m.log_term == r.last_term and m.index >= r.until)


def step_candidate(st: RaftState, m: Message) -> None:
    """Both candidate roles: a current-term leader's message ends the election; answers are tallied."""
    if m.type in (MsgType.APPEND, MsgType.HEARTBEAT):
        st.become_follower(m.term, m.src)
        step_follower(st, m)
        return
    expected = MsgType.PRE_VOTE_RESP if st.role is Role.PRE_CANDIDATE else MsgType.VOTE_RESP
    if m.type is not expected:
        return
    st.votes.setdefault(m.src, not m.reject)
    result = _tally(st)
    if result is quorum.VoteResult.WON:
        _won(st)
    elif result is quorum.VoteResult.LOST:
        # A pre-candidate never left its term, so going back to follower costs nothing.
        st.become_follower(st.term, None)


def step_follower(st: RaftState, m: Message) -> None:
    if m.type is MsgType.APPEND:
        st.election_elapsed = 0
        st.lead = m.src
        replication.handle_append(st, m)
    elif m.type is MsgType.HEARTBEAT:
        st.election_elapsed = 0
        st.lead = m.src
        replication.handle_heartbeat(st, m)
    elif m.type is MsgType.TIMEOUT_NOW:
        # The leader picked us; campaign at once, overriding other voters' leases.
        campaign(st, transfer=True)
