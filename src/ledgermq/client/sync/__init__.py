"""A blocking facade over the asyncio client, for scripts and threaded programs.

Every facade object runs its asyncio counterpart on one shared event loop (uvloop when
installed) in a background thread, ``ledgermq-sync-loop``. The thread starts with the
first facade object and stops when the last one is shut down (the loop's tasks cancelled,
async generators and the default executor closed, the thread joined). Calls may come from
any number of threads at once; each blocks its caller until the loop has the answer, and
raises the same exceptions the asyncio call raises.

Callbacks given to the facade (``SyncProducer.send_async``) are plain functions run on a
small thread pool shared by the facade (``ledgermq-sync-callback``), never on the loop
thread, so they may call blocking facade methods themselves. A blocking call made on the
loop thread (from an asyncio callback of your own) would deadlock and raises RuntimeError.

The facades wrap each public coroutine method of their asyncio object through the
``blocking`` descriptor, which keeps each method's signature for type checkers (``on_loop``
does the same for plain methods, run on the loop thread because they touch the client's
state); ``SyncAdmin`` does the same for ``AdminClient`` in ``ledgermq.admin.sync``.
``SyncLitePullConsumer`` and ``SyncPushConsumer`` wrap the consumers;
a push consumer's plain listener runs on the consumer's own worker pool (its
``consume_thread_max`` threads), and queue-change listeners of the lite pull consumer on
the facade's callback threads.

The package: ``loop_thread`` (the thread and the descriptors), ``producer``,
``transaction`` and ``consumers`` (one facade each).
"""

from __future__ import annotations

from ledgermq.client.sync.consumers import SyncLitePullConsumer, SyncPushConsumer
from ledgermq.client.sync.loop_thread import blocking, on_loop, shutdown_all
from ledgermq.client.sync.producer import SyncProducer
from ledgermq.client.sync.transaction import SyncTransactionProducer

__all__ = [
    "SyncLitePullConsumer",
    "SyncProducer",
    "SyncPushConsumer",
    "SyncTransactionProducer",
    "blocking",
    "on_loop",
    "shutdown_all",
]
