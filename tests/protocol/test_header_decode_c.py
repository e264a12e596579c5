"""The compiled header decoder (ledgermq/_recordc.c, ``decode_header``) against the generated
Python decoder it stands in for, over every request and response header class: for any
extFields (what clients send, and odd values: signs, spaces, "null", non-ASCII digits,
numbers past their Java type, other spellings of booleans, missing required fields,
values that are not strings), the two must build equal headers, field by field and type
by type, or raise the same error with the same text.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledgermq.protocol import (
    headers_admin,
    headers_controller,
    headers_dledger,
    headers_namesrv,
    headers_pull,
    headers_send,
)
from ledgermq.protocol.header_codec import RequestHeader, ResponseHeader, build_decoder, wires
from ledgermq.protocol.headers_send import V2_KEYS, SendMessageRequestHeader
from tests.store.test_batch_records_c import needs_c

MODULES = (headers_admin, headers_controller, headers_dledger, headers_namesrv, headers_pull, headers_send)
CLASSES = sorted(
    {
        obj
        for module in MODULES
        for obj in vars(module).values()
        if isinstance(obj, type) and issubclass(obj, (RequestHeader, ResponseHeader)) and dataclasses.is_dataclass(obj)
    },
    key=lambda c: c.__qualname__,
)

_VALUES = st.one_of(
    st.sampled_from(["0", "1", "7", "42", "0042", "true", "false", "TRUE", "True", " 1", "1 ", "", "null", "-1"]),
    st.sampled_from(["2147483647", "2147483648", "9223372036854775807", "9223372036854775808", "999999999"]),
    st.sampled_from(["١٢", "yes", "x", "1.5", "+3", "TopicA", "%RETRY%g"]),
    st.integers(-(2**64), 2**64).map(str),
    st.text(max_size=8),
)


def _shape(header: object) -> list[tuple[type, object]]:
    return [(type(getattr(header, f.name)), getattr(header, f.name)) for f in dataclasses.fields(header)]  # type: ignore[arg-type]


def _outcome(decode: Any, ext: Any) -> tuple[str, Any]:
    try:
        return "ok", _shape(decode(ext))
    except Exception as exc:  # the same error, with the same text, either way
        return type(exc).__name__, str(exc)


@st.composite
def cases(draw: st.DrawFn) -> tuple[type, dict[str, str], dict[str, Any]]:
    cls = draw(st.sampled_from(CLASSES))
    renames = V2_KEYS if cls is SendMessageRequestHeader and draw(st.booleans()) else {}
    ext: dict[str, Any] = {}
    for attr, wire in wires(cls):
        if draw(st.integers(0, 5)):  # most fields there
            ext[renames.get(attr, wire.key)] = draw(_VALUES)
    if draw(st.integers(0, 9)) == 0 and ext:  # a value that is not a string
        ext[draw(st.sampled_from(sorted(ext)))] = draw(st.sampled_from([7, None, True, 1.5]))
    return cls, renames, ext


@needs_c
@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_the_compiled_decoder_answers_as_the_generated_one(case: tuple[type, dict[str, str], dict[str, Any]]) -> None:
    cls, renames, ext = case
    compiled = build_decoder(cls, renames)
    assert compiled is not None
    slow = compiled.args[2]  # type: ignore[attr-defined]
    assert _outcome(compiled, ext) == _outcome(slow, ext)
    assert _outcome(compiled, dict(ext)) == _outcome(slow, ext)


@needs_c
@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__qualname__)
def test_every_header_class_decodes_through_the_compiled_decoder(cls: type) -> None:
    """A class whose decoder quietly stayed Python would not be checked above."""
    decoder = cls._decoder  # type: ignore[attr-defined]
    assert getattr(decoder, "func", None) is not None and decoder.func.__name__ == "decode_header"


@needs_c
def test_what_clients_send_is_decoded_without_the_slow_path() -> None:
    """A SEND_MESSAGE_V2 header as our client and Java's send it decodes in C: the slow
    decoder is never called."""
    ext = {
        "a": "pg",
        "b": "SingleTopic",
        "c": "TBW102",
        "d": "4",
        "e": "3",
        "f": "0",
        "g": "1732000000123",
        "h": "0",
        "i": "WAIT\x01true",
        "j": "0",
        "k": "false",
        "m": "false",
    }
    compiled = build_decoder(SendMessageRequestHeader, V2_KEYS)
    calls: list[object] = []
    slow = compiled.args[2]  # type: ignore[attr-defined]
    spy = type(compiled)(compiled.func, *compiled.args[:2], lambda e: calls.append(e) or slow(e), *compiled.args[3:])  # type: ignore[attr-defined]
    header = spy(ext)
    assert calls == []
    assert (header.topic, header.queue_id, header.born_timestamp, header.batch) == (
        "SingleTopic",
        3,
        1732000000123,
        False,
    )
