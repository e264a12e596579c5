"""The name-server layer every client part shares, the admin client included: a request
goes to the preferred name server, then to the others in turn while one cannot be
reached; the one that answered is asked first next time."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from ledgermq.client.errors import MQBrokerError, MQClientError, MQConnectError
from ledgermq.client.instance.namesrv import split_namesrv_addrs
from ledgermq.errors import ProtocolError
from ledgermq.net.client import ConnectError, RemotingClient
from ledgermq.net.connection import ConnectionClosedError, RequestTimeoutError
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.headers_namesrv import GetRouteInfoRequestHeader
from ledgermq.protocol.route import TopicRouteData

__all__ = ["NameServerClient"]


class NameServerClient:
    """Requests to the name servers with failover. ``start_at`` picks the first one asked
    (default: a random one, so many clients spread over the name servers; the admin tools
    start at the first, as mqadmin does)."""

    def __init__(
        self,
        remoting: RemotingClient,
        addrs: str | Sequence[str],
        *,
        timeout: float = 3.0,
        rng: random.Random | None = None,
        start_at: int | None = None,
    ) -> None:
        self.remoting = remoting
        self.addrs = split_namesrv_addrs(addrs)
        if not self.addrs:
            raise MQClientError("no name server address given")
        self.timeout = timeout
        if start_at is None:
            self.preferred = (rng or random.Random()).randrange(len(self.addrs))
        else:
            self.preferred = start_at % len(self.addrs)

    async def invoke(self, code: int, ext: Mapping[str, object] | None = None, body: bytes = b"") -> RemotingCommand:
        """The first answer of a name server, whatever its code; MQConnectError if none answered."""
        errors: list[str] = []
        count = len(self.addrs)
        for i in range(count):
            index = (self.preferred + i) % count
            addr = self.addrs[index]
            try:
                resp = await self.remoting.invoke(
                    addr, RemotingCommand.request(code, dict(ext or {}), body), self.timeout
                )
            except (ConnectError, ConnectionClosedError) as exc:
                errors.append(str(exc))
                continue
            except RequestTimeoutError as exc:
                self.remoting.close_connection(addr)
                errors.append(str(exc))
                continue
            self.preferred = index
            return resp
        raise MQConnectError(f"no name server reachable ({'; '.join(errors)})")

    async def route(self, topic: str) -> TopicRouteData | None:
        """The topic's route; None if the name servers know no such topic (TOPIC_NOT_EXIST)."""
        header = GetRouteInfoRequestHeader(topic, accept_standard_json_only=True)
        resp = await self.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, header.ext())
        if resp.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        if resp.code != ResponseCode.SUCCESS:
            raise MQBrokerError(resp.code, resp.remark, "name server")
        try:
            return TopicRouteData.decode(resp.body)
        except ProtocolError as exc:
            raise MQClientError(f"route of {topic} does not decode: {exc}") from None
