"""DLedger-mode operations: the group's Raft state, and handing leadership over.

GET_DLEDGER_STATUS (60002, ledgermq-only) answers JSON: ``group``, ``selfId``, ``role``
(LEADER/FOLLOWER/CANDIDATE...), ``term``, ``leader`` ("" while unknown), ``commitIndex``,
``appliedIndex``, ``lastIndex``, ``firstIndex`` (the first raft index still stored:
retention moves it), ``persistedIndex``, ``peers`` (id -> Raft address), ``failed`` (""
unless the driver stopped on an error), ``state`` ("running", or "failed" while a
fail-stopped driver is being restarted), ``driverFailures``, ``repairs``,
``repairsCompleted``, ``repairingUntil``, ``scrubbedBytes`` and ``lastScrubMillis`` (the
DLedger scrub's bytes re-read, its last full pass) and, on the leader only,
``members``: one ``{"id", "matchIndex", "lag", "stuck"}`` per member (itself included),
lag = lastIndex - match, stuck = it needs entries below the leader's first index (it
cannot catch up).

DLEDGER_TRANSFER_LEADER (60003, ext ``target``: ``n<k>``) asks the leader to hand over to
``target`` and waits (at most ``timeoutMillis``, default 5000) until it has stepped down.
A follower refuses naming the leader. Both refuse a broker not in DLedger mode.
"""

from __future__ import annotations

from typing import Any

from ledgermq.broker.context import Broker
from ledgermq.broker.dledger import BrokerDLedger
from ledgermq.net.server import RequestContext
from ledgermq.protocol import fastjson
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.headers_admin import TransferLeaderRequestHeader
from ledgermq.raft import NotLeaderError, Role
from ledgermq.raftio.driver import RaftStatus

MAX_TRANSFER_TIMEOUT_MS = 60_000


def not_dledger(broker: Broker) -> str:
    name = f"{broker.config.broker_name}/{broker.config.broker_id}"
    return f"broker {name} is not in DLedger mode (enableDLegerCommitLog=false)"


def dledger_status_doc(broker: Broker, dl: BrokerDLedger, st: RaftStatus) -> dict[str, Any]:
    """The JSON body of GET_DLEDGER_STATUS from one RaftStatus."""
    stuck = dl.watch.needs.stuck
    members = [
        {"id": peer, "matchIndex": match, "lag": max(0, st.last_index - match), "stuck": peer in stuck}
        for peer, match in sorted(st.match.items())
    ]
    ledger = dl.store.commitlog
    return {
        "group": broker.store_config.dleger_group,
        "selfId": dl.self_id,
        "brokerName": broker.config.broker_name,
        "brokerId": broker.config.broker_id,
        "role": st.role.name,
        "term": st.term,
        "leader": st.leader or "",
        "commitIndex": st.commit,
        "appliedIndex": st.applied,
        "lastIndex": st.last_index,
        "firstIndex": ledger.ledger.first_index + 1 if ledger is not None else 1,
        "persistedIndex": st.persisted_index,
        "peers": dict(dl.transport.peers),
        "members": members if st.role is Role.LEADER else [],
        "failed": st.failed or "",
        "state": dl.state,
        "driverFailures": dl.driver_failures,
        "repairs": dl.repairs_started,
        "repairsCompleted": dl.repairs_completed,
        "repairingUntil": st.repair_until,
        "scrubbedBytes": dl.scrub.scrubbed_bytes if dl.scrub is not None else 0,
        "lastScrubMillis": dl.scrub.last_pass_ms if dl.scrub is not None else 0,
    }


def get_dledger_status(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    dl = broker.dledger
    st = dl.status() if dl is not None else None
    if dl is None or st is None:
        reason = not_dledger(broker) if dl is None else f"DLedger {dl.self_id} has not started"
        return cmd.response(ResponseCode.SYSTEM_ERROR, reason)
    return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps(dledger_status_doc(broker, dl, st)))


async def transfer_leader(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    dl = broker.dledger
    driver = dl.driver if dl is not None else None
    if dl is None or driver is None:
        return cmd.response(ResponseCode.SYSTEM_ERROR, not_dledger(broker) if dl is None else "DLedger not started")
    hdr = TransferLeaderRequestHeader.decode(cmd)
    target, timeout_ms = hdr.target.strip(), hdr.timeout_millis
    st = driver.status()
    if target == dl.self_id and st.role is Role.LEADER:
        return cmd.response(ResponseCode.SUCCESS, f"{target} is already the leader of term {st.term}")
    try:
        driver.transfer_leadership(target)
    except NotLeaderError:
        leader = driver.status().leader
        return cmd.response(
            ResponseCode.SYSTEM_ERROR,
            f"{dl.self_id} is not the DLedger leader of {broker.store_config.dleger_group}; "
            f"the leader is {leader or 'not known yet'}: ask it",
        )
    except ValueError as exc:
        return cmd.response(ResponseCode.SYSTEM_ERROR, str(exc))
    timeout = min(max(timeout_ms, 1), MAX_TRANSFER_TIMEOUT_MS) / 1000
    try:
        done = await driver.wait_for(lambda s: s.role is not Role.LEADER and s.leader == target, timeout)
    except TimeoutError:
        now = driver.status()
        return cmd.response(
            ResponseCode.SYSTEM_ERROR,
            f"{target} did not take over within {timeout:.1f}s (leader now {now.leader or 'none'}, term {now.term})",
        )
    return cmd.response(ResponseCode.SUCCESS, f"{target} leads term {done.term}")


PROCESSORS = {
    RequestCode.GET_DLEDGER_STATUS: get_dledger_status,
    RequestCode.DLEDGER_TRANSFER_LEADER: transfer_leader,
}
