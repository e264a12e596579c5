"""Helpers every processor module shares (not processors themselves)."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable

from ledgermq.broker.context import Broker
from ledgermq.clock import perf_seconds
from ledgermq.errors import ProtocolError
from ledgermq.net.server import Deferred, Processor, RequestContext
from ledgermq.protocol.codes import ResponseCode
from ledgermq.protocol.command import RemotingCommand

log = logging.getLogger(__name__)

BrokerAnswer = RemotingCommand | None
BrokerProcessor = Callable[[Broker, RequestContext, RemotingCommand], BrokerAnswer | Deferred | Awaitable[BrokerAnswer]]
"""``async def`` only for a request that awaits something; a plain function for one that
does not (most do not), returning a ``Deferred`` or an awaitable only when it must wait
(net/server.py). A request answered from a task holds one of its connection's in-flight
slots into a later loop turn: a producer whose async sends fill the others (its budget is
the per-connection limit) then had a send refused SYSTEM_BUSY."""


_AT_ONCE = frozenset({"RemotingCommand", "RemotingCommand | None", "BrokerAnswer"})


def answers_at_once(fn: BrokerProcessor) -> bool:
    """A plain function declared to return its answer (mypy holds it to that): it holds
    nothing, so the server runs it where the frame is read without counting it against the
    connection's in-flight limit, as RocketMQ runs heartbeats and admin requests on
    executors of their own. Counted, a heartbeat arriving while a producer's async sends
    held every slot of its connection was refused SYSTEM_BUSY (seen in the compare bench
    against DLedger, whose sends stay in flight a Raft round); a consumer whose heartbeats
    are refused long enough is dropped from its group."""
    return not inspect.iscoroutinefunction(fn) and fn.__annotations__.get("return") in _AT_ONCE


def bind(fn: BrokerProcessor, broker: Broker) -> Processor:
    """A server processor for ``fn``; malformed headers become SYSTEM_ERROR naming the field.

    Every request's latency is counted here by request and response code (broker/stats.py;
    a held pull counts its hold). A processor that raises is counted as SYSTEM_ERROR, as the
    server answers it. A plain answer is counted and returned without a coroutine of ours,
    so a send answered at once costs no frame beyond its own."""
    count = broker.stats.count_request
    perf_counter = perf_seconds

    def count_since(code: int, status: int, started: float) -> None:
        count(code, status, perf_counter() - started)

    def processor(ctx: RequestContext, cmd: RemotingCommand) -> BrokerAnswer | Deferred | Awaitable[BrokerAnswer]:
        start = perf_counter()
        try:
            outcome = fn(broker, ctx, cmd)
        except ProtocolError as exc:
            count(cmd.code, ResponseCode.SYSTEM_ERROR, perf_counter() - start)
            return cmd.response(ResponseCode.SYSTEM_ERROR, str(exc))
        except BaseException:
            count(cmd.code, ResponseCode.SYSTEM_ERROR, perf_counter() - start)
            raise
        if outcome is None:
            count(cmd.code, -1, perf_counter() - start)
            return None
        if isinstance(outcome, RemotingCommand):
            count(cmd.code, outcome.code, perf_counter() - start)
            return outcome
        if isinstance(outcome, Deferred):  # the server answers when it is resolved: counted then
            outcome.observe(count_since, cmd.code, start)
            return outcome
        return _counted(outcome, cmd, start)

    async def _counted(outcome: Awaitable[BrokerAnswer], cmd: RemotingCommand, start: float) -> BrokerAnswer:
        status: int = ResponseCode.SYSTEM_ERROR
        try:
            response = await outcome
            status = -1 if response is None else response.code
            return response
        except ProtocolError as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR, str(exc))
        finally:
            count(cmd.code, status, perf_counter() - start)

    return processor
