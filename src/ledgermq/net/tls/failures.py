"""Why a TLS handshake failed, as a short reason (a metric label) and a sentence (the log line).

Refusals are logged once per connection by the side that refuses, naming the peer:
"TLS: refused <peer> on <port name>: <sentence>".
"""

from __future__ import annotations

import ssl

EXPIRED = "expired"
UNTRUSTED = "untrusted"
WRONG_HOST = "wrong-host"
NO_CLIENT_CERT = "no-client-cert"
CERT_REFUSED_BY_PEER = "refused-by-peer"
PLAIN_ON_ENFORCING = "plain-on-enforcing"
TIMEOUT = "timeout"
PEER_CLOSED = "peer-closed"
OTHER = "other"

# OpenSSL's X509_V_ERR_* codes that mean "not signed by anyone we trust"
_UNTRUSTED_CODES = frozenset({2, 18, 19, 20, 21, 27, 28, 30})
_EXPIRED_CODES = frozenset({9, 10})  # not yet valid, expired
_HOST_MISMATCH = frozenset({62, 64})  # hostname, IP address


def classify(exc: BaseException) -> tuple[str, str]:
    """(reason, sentence) for a failed handshake."""
    if isinstance(exc, TimeoutError):
        return TIMEOUT, "no TLS handshake within the timeout"
    if isinstance(exc, (ConnectionResetError, BrokenPipeError, ssl.SSLEOFError)):
        return PEER_CLOSED, "it closed the connection during the handshake (did it refuse our certificate?)"
    if isinstance(exc, ssl.SSLCertVerificationError):
        code = exc.verify_code
        detail = exc.verify_message or str(exc)
        if code in _EXPIRED_CODES:
            return EXPIRED, f"its certificate is expired or not yet valid ({detail})"
        if code in _HOST_MISMATCH:
            return WRONG_HOST, f"its certificate is for another host ({detail})"
        if code in _UNTRUSTED_CODES:
            return UNTRUSTED, f"its certificate is not signed by a trusted CA ({detail})"
        return OTHER, f"its certificate did not verify ({detail})"
    if isinstance(exc, ssl.SSLError):
        reason = (exc.reason or "").upper()
        if reason in ("PEER_DID_NOT_RETURN_A_CERTIFICATE", "TLSV13_ALERT_CERTIFICATE_REQUIRED"):
            return NO_CLIENT_CERT, "no client certificate, and this port requires one"
        if "ALERT" in reason and ("CERTIFICATE" in reason or "UNKNOWN_CA" in reason or "DECRYPT" in reason):
            return CERT_REFUSED_BY_PEER, f"the peer refused our certificate ({exc.reason})"
        if reason in ("WRONG_VERSION_NUMBER", "HTTP_REQUEST", "UNSUPPORTED_PROTOCOL"):
            return OTHER, f"not a TLS handshake it could read ({exc.reason})"
        return OTHER, f"TLS handshake failed: {exc.reason or exc}"
    return OTHER, f"TLS handshake failed: {type(exc).__name__}: {exc}"
