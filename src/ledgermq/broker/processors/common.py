"""Helpers every processor module shares (not processors themselves)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from ledgermq.broker.context import Broker
from ledgermq.errors import ProtocolError
from ledgermq.net.server import Processor, RequestContext
from ledgermq.protocol.codes import ResponseCode
from ledgermq.protocol.command import RemotingCommand

log = logging.getLogger(__name__)

BrokerProcessor = Callable[[Broker, RequestContext, RemotingCommand], Awaitable[RemotingCommand | None]]


def bind(fn: BrokerProcessor, broker: Broker) -> Processor:
    """A server processor for ``fn``; malformed headers become SYSTEM_ERROR naming the field."""

    async def processor(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand | None:
        try:
            return await fn(broker, ctx, cmd)
        except ProtocolError as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR, str(exc))

    return processor
