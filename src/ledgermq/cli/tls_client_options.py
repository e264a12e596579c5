"""The client TLS options of every command that connects to a cluster (``ledgermq admin``,
``ledgermq console``; docs/tls.md): ``--tls`` and the certificates, also read from the
environment, checked together so that nothing given is silently ignored."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from ledgermq.client.errors import MQClientError
from ledgermq.client.tls import TlsOptions

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["tls_client_options", "tls_options_from_flags"]


def tls_client_options(fn: F) -> F:
    """Adds --tls, --tls-trust-cert, --tls-cert, --tls-key, --tls-key-password, --tls-insecure."""
    options = [
        click.option(
            "--tls", "use_tls", is_flag=True, envvar="LEDGERMQ_TLS", help="connect over TLS (useTLS; env LEDGERMQ_TLS)"
        ),
        click.option(
            "--tls-trust-cert", envvar="LEDGERMQ_TLS_TRUST_CERT", help="CA file the servers' certificates chain to"
        ),
        click.option("--tls-cert", envvar="LEDGERMQ_TLS_CERT", help="client certificate, for servers that require one"),
        click.option("--tls-key", envvar="LEDGERMQ_TLS_KEY", help="the client certificate's private key"),
        click.option("--tls-key-password", envvar="LEDGERMQ_TLS_KEY_PASSWORD", help="the private key's password"),
        click.option(
            "--tls-insecure", is_flag=True, help="do not check the servers' certificates (RocketMQ's authServer=false)"
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def tls_options_from_flags(
    use_tls: bool,
    tls_trust_cert: str | None,
    tls_cert: str | None,
    tls_key: str | None,
    tls_key_password: str | None,
    tls_insecure: bool,
) -> TlsOptions | None:
    """The client's TLS options, or None for plain connections; a certificate option without
    ``--tls`` (or a certificate without its key) is a usage error naming the option."""
    files = (("--tls-trust-cert", tls_trust_cert), ("--tls-cert", tls_cert), ("--tls-key", tls_key))
    given = [name for name, value in files if value]
    if tls_key_password:
        given.append("--tls-key-password")
    if not use_tls:
        if given or tls_insecure:
            raise click.UsageError(f"{(given or ['--tls-insecure'])[0]} needs --tls")
        return None
    try:
        return TlsOptions(
            trust_cert_path=tls_trust_cert or "",
            cert_path=tls_cert or "",
            key_path=tls_key or "",
            key_password=tls_key_password or "",
            auth_server=not tls_insecure,
        )
    except MQClientError as exc:
        raise click.UsageError(str(exc)) from None
