"""fastjson-tolerant JSON (docs/formats.md §3.4, §3.6): RocketMQ's Java side writes Map<Integer|Long, ...> keys
unquoted (``{0:"addr"}``); ``loads`` must read that as well as standard JSON, and ``dumps`` must
write standard JSON with sorted keys.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledgermq.errors import RemoteProtocolError
from ledgermq.protocol import fastjson

PROPS = settings(max_examples=150, derandomize=True, deadline=None)


# -- loads: standard JSON --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        '{"a":1,"b":[1,2,{"c":null}],"d":true,"e":"x"}',
        "[]",
        "{}",
        '"just a string"',
        "12",
        '{"0":"quoted int key"}',
        '{"nested":{"deeper":{"x":-1.5e3}}}',
        '{"unicode":"héllo 世界 🚀","esc":"a\\"b\\\\c\\n\\u0001"}',
    ],
)
def test_loads_standard_json(text: str) -> None:
    assert fastjson.loads(text) == json.loads(text)
    assert fastjson.loads(text.encode()) == json.loads(text)


def test_loads_accepts_bytes_bytearray_and_str() -> None:
    raw = b'{"a":{1:2}}'
    expected = {"a": {"1": 2}}
    assert fastjson.loads(raw) == expected
    assert fastjson.loads(bytearray(raw)) == expected
    assert fastjson.loads(raw.decode()) == expected


# -- loads: unquoted integer keys ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{0:"a"}', {"0": "a"}),
        ('{0:"10.0.0.1:10911",1:"10.0.0.2:10911"}', {"0": "10.0.0.1:10911", "1": "10.0.0.2:10911"}),
        ('{"T@g":{0:12,1:7}}', {"T@g": {"0": 12, "1": 7}}),
        # consumerOffset.json shape (docs/formats.md §3.6)
        (
            '{"offsetTable":{"T@cg":{0:12,1:7},"%RETRY%cg@cg":{0:0}}}',
            {"offsetTable": {"T@cg": {"0": 12, "1": 7}, "%RETRY%cg@cg": {"0": 0}}},
        ),
        # delayOffset.json shape
        ('{"offsetTable":{1:0,2:5,18:99}}', {"offsetTable": {"1": 0, "2": 5, "18": 99}}),
        ('{-1:"neg",2:"pos"}', {"-1": "neg", "2": "pos"}),
        ('{9223372036854775807:"max long"}', {"9223372036854775807": "max long"}),
        ('{ 0 : "a" , 1 :\t"b" }', {"0": "a", "1": "b"}),
        ("{\n\t0:12,\n\t1:7\n}", {"0": 12, "1": 7}),
        ('[{0:1},{"x":[{2:{3:4}}]}]', [{"0": 1}, {"x": [{"2": {"3": 4}}]}]),
        ('{"a":1,0:2,"b":3}', {"a": 1, "0": 2, "b": 3}),  # mixed quoted and bare keys
        ('{0:{1:{2:{3:{4:"deep"}}}}}', {"0": {"1": {"2": {"3": {"4": "deep"}}}}}),
    ],
)
def test_loads_unquoted_integer_keys(text: str, expected: Any) -> None:
    assert fastjson.loads(text) == expected


def test_java_pretty_printed_offsets_file() -> None:
    # how Java's JSON.toJSONString(obj, true) lays out consumerOffset.json
    text = '{\n\t"offsetTable":{\n\t\t"TopicTest@cg":{0:5,1:0,2:17,3:3\n\t\t}\n\t}\n}'
    assert fastjson.loads(text) == {"offsetTable": {"TopicTest@cg": {"0": 5, "1": 0, "2": 17, "3": 3}}}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"s":"{1:2}"}', {"s": "{1:2}"}),
        ('{"s":"{1:2}",3:4}', {"s": "{1:2}", "3": 4}),  # the fallback path must still skip strings
        ('{"s":"a,1:b",0:"c"}', {"s": "a,1:b", "0": "c"}),
        ('{"s":"q\\"{5:6}\\"",0:1}', {"s": 'q"{5:6}"', "0": 1}),  # escaped quotes inside the string
        ('{"s":"back\\\\",7:"{8:9}"}', {"s": "back\\", "7": "{8:9}"}),  # string ending in a backslash
        ('{"{1:2}":0,3:"x"}', {"{1:2}": 0, "3": "x"}),  # string key that looks like a map
    ],
)
def test_strings_containing_map_like_text_are_left_alone(text: str, expected: Any) -> None:
    assert fastjson.loads(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{",
        '{"a":}',
        "{0:}",
        "{a:1}",  # bare non-numeric keys are not something fastjson writes; not accepted
        '{0:"a"',
        "[1,2",
        "{'a':1}",
        "nul",
        "{1.5:2}",
        '{"a":1}}',
        '"unterminated',
    ],
)
def test_invalid_json_raises_remote_protocol_error(text: str) -> None:
    with pytest.raises(RemoteProtocolError):
        fastjson.loads(text)


def test_invalid_utf8_raises_remote_protocol_error() -> None:
    with pytest.raises(RemoteProtocolError):
        fastjson.loads(b'{"a":"\xff\xfe"}')
    with pytest.raises(RemoteProtocolError):
        fastjson.loads(b'{0:"\xc3"}')


@pytest.mark.timeout(120)  # a hang guard only
def test_malformed_input_is_rejected_in_linear_time() -> None:
    """64 KiB of '"\\' pairs: not JSON, so the key-quoting fallback runs over it. A scanner that
    retries an unterminated string literal at every quote is quadratic here (about 20 s for this
    size on the development machine; a 16 MiB frame body would take days); a linear one takes
    milliseconds. Bodies reach this code from the network (REGISTER_BROKER, heartbeats).
    Measured in this thread's CPU time, which a loaded machine does not stretch."""
    started = time.thread_time()
    with pytest.raises(RemoteProtocolError):
        fastjson.loads(b'"\\' * 32768)
    assert time.thread_time() - started < 2.0


