"""Raw sends for ``ledgermq bench scale``: one SEND_MESSAGE_V2 per message, queue chosen by us.

The scale bench must put exactly one message into every queue and count each answer, so
it does not go through the Producer (which picks queues, retries and fails over): each
request names its topic and queue id, and each answer is counted by its code. Requests
are spread over a few connections so that no connection has more in flight than the
broker's per-connection budget (``maxInflightPerConnection``, 256), which would answer
SYSTEM_BUSY and measure the budget instead of the broker.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from ledgermq.client.message import STATUS_BY_CODE
from ledgermq.net.client import RemotingClient
from ledgermq.net.connection import RequestTimeoutError
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand

PRODUCER_GROUP = "scale-bench-producer"
PER_CONNECTION = 128  # in flight on one connection: half the broker's default budget
SEND_TIMEOUT_S = 15.0
MAX_SENDS_PER_PHASE = 50_000_000  # a time-bounded phase is count-bounded too

Target = tuple[str, int]  # (topic, queue id)


def send_command(topic: str, queue_id: int, broker_name: str, body: bytes) -> RemotingCommand:
    """SEND_MESSAGE_V2 with ``SendMessageRequestHeaderV2``'s short field names, as the Java
    client writes them (``client.send_codec``), for one explicit queue."""
    header = {
        "a": PRODUCER_GROUP,
        "b": topic,
        "c": "TBW102",
        "d": 4,
        "e": queue_id,
        "f": 0,
        "g": int(time.time() * 1000),
        "h": 0,
        "i": "",
        "j": 0,
        "k": False,
        "m": False,
        "n": broker_name,
    }
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header, body)


def status_name(code: int) -> str:
    status = STATUS_BY_CODE.get(code)
    if status is not None:
        return str(status.name)
    if code == ResponseCode.SYSTEM_BUSY:
        return "SYSTEM_BUSY"
    return f"code {code}"


@dataclass(slots=True)
class SendTally:
    """Answers counted by status (``SEND_OK``, other statuses, error codes, exception names)."""

    statuses: Counter[str] = field(default_factory=Counter)
    last_ok: float = 0.0  # time.monotonic() of the last SEND_OK answer
    started: float = 0.0
    ended: float = 0.0

    @property
    def ok(self) -> int:
        return self.statuses["SEND_OK"]

    @property
    def failed(self) -> int:
        return sum(n for status, n in self.statuses.items() if status != "SEND_OK")

    @property
    def seconds(self) -> float:
        return max(self.ended - self.started, 0.0)

    @property
    def rate(self) -> float:
        return self.ok / self.seconds if self.seconds > 0 else 0.0


class SendPool:
    """``inflight`` concurrent senders over ceil(inflight / PER_CONNECTION) connections."""

    def __init__(self, broker_addr: str, broker_name: str, body: bytes, inflight: int) -> None:
        self.broker_addr = broker_addr
        self.broker_name = broker_name
        self.body = body
        self.inflight = max(1, inflight)
        n = -(-self.inflight // PER_CONNECTION)
        self.clients = [RemotingClient(connect_timeout=3.0) for _ in range(n)]

    async def close(self) -> None:
        for client in self.clients:
            await client.close()

    async def send_one(self, client: RemotingClient, target: Target) -> str:
        """The status of one send; a transport failure is named by its exception."""
        cmd = send_command(target[0], target[1], self.broker_name, self.body)
        try:
            resp = await client.invoke(self.broker_addr, cmd, SEND_TIMEOUT_S)
        except RequestTimeoutError:
            client.close_connection(self.broker_addr)
            return "timeout"
        except Exception as exc:
            return type(exc).__name__
        return status_name(resp.code)

    async def run(self, target: Callable[[int], Target], count: int, seconds: float | None = None) -> SendTally:
        """Send ``target(0) .. target(count - 1)`` with ``inflight`` senders, stopping early
        after ``seconds`` if given; every answer is counted."""
        tally = SendTally(started=time.monotonic())
        deadline = tally.started + seconds if seconds is not None else float("inf")
        next_index = 0

        async def sender(client: RemotingClient) -> None:
            nonlocal next_index
            while next_index < count and time.monotonic() < deadline:
                index = next_index
                next_index += 1
                status = await self.send_one(client, target(index))
                tally.statuses[status] += 1
                if status == "SEND_OK":
                    tally.last_ok = time.monotonic()

        await asyncio.gather(*(sender(self.clients[i % len(self.clients)]) for i in range(self.inflight)))
        tally.ended = time.monotonic()
        return tally
