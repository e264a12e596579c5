"""Cancellation reaches the awaiting task even when the awaited answer arrives in the same
loop iteration (Python 3.11's ``asyncio.wait_for`` returns the answer instead and the
cancel is lost; a shutdown waiting for that task then hangs)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ledgermq.net.connection import Connection
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from tests.client.consumer_cluster import aio


class _Transport:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.sent.append(data)

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass


@aio(10)
async def test_a_request_cancelled_as_its_answer_arrives_is_cancelled() -> None:
    conn = Connection()
    conn.connection_made(_Transport())  # type: ignore[arg-type]
    request = RemotingCommand.request(RequestCode.HEART_BEAT, None)
    task = asyncio.create_task(conn.request(request, 5.0))
    await asyncio.sleep(0)  # sent; waiting for the answer
    (opaque,) = conn.pending
    conn.pending[opaque].set_result(request.response(ResponseCode.SUCCESS))  # the answer is read...
    task.cancel()  # ...in the iteration where shutdown cancels the caller
    with pytest.raises(asyncio.CancelledError):
        await task
