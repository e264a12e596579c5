"""The pure-Python RocketMQ client (asyncio): producer, push and lite pull consumers, on a
shared client instance; ``ledgermq.client.sync`` wraps them for blocking code."""

from __future__ import annotations

from ledgermq.acl.signing import Credentials
from ledgermq.client.consumer.allocate import (
    AllocateMessageQueueAveragely,
    AllocateMessageQueueAveragelyByCircle,
    AllocateMessageQueueByConfig,
    AllocateMessageQueueConsistentHash,
)
from ledgermq.client.consumer.common import ConsumeFromWhere, MessageModel, MessageSelector
from ledgermq.client.errors import MasterMovedError, MQBrokerError, MQClientError, MQConnectError, SendFailedError
from ledgermq.client.lite_pull.consumer import LitePullConsumer
from ledgermq.client.message import Message, MessageQueue, SendResult, SendStatus
from ledgermq.client.producer.async_send import SendCallback
from ledgermq.client.producer.failover import FailoverSettings
from ledgermq.client.producer.producer import Producer
from ledgermq.client.producer.send_budget import AsyncBackPressureError
from ledgermq.client.producer.transaction import (
    HalfMessage,
    LocalTransactionState,
    TransactionProducer,
    TransactionSendResult,
)
from ledgermq.client.push.consume_service import (
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
)
from ledgermq.client.push.consumer import PushConsumer
from ledgermq.protocol.message import MessageRecord as MessageExt

__all__ = [
    "AllocateMessageQueueAveragely",
    "AllocateMessageQueueAveragelyByCircle",
    "AllocateMessageQueueByConfig",
    "AllocateMessageQueueConsistentHash",
    "AsyncBackPressureError",
    "ConsumeConcurrentlyContext",
    "ConsumeConcurrentlyStatus",
    "ConsumeFromWhere",
    "ConsumeOrderlyContext",
    "ConsumeOrderlyStatus",
    "Credentials",
    "FailoverSettings",
    "HalfMessage",
    "LitePullConsumer",
    "LocalTransactionState",
    "MQBrokerError",
    "MQClientError",
    "MQConnectError",
    "MasterMovedError",
    "Message",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "MessageSelector",
    "Producer",
    "PushConsumer",
    "SendCallback",
    "SendFailedError",
    "SendResult",
    "SendStatus",
    "TransactionProducer",
    "TransactionSendResult",
]
