"""Client errors: one small hierarchy, decided by class and flags, never by message text.

* ``MQClientError``: the root; also what a send raises when every attempt failed (its
  ``__cause__`` is the last attempt's error) and for local refusals (bad message, not
  started, no route).
* ``MQConnectError``: the broker or name server could not be reached, closed the
  connection or did not answer in time. Always retriable on another broker.
* ``MasterMovedError``: an ``MQConnectError`` for an attempt the producer gave up waiting
  on because the route now names another master for its broker group (the outcome is
  unknown: the message may have been stored too).
* ``MQBrokerError(code, remark)``: the broker answered with an error code. ``retriable``
  says whether the Java client would retry the send on another broker
  (``DefaultMQProducer.retryResponseCodes``). ``ResponseCode`` (exported here) names
  its ``code`` values, so callers can decide on them without reaching into the protocol.
"""

from __future__ import annotations

from ledgermq.errors import LedgerError
from ledgermq.protocol.codes import ResponseCode as ResponseCode  # public: what MQBrokerError.code holds

# DefaultMQProducer.retryResponseCodes in 4.9.7: TOPIC_NOT_EXIST, SERVICE_NOT_AVAILABLE,
# SYSTEM_ERROR, NO_PERMISSION, NO_BUYER_ID, NOT_IN_CURRENT_UNIT.
RETRY_RESPONSE_CODES: frozenset[int] = frozenset({17, 14, 1, 16, 204, 205})


def code_name(code: int) -> str:
    try:
        return ResponseCode(code).name
    except ValueError:
        return "CODE"


class MQClientError(LedgerError):
    """Something a client call could not do."""

    @property
    def retriable(self) -> bool:
        """Would a send retry this on another broker?"""
        return False


class MessageInvalidError(MQClientError):
    """The message breaks a client-side rule (topic name, empty or oversized body, batch rules)."""


class ClientStateError(MQClientError):
    """The client is not started, or already shut down."""


class NoRouteError(MQClientError):
    """The name servers know no route of the topic (for a send: nor of the auto-create
    topic TBW102); not a connection problem."""


class NoWritableMasterError(NoRouteError):
    """The name servers know the topic, but none of its broker groups has a master to write
    to now (the master gone, a new one not registered yet: an election in progress)."""


class NoMasterError(MQClientError):
    """The route names no master for the queue's broker group (a master gone, its
    successor not yet registered); retried like an unreachable master."""

    @property
    def retriable(self) -> bool:
        return True


class MQConnectError(MQClientError):
    """No connection, a closed connection or no answer in time."""

    def __init__(self, message: str, addr: str = "", *, timeout: bool = False) -> None:
        super().__init__(message)
        self.addr = addr
        self.timeout = timeout

    @property
    def retriable(self) -> bool:
        return True


class MasterMovedError(MQConnectError):
    """An attempt abandoned while in flight: the route names ``new_addr`` as its broker
    group's master now. Whether the old master stored the message is unknown, so a retry
    may store it twice (RocketMQ delivery is at-least-once)."""

    def __init__(self, message: str, addr: str, new_addr: str) -> None:
        super().__init__(message, addr)
        self.new_addr = new_addr


class MQBrokerError(MQClientError):
    """The broker (or name server) answered with an error code."""

    def __init__(self, code: int, remark: str | None, addr: str = "", *, what: str = "") -> None:
        self.code = code
        self.remark = remark or ""
        self.addr = addr
        self.what = what  # the request, when the caller names it ("route", "topic list")
        prefix = f"{what}: " if what else ""
        where = f" from {addr}" if addr else ""
        detail = f": {self.remark}" if self.remark else ""
        super().__init__(f"{prefix}{code_name(code)} ({code}){where}{detail}")

    @property
    def retriable(self) -> bool:
        return self.code in RETRY_RESPONSE_CODES


class SendFailedError(MQClientError):
    """Every attempt of a send failed; ``attempts`` and ``brokers`` say where it went."""

    def __init__(self, message: str, *, attempts: int, brokers: list[str], last: BaseException | None) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.brokers = brokers
        self.last = last

    @property
    def code(self) -> int | None:
        return self.last.code if isinstance(self.last, MQBrokerError) else None
