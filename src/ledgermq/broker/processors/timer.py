"""GET_TIMER_CHECK_POINT (60): the timer progress a slave takes from its master
(RocketMQ 5's AdminBrokerProcessor.getTimerCheckPoint; the 56-byte checkpoint as body)."""

from __future__ import annotations

from ledgermq.broker.context import Broker
from ledgermq.net.server import RequestContext
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand


def get_timer_check_point(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    if broker.timer is None:
        return cmd.response(ResponseCode.SYSTEM_ERROR, "The checkpoint is null")
    return cmd.response(ResponseCode.SUCCESS, body=broker.timer.snapshot().encode())


PROCESSORS = {RequestCode.GET_TIMER_CHECK_POINT: get_timer_check_point}
