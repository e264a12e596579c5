"""SSL contexts built from ``TlsSettings``, and rebuilt when their certificate files change.

A ``ContextSource`` hands out the current context for each new connection. At most once per
``tls.reloadIntervalMs`` (looked at when a connection asks, so an idle process does no work)
it compares the files' size, mtime and inode with what it last loaded; on a change it
builds a new context and new connections use it, established ones keep theirs. A rebuild
that fails (a certificate written but not yet its key) keeps the old context, logs the
reason once per change, and is tried again at the next look.
"""

from __future__ import annotations

import logging
import os
import ssl
import tempfile
from collections.abc import Callable
from pathlib import Path

from ledgermq.clock import SYSTEM_CLOCK
from ledgermq.errors import ConfigError
from ledgermq.net.tls.settings import ClientAuth, TlsSettings

log = logging.getLogger(__name__)

_FileStamp = tuple[int, int, int] | None


def _stamp(path: str) -> _FileStamp:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class ContextSource:
    """The SSL context for new connections of one side (server or client) of a process."""

    def __init__(
        self,
        what: str,
        build: Callable[[], ssl.SSLContext],
        files: tuple[str, ...],
        interval_s: float,
        *,
        monotonic: Callable[[], float] = SYSTEM_CLOCK.monotonic,
    ) -> None:
        self.what = what
        self._build = build
        self._files = files
        self._interval = interval_s
        self._monotonic = monotonic
        self._stamps = [_stamp(f) for f in files]
        self.context = build()  # at start-up a failure stops the process (ConfigError)
        self._next_look = monotonic() + interval_s
        self._failed_stamps: list[_FileStamp] | None = None
        self.reloads = 0
        self.reload_failures = 0

    def get(self) -> ssl.SSLContext:
        if self._files and self._monotonic() >= self._next_look:
            self._look()
        return self.context

    def _look(self) -> None:
        self._next_look = self._monotonic() + self._interval
        stamps = [_stamp(f) for f in self._files]
        if stamps == self._stamps or stamps == self._failed_stamps:
            return
        try:
            context = self._build()
        except (ConfigError, OSError, ssl.SSLError) as exc:
            self.reload_failures += 1
            self._failed_stamps = stamps
            log.error("TLS: %s certificate files changed but do not load (old ones kept): %s", self.what, exc)
            return
        self.context = context
        self._stamps = stamps
        self._failed_stamps = None
        self.reloads += 1
        log.info("TLS: %s certificates reloaded from %s; new connections use them", self.what, ", ".join(self._files))


def _load_chain(ctx: ssl.SSLContext, side: str, cert: str, key: str, password: str) -> None:
    try:
        ctx.load_cert_chain(cert, key, password or None)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"tls.{side}.certPath={cert} / tls.{side}.keyPath={key}: cannot load: {exc}") from exc


def _load_trust(ctx: ssl.SSLContext, side: str, path: str) -> None:
    try:
        ctx.load_verify_locations(cafile=path)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"tls.{side}.trustCertPath={path}: cannot load: {exc}") from exc


def server_context(settings: TlsSettings) -> ssl.SSLContext:
    """The context a server port answers TLS with."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if settings.test_mode:
        cert, key = _self_signed()
        _load_chain(ctx, "server", str(cert), str(key), "")
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    _load_chain(ctx, "server", settings.server_cert_path, settings.server_key_path, settings.server_key_password)
    need = settings.server_need_client_auth
    if need is not ClientAuth.NONE:
        _load_trust(ctx, "server", settings.server_trust_cert_path)
        ctx.verify_mode = ssl.CERT_REQUIRED if need is ClientAuth.REQUIRE else ssl.CERT_OPTIONAL
    return ctx


def client_context(settings: TlsSettings) -> ssl.SSLContext:
    """The context this process's connections to TLS servers use."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if settings.verifies_server:
        if settings.client_trust_cert_path:
            _load_trust(ctx, "client", settings.client_trust_cert_path)
        else:
            ctx.load_default_certs()
        ctx.check_hostname = settings.client_verify_hostname
        ctx.verify_mode = ssl.CERT_REQUIRED
    else:  # RocketMQ: without authServer (and in test mode) a client trusts any server
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if settings.client_cert_path and not settings.test_mode:
        _load_chain(ctx, "client", settings.client_cert_path, settings.client_key_path, settings.client_key_password)
    return ctx


_SELF_SIGNED: tuple[Path, Path] | None = None


def _self_signed() -> tuple[Path, Path]:
    """RocketMQ's test mode: one self-signed certificate per process, in a private temp dir."""
    global _SELF_SIGNED
    if _SELF_SIGNED is None:
        from ledgermq.net.tls.devca import DevCA

        directory = Path(tempfile.mkdtemp(prefix="ledgermq-tls-test-"))
        issued = DevCA("ledgermq test-mode CA").issue("ledgermq test mode", directory / "c.pem", directory / "k.pem")
        _SELF_SIGNED = (issued.cert_path, issued.key_path)
    return _SELF_SIGNED


def server_source(settings: TlsSettings) -> ContextSource:
    files = (
        ()
        if settings.test_mode
        else _present(settings.server_cert_path, settings.server_key_path, settings.server_trust_cert_path)
    )
    return ContextSource("server", lambda: server_context(settings), files, settings.reload_interval_ms / 1000)


def client_source(settings: TlsSettings) -> ContextSource:
    files = (
        ()
        if settings.test_mode
        else _present(settings.client_cert_path, settings.client_key_path, settings.client_trust_cert_path)
    )
    return ContextSource("client", lambda: client_context(settings), files, settings.reload_interval_ms / 1000)


def _present(*paths: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(p for p in paths if p))
