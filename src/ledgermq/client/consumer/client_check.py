"""CHECK_CLIENT_CONFIG at consumer start (Java ``MQClientInstance.checkClientInBroker``).

A consumer with a non-TAG (SQL92) subscription asks the brokers of the topic whether they
can filter with it, and fails to start with the broker's reason when one cannot
(``enablePropertyFilter`` off: SYSTEM_ERROR; an expression the broker refuses:
SUBSCRIPTION_PARSE_FAILED). Otherwise such a consumer would start and then receive
nothing, its pulls refused one by one.

Java asks one broker of the topic's route, assuming every broker is configured alike;
here every broker group of the route is asked (its master, else a slave), so a group
configured differently is caught too. A broker that cannot be reached is skipped with a
warning; start fails only when none of the topic's brokers could be asked. A topic
without a route yet is not checked (as in Java: no address, no check).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from ledgermq.client.consumer.common import SubscriptionData
from ledgermq.client.errors import MQBrokerError, MQClientError
from ledgermq.client.instance.client_instance import ClientInstance
from ledgermq.errors import LedgerError
from ledgermq.filter import is_tag_type
from ledgermq.protocol import fastjson
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand

log = logging.getLogger(__name__)


async def check_client_in_broker(
    instance: ClientInstance, group: str, subscriptions: Iterable[SubscriptionData]
) -> None:
    """Raise MQBrokerError (the broker's code and reason) if a broker refuses a subscription,
    MQClientError if no broker of the topic could be asked at all."""
    for sub in subscriptions:
        if is_tag_type(sub.expression_type):
            continue
        route = instance.routes.routes.get(sub.topic)
        if route is None:
            continue
        body = fastjson.dumps({"clientId": instance.client_id, "group": group, "subscriptionData": sub.to_json()})
        unreachable: list[str] = []
        asked = 0
        for broker in route.broker_datas:
            addr = instance.routes.any_addr(broker.broker_name)
            if addr is None:
                continue
            cmd = RemotingCommand.request(RequestCode.CHECK_CLIENT_CONFIG, None, body)
            try:
                resp = await instance.remoting.invoke(addr, cmd, instance.api_timeout)
            except LedgerError as exc:
                # A broker down at start must not stop a consumer its peers can serve; it is
                # checked by nobody then, as in Java, which asks a single broker.
                log.warning("group %s: could not check the %s subscription of %s with %s: %s",
                            group, sub.expression_type, sub.topic, addr, exc)  # fmt: skip
                unreachable.append(f"{addr}: {exc}")
                continue
            asked += 1
            if resp.code != ResponseCode.SUCCESS:
                raise MQBrokerError(
                    resp.code, f"{resp.remark} [group {group}, {sub.expression_type} subscription of {sub.topic}]", addr
                )
        if unreachable and not asked:
            raise MQClientError(
                f"Check client in broker error: no broker of {sub.topic} could be asked whether it filters by "
                f"{sub.expression_type} ({'; '.join(unreachable)})"
            )
