"""Start-up failures as one line an operator can act on.

A bind error from asyncio reads ``[Errno 98] Address already in use (while attempting to
bind on address ('0.0.0.0', 10912))``: it names neither which of the broker's listeners
failed nor the key that moves it. These helpers turn such errors into StartupError with
both, so ``ledgermq broker`` prints one line and exits instead of a traceback.
"""

from __future__ import annotations

import errno

from ledgermq.errors import StartupError, StoreLockedError


def bind_failed(what: str, host: str, port: int, key: str, exc: OSError) -> StartupError:
    """``what`` (e.g. "HA port") could not listen on host:port; ``key`` is the setting to change."""
    if exc.errno == errno.EADDRINUSE:
        cause = "is already in use (another broker or program listens there)"
    elif exc.errno == errno.EADDRNOTAVAIL:
        cause = f"cannot be bound: {host} is not an address of this machine"
    elif exc.errno == errno.EACCES:
        cause = "needs privileges to bind"
    else:
        cause = f"cannot be bound: {exc.strerror or exc}"
    return StartupError(f"{what} {host}:{port} {cause}; stop what uses it or set {key} to another port")


def store_locked(exc: StoreLockedError) -> StartupError:
    return StartupError(f"{exc}; stop the broker using it or set storePathRootDir to another directory")
