"""Seeded property tests: a signed request passes; any change to it does not."""

from __future__ import annotations

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from ledgermq.acl.decide import decide
from ledgermq.acl.model import parse_acl_text
from ledgermq.acl.signing import ACCESS_KEY, SIGNATURE, UNSIGNED_FIELDS, Credentials, sign_fields, signed_content
from ledgermq.protocol.codes import RequestCode

CFG = parse_acl_text("accounts:\n  - {accessKey: fuzzerAK, secretKey: fuzzerSK, defaultTopicPerm: PUB|SUB}\n")
CREDS = Credentials("fuzzerAK", "fuzzerSK")
CODE = RequestCode.GET_MAX_OFFSET  # needs no resource: only identity and signature decide
HOST = "127.0.0.1"
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

keys = st.text(st.characters(codec="utf-8"), min_size=1, max_size=8).filter(lambda k: k not in UNSIGNED_FIELDS)
fields = st.dictionaries(keys.filter(lambda k: k != ACCESS_KEY), st.text(max_size=12), max_size=6)
bodies = st.binary(max_size=64)


def signed(ext: dict[str, str], body: bytes) -> dict[str, str]:
    out = dict(ext)
    sign_fields(out, body, CREDS)
    return out


@seed(20261126)
@SETTINGS
@given(fields, bodies)
def test_signed_request_passes(ext: dict[str, str], body: bytes) -> None:
    assert decide(CFG, CODE, signed(ext, body), body, HOST).allowed


@seed(20261126)
@SETTINGS
@given(fields, bodies, st.data())
def test_any_mutation_is_refused(ext: dict[str, str], body: bytes, data: st.DataObject) -> None:
    good = signed(ext, body)
    kind = data.draw(st.sampled_from(["value", "add", "drop", "body", "signature", "no_access_key", "key"]))
    bad, bad_body = dict(good), body
    if kind == "value" and ext:
        k = data.draw(st.sampled_from(sorted(ext)))
        bad[k] = data.draw(st.text(max_size=12).filter(lambda v: v != good[k]))
    elif kind == "add":
        k = data.draw(keys.filter(lambda k: k not in good))
        bad[k] = data.draw(st.text(min_size=1, max_size=12))
    elif kind == "drop" and ext:
        k = data.draw(st.sampled_from(sorted(ext)))
        if good[k] == "":  # dropping an empty value leaves the content as it was: rename instead
            bad[k + "x"] = bad.pop(k) + "x"
        else:
            del bad[k]
    elif kind == "body":
        bad_body = data.draw(bodies.filter(lambda b: b != body))
    elif kind == "signature":
        bad[SIGNATURE] = data.draw(st.text(max_size=40).filter(lambda s: s != good[SIGNATURE]))
    elif kind == "no_access_key":
        del bad[ACCESS_KEY]
    else:  # signed with another secret
        sign_fields(bad, body, Credentials("fuzzerAK", "another-secret"))
    if (bad, bad_body) == (good, body) or _same_content(good, body, bad, bad_body):
        return  # the draw changed nothing the signature covers (e.g. "" moved between keys)
    assert not decide(CFG, CODE, bad, bad_body, HOST).allowed


def _same_content(a: dict[str, str], ab: bytes, b: dict[str, str], bb: bytes) -> bool:
    """Values concatenate: a change that keeps the concatenation and the Signature is no change
    to the signed bytes (a property of RocketMQ's scheme, not of ours)."""
    return a.get(SIGNATURE) == b.get(SIGNATURE) and signed_content(a, ab) == signed_content(b, bb)
