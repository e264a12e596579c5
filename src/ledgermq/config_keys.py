"""What brokers and name servers do with RocketMQ config keys they do not read.

RocketMQ broker.conf files carry many keys that size Java thread pools or tune the JVM's
write path. Each key ledgermq reads is a field of BrokerConfig, StoreConfig, HAConfig or
TlsSettings (the ``tls.*`` keys and ``useTLS``, net/tls/settings.py);
every other key falls into one of three groups, so none is ever silently accepted:

* **no effect** (``NO_EFFECT``): the key tunes machinery ledgermq does not have (thread
  pools, off-heap write buffers, page-cache locks). Ignoring it weakens nothing the user
  asked for, so start-up logs one warning per key with the reason.
* **refused** (``REFUSED``): the key asks for a guarantee or a service ledgermq does not
  provide (filter servers, an address server). Ignoring it would leave the user
  believing something holds that does not, so start-up fails naming the key. A value that
  asks for nothing (``filterServerNums=0``) is accepted.
* **unknown**: anything else is warned about as unknown (a typo, or a key of a newer
  RocketMQ), as RocketMQ itself ignores keys it does not know.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ledgermq.errors import ConfigError

log = logging.getLogger(__name__)

_EVENT_LOOP = "requests run as tasks on one event loop; there is no thread pool to size"

NO_EFFECT: Mapping[str, str] = {
    **{
        k: _EVENT_LOOP
        for k in (
            "sendMessageThreadPoolNums",
            "pullMessageThreadPoolNums",
            "processReplyMessageThreadPoolNums",
            "queryMessageThreadPoolNums",
            "adminBrokerThreadPoolNums",
            "clientManageThreadPoolNums",
            "consumerManageThreadPoolNums",
            "heartbeatThreadPoolNums",
            "endTransactionThreadPoolNums",
            "serverWorkerThreads",
            "serverCallbackExecutorThreads",
            "serverSelectorThreads",
            "clientWorkerThreads",
            "clientCallbackExecutorThreads",
            "sendThreadPoolQueueCapacity",
            "pullThreadPoolQueueCapacity",
            "useEpollNativeSelector",
        )
    },
    "transientStorePoolEnable": "puts write straight into the mapped commit log; there is no off-heap write buffer",
    "transientStorePoolSize": "puts write straight into the mapped commit log; there is no off-heap write buffer",
    "warmMapedFileEnable": "commit-log files are not pre-faulted",
    "flushLeastPagesWhenWarmMapedFile": "commit-log files are not pre-faulted",
    "osPageCacheBusyTimeOutMills": "puts are serialized on the event loop; there is no page-cache lock to time",
    "useReentrantLockWhenPutMessage": "puts are serialized on the event loop; there is no put lock to choose",
    "brokerFastFailureEnable": "send requests are not queued behind a thread pool, so there is no queue to expire",
    "waitTimeMillsInSendQueue": "send requests are not queued behind a thread pool, so there is no queue to expire",
    "transferMsgByHeap": "pulled messages are always copied into the response",
    "slaveReadEnable": "a master never redirects pulls to a slave; consumers read from slaves while the master is down",
    "messageIndexSafe": "the index is always recovered as RocketMQ does with messageIndexSafe=true",
    "enableConsumeQueueExt": "SQL92 filtering does not use a consume-queue extension file",
    "enableCalcFilterBitMap": "SQL92 filtering does not use a consume-queue extension file",
    "mappedFileSizeConsumeQueueExt": "SQL92 filtering does not use a consume-queue extension file",
}


def _true(value: str) -> bool:
    return value.strip().lower() == "true"


@dataclass(frozen=True, slots=True)
class Refusal:
    """A key refused when ``asks(value)`` holds: its value asks for what ledgermq does not do."""

    asks: Callable[[str], bool]
    reason: str


REFUSED: Mapping[str, Refusal] = {
    "filterServerNums": Refusal(
        lambda v: v.strip() not in ("", "0"), "filter servers (class filters) are not supported"
    ),
    "fetchNamesrvAddrByAddressServer": Refusal(
        _true, "name servers cannot be looked up from an address server; set namesrvAddr"
    ),
}


def check_unimplemented_keys(props: Mapping[str, str], known: set[str]) -> None:
    """Refuse keys whose value asks for what ledgermq lacks; warn about the rest by name.

    Keys in ``known`` are read by a config dataclass and are not looked at here.
    """
    for k in sorted(set(props) - known):
        refusal = REFUSED.get(k)
        if refusal is not None:
            if refusal.asks(props[k]):
                raise ConfigError(f"{k}={props[k]} is not supported: {refusal.reason}")
            continue
        reason = NO_EFFECT.get(k)
        if reason is not None:
            log.warning("config key %r has no effect in ledgermq: %s", k, reason)
        else:
            log.warning("unknown config key %r ignored", k)
