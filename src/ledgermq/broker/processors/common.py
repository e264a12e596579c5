"""Helpers every processor module shares (not processors themselves)."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from ledgermq.broker.context import Broker
from ledgermq.errors import ProtocolError
from ledgermq.net.server import Processor, RequestContext
from ledgermq.protocol.codes import ResponseCode
from ledgermq.protocol.command import RemotingCommand

log = logging.getLogger(__name__)

BrokerProcessor = Callable[[Broker, RequestContext, RemotingCommand], Awaitable[RemotingCommand | None]]


def bind(fn: BrokerProcessor, broker: Broker) -> Processor:
    """A server processor for ``fn``; malformed headers become SYSTEM_ERROR naming the field.

    Every request's latency is counted here by request and response code (broker/stats.py;
    a held pull counts its hold). A processor that raises is counted as SYSTEM_ERROR, as the
    server answers it."""
    count = broker.stats.count_request

    async def processor(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand | None:
        start = time.perf_counter()
        status: int = ResponseCode.SYSTEM_ERROR
        try:
            response = await fn(broker, ctx, cmd)
            status = -1 if response is None else response.code
            return response
        except ProtocolError as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR, str(exc))
        finally:
            count(cmd.code, status, time.perf_counter() - start)

    return processor
