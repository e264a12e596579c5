"""``SyncTransactionProducer``: the blocking facade of ``TransactionProducer`` (re-exported by
``ledgermq.client.sync``).

The executor and the check listener are plain functions here; the asyncio producer runs
them in worker threads (never on the facade's loop thread), so they may block and may call
other blocking facade methods.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ledgermq.client.producer.transaction import CheckListener, TransactionProducer
from ledgermq.client.sync.loop_thread import Lifecycle, blocking

__all__ = ["SyncTransactionProducer"]


class SyncTransactionProducer(Lifecycle[TransactionProducer]):
    """``with SyncTransactionProducer("pg", ns, check_listener=check) as p:
    p.send_message_in_transaction(msg, executor=run_local)``; options are
    ``TransactionProducer``'s."""

    def __init__(
        self, group: str, namesrv_addrs: str | Sequence[str], *, check_listener: CheckListener, **options: Any
    ) -> None:
        self._attach(lambda: TransactionProducer(group, namesrv_addrs, check_listener=check_listener, **options))

    @property
    def producer(self) -> TransactionProducer:
        """The asyncio producer underneath (use it only on the facade's loop)."""
        return self._target

    send_message_in_transaction = blocking(TransactionProducer.send_message_in_transaction)
    send = blocking(TransactionProducer.send)
