"""``python -m tests.transactions.dying_producer NS TOPIC GROUP BODY``: send one transactional
message, then SIGKILL this process inside the local transaction, after SEND_OK and before
END_TRANSACTION: the half message is left for the broker to check with another producer."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from ledgermq.client import Message, TransactionProducer
from ledgermq.client.producer.transaction import LocalTransactionState


async def main(ns: str, topic: str, group: str, body: str) -> None:
    producer = TransactionProducer(group, ns, check_listener=lambda _m: LocalTransactionState.UNKNOW)
    await producer.start()

    def die(_msg: Message, _arg: object) -> LocalTransactionState:
        print("HALF-SENT", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("unreachable")

    await producer.send_message_in_transaction(Message(topic, body.encode()), executor=die)
    print("NOT-DEAD", flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
