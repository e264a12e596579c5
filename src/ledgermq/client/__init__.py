"""The pure-Python RocketMQ client (asyncio): producer, route cache, fault avoidance."""

from __future__ import annotations

from ledgermq.client.errors import MQBrokerError, MQClientError, MQConnectError, SendFailedError
from ledgermq.client.message import Message, MessageQueue, SendResult, SendStatus
from ledgermq.client.producer import Producer

__all__ = [
    "MQBrokerError",
    "MQClientError",
    "MQConnectError",
    "Message",
    "MessageQueue",
    "Producer",
    "SendFailedError",
    "SendResult",
    "SendStatus",
]
