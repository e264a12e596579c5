"""The client instance's TLS: ``TlsOptions`` (pure settings, client/tls.py) made into the
remoting client's ``ClientTls`` (its certificate files read now, and again when they change)."""

from __future__ import annotations

from ledgermq.client.errors import MQClientError
from ledgermq.client.tls import TlsOptions
from ledgermq.errors import ConfigError
from ledgermq.net.tls.profile import ClientTls
from ledgermq.net.tls.settings import TlsSettings


def tls_settings(options: TlsOptions) -> TlsSettings:
    """The ``tls.client.*`` keys ``options`` stand for."""
    return TlsSettings(
        enable=True,
        test_mode=False,
        client_trust_cert_path=options.trust_cert_path,
        client_cert_path=options.cert_path,
        client_key_path=options.key_path,
        client_key_password=options.key_password,
        client_auth_server=options.auth_server,
        client_verify_hostname=options.verify_hostname,
    )


def client_tls(use_tls: bool, tls: TlsOptions | None) -> ClientTls | None:
    """The remoting client's TLS (None: plain); a file that does not load raises MQClientError."""
    if not use_tls:
        return None
    try:
        return ClientTls.from_settings(tls_settings(tls or TlsOptions()))
    except ConfigError as exc:
        raise MQClientError(f"TLS: {exc}") from exc
