"""One error hierarchy for the whole broker.

Callers decide what to do from the class (and its flags), never from message text:
a store error is either the caller's fault (bad input), a transient condition, or a
sticky failure that needs the store reopened.
"""

from __future__ import annotations


class LedgerError(Exception):
    """Root of every error ledgermq raises on purpose."""


class ConfigError(LedgerError):
    """A configuration key or value is unusable; the message names the key."""


class StartupError(LedgerError):
    """A server could not start (a port taken, a store in use); the message is one line
    naming the cause and the setting to change, for the operator to read as it is."""


class ProtocolError(LedgerError):
    """Bytes that do not follow a RocketMQ format (frame, record, header)."""


class LocalProtocolError(ProtocolError):
    """We were asked to encode something the format cannot carry."""


class PropertiesTooLargeError(LocalProtocolError):
    """A message's property string is longer than the format's 32767 bytes."""


class RemoteProtocolError(ProtocolError):
    """Bytes we received (from a peer or a file) do not decode."""


class StoreError(LedgerError):
    """Base of message-store failures."""


class StoreLockedError(StoreError):
    """Another process (or another store object) already owns the store directory."""


class CorruptRecordError(StoreError, RemoteProtocolError):
    """A commit-log record failed its magic, size or CRC check."""


class CorruptRangeError(StoreError):
    """Commit-log bytes in [start, end) are known corrupt on this broker: they are never
    served (to a consumer or a replica) until a healthy replica's bytes repair them."""

    def __init__(self, start: int, end: int, reason: str) -> None:
        super().__init__(
            f"commit log range [{start}, {end}) is corrupt on this broker ({reason}) and awaits repair from a replica"
        )
        self.start = start
        self.end = end
        self.reason = reason

    def __reduce__(self) -> tuple[type[CorruptRangeError], tuple[int, int, str]]:
        return (CorruptRangeError, (self.start, self.end, self.reason))


class StoreFullError(StoreError):
    """No segment could be created (disk full or file-system error)."""


class StoreClosedError(StoreError):
    """The store is shut down (or shutting down) and takes no more writes."""


class StoreFailedError(StoreError):
    """The store hit an unrecoverable I/O error and refuses writes until reopened."""


class MessageIllegalError(StoreError):
    """The message breaks a size or format limit (maxMessageSize, properties > 32767)."""


class InvariantViolation(LedgerError):
    """An internal invariant broke: a bug in ledgermq, never the user's input."""