# -- loads: property against a fastjson-style writer -----------------------------------------------


def fastjson_style(value: Any) -> str:
    """Render like fastjson: int keys bare, everything else standard JSON."""
    if isinstance(value, dict):
        parts = []
        for k, v in value.items():
            key = str(k) if isinstance(k, int) else json.dumps(k, ensure_ascii=False)
            parts.append(f"{key}:{fastjson_style(v)}")
        return "{" + ",".join(parts) + "}"
    if isinstance(value, list):
        return "[" + ",".join(fastjson_style(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def with_str_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): with_str_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [with_str_keys(v) for v in value]
    return value


# Text that often looks like map syntax, to tempt a naive key quoter.
_TRICKY_TEXT = st.text(alphabet=st.sampled_from('{}[],:"\\0123-ab \n\t\u00e9\u4e16'), max_size=12)
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _TRICKY_TEXT
    | st.text(max_size=8)
)
_INT_KEYS = st.integers(-(2**63), 2**63 - 1)


def _dicts(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[Any, Any]]:
    int_keyed = st.dictionaries(_INT_KEYS, inner, max_size=4)
    str_keyed = st.dictionaries(_TRICKY_TEXT, inner, max_size=4)
    return int_keyed | str_keyed


_VALUES = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=4) | _dicts(inner), max_leaves=20)


@PROPS
@given(value=_VALUES)
def test_loads_reads_fastjson_style_output(value: Any) -> None:
    assert fastjson.loads(fastjson_style(value)) == with_str_keys(value)


@PROPS
@given(value=_VALUES)
def test_loads_then_dumps_is_standard_json(value: Any) -> None:
    parsed = fastjson.loads(fastjson_style(value))
    assert json.loads(fastjson.dumps(parsed)) == parsed


# -- dumps -----------------------------------------------------------------------------------------


def test_dumps_sorts_keys_and_quotes_int_keys() -> None:
    out = fastjson.dumps({"b": 1, "a": {1: "x", 0: "y"}, "c": [{"z": 0, "y": 1}]})
    assert out == b'{"a":{"0":"y","1":"x"},"b":1,"c":[{"y":1,"z":0}]}'
    assert isinstance(out, bytes)


def test_dumps_int_keyed_broker_addrs_is_standard_json() -> None:
    out = fastjson.dumps({0: "10.0.0.1:10911", 1: "10.0.0.2:10911"})
    assert out == b'{"0":"10.0.0.1:10911","1":"10.0.0.2:10911"}'
    assert json.loads(out) == {"0": "10.0.0.1:10911", "1": "10.0.0.2:10911"}


def test_dumps_is_compact_utf8() -> None:
    out = fastjson.dumps({"k": "世界", "n": None, "t": True, "l": [1, 2]})
    assert out == '{"k":"世界","l":[1,2],"n":null,"t":true}'.encode()


def test_dumps_pretty_is_loadable_and_sorted() -> None:
    doc = {"offsetTable": {"T@cg": {1: 7, 0: 12}}}
    out = fastjson.dumps_pretty(doc)
    assert b"\n" in out
    assert json.loads(out) == {"offsetTable": {"T@cg": {"0": 12, "1": 7}}}
    assert out.index(b'"0"') < out.index(b'"1"')


def test_round_trip_of_unquoted_file() -> None:
    text = b'{"offsetTable":{"T@cg":{0:12,1:7},"%RETRY%cg@cg":{0:0}}}'
    expected = b'{"offsetTable":{"%RETRY%cg@cg":{"0":0},"T@cg":{"0":12,"1":7}}}'
    assert fastjson.dumps(fastjson.loads(text)) == expected
