"""Request signatures: what RocketMQ's AclClientRPCHook sends and PlainAccessValidator checks.

The signed content is the values of the request's extFields, ordered by key the way a Java
TreeMap orders strings (UTF-16 code units), concatenated and UTF-8 encoded, followed by the
body bytes. The broker leaves out ``Signature`` itself and ``_UNIQUE_KEY_QUERY``; every other
field counts, ``AccessKey``, ``SecurityToken`` and the C++ client's ``OnsChannel`` included.
The signature is base64(HMAC-SHA1(secretKey, content)). A request that carries
``_UNIQUE_KEY_QUERY`` may also be signed over it (what Java's client does): see
``signature_matches``.

A client signs with exactly the broker's content function, so a request this module signs
passes a Java broker as well as ours.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ledgermq.protocol.command import RemotingCommand

ACCESS_KEY = "AccessKey"
SECRET_KEY = "SecretKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
ONS_CHANNEL = "OnsChannel"  # the C++ client's extra field: signed like any other
UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"  # MixAll.UNIQUE_MSG_QUERY_FLAG: never signed
UNSIGNED_FIELDS = frozenset({SIGNATURE, UNIQUE_MSG_QUERY_FLAG})


@dataclass(frozen=True, slots=True)
class Credentials:
    """What a client signs with (RocketMQ's SessionCredentials). ``repr`` hides the secret so
    settings can be logged."""

    access_key: str
    secret_key: str
    security_token: str | None = None

    def __post_init__(self) -> None:
        if not self.access_key or not self.secret_key:
            raise ValueError("credentials need a non-empty access key and secret key")

    def __repr__(self) -> str:
        token = ", security_token=***" if self.security_token is not None else ""
        return f"Credentials(access_key={self.access_key!r}, secret_key=***{token})"


def _java_order(key: str) -> bytes:
    """Java compares strings by UTF-16 code units; big-endian UTF-16 bytes sort the same way."""
    return key.encode("utf-16-be", "surrogatepass")


def _signed_head(ext_fields: Mapping[str, str], unsigned: frozenset[str]) -> bytes:
    keys = sorted((k for k in ext_fields if k not in unsigned), key=_java_order)
    return "".join(ext_fields[k] for k in keys).encode("utf-8", "surrogatepass")


def signed_content(ext_fields: Mapping[str, str], body: bytes, unsigned: frozenset[str] = UNSIGNED_FIELDS) -> bytes:
    """The bytes a signature covers (AclUtils.combineRequestContent over the validator's map)."""
    head = _signed_head(ext_fields, unsigned)
    return head + body if body else head


def _request_signature(
    ext_fields: Mapping[str, str], body: bytes, secret_key: str, unsigned: frozenset[str] = UNSIGNED_FIELDS
) -> str:
    """``calc_signature(signed_content(...))`` without copying the body (up to 4 MiB) into the content."""
    mac = hmac.new(secret_key.encode("utf-8"), _signed_head(ext_fields, unsigned), hashlib.sha1)
    mac.update(body)
    return base64.b64encode(mac.digest()).decode("ascii")


def calc_signature(content: bytes, secret_key: str) -> str:
    """base64(HMAC-SHA1(secret, content)), as AclSigner.calSignature."""
    digest = hmac.new(secret_key.encode("utf-8"), content, hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def sign_fields(ext_fields: dict[str, str], body: bytes, credentials: Credentials) -> None:
    """Add AccessKey (and SecurityToken), then the Signature over everything, in place: the
    steps of AclClientRPCHook.doBeforeRequest."""
    ext_fields[ACCESS_KEY] = credentials.access_key
    if credentials.security_token is not None:
        ext_fields[SECURITY_TOKEN] = credentials.security_token
    ext_fields.pop(SIGNATURE, None)
    ext_fields[SIGNATURE] = _request_signature(ext_fields, body, credentials.secret_key)


def signature_matches(ext_fields: Mapping[str, str], body: bytes, secret_key: str) -> bool:
    """Whether the request's Signature is the one ``secret_key`` gives (constant-time compare)."""
    given = ext_fields.get(SIGNATURE)
    if given is None:
        return False
    raw = given.encode("utf-8", "surrogatepass")
    expected = _request_signature(ext_fields, body, secret_key)
    if hmac.compare_digest(expected.encode("ascii"), raw):
        return True
    if UNIQUE_MSG_QUERY_FLAG not in ext_fields:
        return False
    # Java's client adds _UNIQUE_KEY_QUERY before its hook signs, so it signs the flag the
    # broker leaves out, and a query by unique key fails against a Java broker. We accept
    # that signature too: the flag only picks how the query's key is read.
    with_flag = _request_signature(ext_fields, body, secret_key, frozenset({SIGNATURE}))
    return hmac.compare_digest(with_flag.encode("ascii"), raw)


def signer(credentials: Credentials) -> Callable[[RemotingCommand], None]:
    """The hook a RemotingClient runs on each request it sends (``RemotingClient(sign=...)``)."""

    def sign(cmd: RemotingCommand) -> None:
        sign_fields(cmd.ext_fields, cmd.body, credentials)

    return sign
