"""Request signatures against a vector computed by hand from RocketMQ's algorithm."""

from __future__ import annotations

import pytest

from ledgermq.acl.signing import (
    ACCESS_KEY,
    SECURITY_TOKEN,
    SIGNATURE,
    Credentials,
    calc_signature,
    sign_fields,
    signature_matches,
    signed_content,
    signer,
)
from ledgermq.net.client import RemotingClient
from ledgermq.protocol.command import RemotingCommand

# PlainAccessValidator's content: extFields sorted by key (Java TreeMap: "AccessKey" <
# "_UNIQUE_KEY_QUERY" < "queueId" < "topic"), Signature and _UNIQUE_KEY_QUERY left out,
# values concatenated, then the body: "rocketmq2" + "1" + "TopicA" + "hello". Then
# base64(HMAC-SHA1("12345678", ...)); computed independently with
#   printf 'rocketmq21TopicAhello' | openssl dgst -sha1 -hmac 12345678 -binary | base64
VECTOR_EXT = {
    "topic": "TopicA",
    "queueId": "1",
    "AccessKey": "rocketmq2",
    "_UNIQUE_KEY_QUERY": "true",
    "Signature": "whatever was there",
}
VECTOR_BODY = b"hello"
VECTOR_SIGNATURE = "rp/4JPTwEMd7rleAmRXOKdViT+k="


def test_content_is_sorted_values_then_body() -> None:
    assert signed_content(VECTOR_EXT, VECTOR_BODY) == b"rocketmq21TopicAhello"


def test_known_vector() -> None:
    assert calc_signature(signed_content(VECTOR_EXT, VECTOR_BODY), "12345678") == VECTOR_SIGNATURE
    assert signature_matches({**VECTOR_EXT, SIGNATURE: VECTOR_SIGNATURE}, VECTOR_BODY, "12345678")


def test_java_string_order_not_code_point_order() -> None:
    # U+FF21 (fullwidth A) sorts after a surrogate pair in code points but before it in UTF-16 units.
    ext = {"\uff21": "x", "\U0001f600": "y"}
    assert signed_content(ext, b"") == b"yx"  # code-point order would give b"xy"


def test_sign_fields_adds_access_key_token_and_signature() -> None:
    ext = {"topic": "TopicA", "queueId": "1"}
    sign_fields(ext, VECTOR_BODY, Credentials("rocketmq2", "12345678"))
    assert ext[ACCESS_KEY] == "rocketmq2"
    assert ext[SIGNATURE] == VECTOR_SIGNATURE  # the same content as the vector: _UNIQUE_KEY_QUERY never counts
    ext2 = {"topic": "TopicA"}
    sign_fields(ext2, b"", Credentials("rocketmq2", "12345678", security_token="tok"))
    assert ext2[SECURITY_TOKEN] == "tok"
    assert signature_matches(ext2, b"", "12345678")
    assert not signature_matches({**ext2, SECURITY_TOKEN: "other"}, b"", "12345678")


def test_signing_twice_is_stable() -> None:
    """A retried request is signed again; the old Signature must not count."""
    cmd = RemotingCommand.request(10, {"topic": "T"}, b"body")
    sign = signer(Credentials("rocketmq2", "12345678"))
    sign(cmd)
    first = dict(cmd.ext_fields)
    sign(cmd)
    assert cmd.ext_fields == first


def test_credentials_hide_the_secret_and_need_both_keys() -> None:
    creds = Credentials("rocketmq2", "s3cr3t-value", security_token="T0KEN-VALUE")
    assert "s3cr3t" not in repr(creds) and "T0KEN" not in repr(creds)
    with pytest.raises(ValueError):
        Credentials("rocketmq2", "")


def test_remoting_client_sign_hook_is_stored() -> None:
    sign = signer(Credentials("rocketmq2", "12345678"))
    assert RemotingClient(sign=sign).sign is sign


def test_java_client_unique_key_query_signature_is_accepted() -> None:
    """Java's client signs _UNIQUE_KEY_QUERY (added before its hook runs); we accept that too,
    but nothing else outside the broker's content."""
    ext = {"topic": "TopicA", "key": "k", "AccessKey": "rocketmq2", "_UNIQUE_KEY_QUERY": "true"}
    java_style = calc_signature(signed_content(ext, b"", frozenset({SIGNATURE})), "12345678")
    assert signature_matches({**ext, SIGNATURE: java_style}, b"", "12345678")
    ours = dict(ext)
    sign_fields(ours, b"", Credentials("rocketmq2", "12345678"))
    assert signature_matches(ours, b"", "12345678")
    assert ours[SIGNATURE] != java_style
    assert not signature_matches({**ext, "_UNIQUE_KEY_QUERY": "false", SIGNATURE: java_style}, b"", "12345678")
