"""Hostile input against a live in-process broker and a live NamesrvApp (the broker registers with it).

Hypothesis (derandomized, bounded) throws batches of:

* raw bytes: random streams, truncated well-formed frames, well-framed garbage headers (JSON and
  binary) at both servers;
* well-framed requests with random codes and random extFields/bodies;
* well-formed requests of the broker's client-facing codes with one header field made malformed
  (not a number, fractional, "nan"/"inf", an illegal topic) or absurd but typed (negative queue ids,
  huge offsets, absurd maxMsgNums);
* hostile bodies for HEART_BEAT, LOCK_BATCH_MQ / UNLOCK_BATCH_MQ and REGISTER_BROKER.

After every batch a well-formed client still gets correct answers (send + pull round trip, the
name server's route for the broker's topic), the servers and their background tasks are alive, the
store has not failed, and the commit log grew only by the well-formed sends.

Answers to malformed requests must be errors with a remark. Where RocketMQ 4.9.7 refuses a request
that ledgermq accepts (missing, empty, "null" or out-of-range numbers, and fields ledgermq does not
parse at all), the deterministic tests at the end pin each case; those that fail are reported bugs.
Java references: J remoting/.../protocol/RemotingCommand.decodeCommandCustomHeader (parse failures of
reflection-decoded headers leave the field null, then the processor's unboxing throws: SYSTEM_ERROR),
J common/.../header/SendMessageRequestHeaderV2.decode and PullMessageRequestHeader.decode
(FastCodesHeader: Integer.parseInt / Long.parseLong throw on malformed or out-of-range text:
SYSTEM_ERROR).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledgermq.namesrv.app import NamesrvApp, NamesrvConfig
from ledgermq.net.client import RemotingClient
from ledgermq.protocol import fastjson
from ledgermq.protocol import properties as P
from ledgermq.protocol.batch import BatchEntry, encode_batch
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand, decode_command
from ledgermq.protocol.frame import FrameDecoder
from ledgermq.protocol.message import MessageRecord, decode_record
from ledgermq.protocol.msgid import decode_offset_msg_id
from ledgermq.protocol.route import DataVersion, RegisterBrokerBody, TopicConfig
from tests.broker.harness import Harness, running_broker
from tests.broker.test_pull import COMMIT_OFFSET, SUBSCRIPTION, pull_header
from tests.broker.test_send import v1, v2

HOST = "127.0.0.1"
CALL = 3.0
FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)

# Codes left out of random-code fuzzing: admin writes that legitimately change or delete state (RocketMQ
# serves them to anyone without ACL), sends and send-back (fuzzed field by field instead, where what is
# stored can be accounted for), and PULL_MESSAGE (a valid-looking SUSPEND pull may rightly be held for
# its suspendTimeoutMillis; fuzzed with bounded timeouts instead).
EXCLUDED_BROKER_CODES = {
    RequestCode.UPDATE_AND_CREATE_TOPIC,
    RequestCode.DELETE_TOPIC_IN_BROKER,
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
    RequestCode.DELETE_SUBSCRIPTIONGROUP,
    RequestCode.TRIGGER_DELETE_FILES,
    RequestCode.DELETE_EXPIRED_COMMITLOG,
    RequestCode.SEND_MESSAGE,
    RequestCode.SEND_MESSAGE_V2,
    RequestCode.SEND_BATCH_MESSAGE,
    RequestCode.CONSUMER_SEND_MSG_BACK,
    RequestCode.PULL_MESSAGE,
}
EXCLUDED_NAMESRV_CODES = {
    RequestCode.DELETE_TOPIC_IN_NAMESRV,
    RequestCode.WIPE_WRITE_PERM_OF_BROKER,
    RequestCode.UNREGISTER_BROKER,
}


def words(text: str) -> list[str]:
    return text.split()


FIELD_NAMES = sorted(
    {
        *"abcdefghijklmn",
        *words(
            """
        producerGroup topic defaultTopic defaultTopicQueueNums queueId sysFlag bornTimestamp flag properties
        reconsumeTimes unitMode maxReconsumeTimes batch consumerGroup queueOffset maxMsgNums commitOffset
        suspendTimeoutMillis subscription subVersion expressionType offset timestamp key maxNum
        beginTimestamp endTimestamp _UNIQUE_KEY_QUERY clientID group delayLevel originMsgId originTopic
        brokerName brokerAddr clusterName haServerAddr brokerId bodyCrc32 compressed namespace value readQueueNums
        writeQueueNums perm topicFilterType order
        """
        ),
    }
)
WEIRD_VALUES = [
    *words("null nan NaN inf -inf Infinity 1e400 -1e400 1.5 -0 0x10 -1 true false TBW102 %RETRY% %DLQ%x * 💥"),
    *(str(n) for n in (-(2**31) - 1, 2**31, 2**63, -(2**63) - 1, 10**40)),
    *("", " ", "TagA || TagB", "\x00", "\x01\x02", "a" * 300),
]


# -- strategies ----------------------------------------------------------------------------
INT64 = st.integers(-(2**63), 2**63 - 1)
values = st.one_of(
    st.sampled_from(WEIRD_VALUES),
    st.integers(-(2**70), 2**70).map(str),
    st.text(max_size=24),
)
ext_fields = st.one_of(
    st.dictionaries(st.one_of(st.sampled_from(FIELD_NAMES), st.text(max_size=8)), values, max_size=8),
    st.tuples(
        st.fixed_dictionaries({name: values for name in FIELD_NAMES}), st.sets(st.sampled_from(FIELD_NAMES), max_size=6)
    ).map(
        lambda full_dropped: {k: v for k, v in full_dropped[0].items() if k not in full_dropped[1]}
    ),  # every field there but a few, each with a hostile value
)
json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**63), 2**64 - 1),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=16),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(FIELD_NAMES), st.text(max_size=6)), inner, max_size=4),
    ),
    max_leaves=12,
)
bodies = st.one_of(
    st.just(b""),
    st.binary(max_size=120),
    json_values.map(lambda v: orjson.dumps(v, option=orjson.OPT_NON_STR_KEYS) if _jsonable(v) else b"{"),
)
NOT_A_NUMBER = st.one_of(
    st.sampled_from(["abc", "1.5", "-0.25", "12abc", "0x10", "--1", "1-", "nan", "inf", "-inf", "1e400", "💥", "true"]),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz!?#@%,;", min_size=1, max_size=10),
)
ILLEGAL_TOPICS = st.one_of(
    st.sampled_from(
        ["", " ", "a b", "a/b", "../../etc", "T" * 128, "Topic\t", "x.y", "SCHEDULE_TOPIC_XXXX", "OFFSET_MOVED_EVENT"]
    ),
    # (A topic ending in one "\n" passes ledgermq's check: test_send.test_topic_with_trailing_newline_is_refused.)
    st.text(min_size=1, max_size=20).filter(
        lambda t: any(not (c.isascii() and (c.isalnum() or c in "%|_-")) for c in t) and not t.endswith("\n")
    ),
)


def _jsonable(value: Any) -> bool:
    try:
        orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return False
    return True


@st.composite
def broken_binary_header(draw: st.DrawFn) -> bytes:
    """A ROCKETMQ (type 1) header whose structure cannot decode."""
    fixed = struct.pack(
        ">hbhii",
        draw(st.integers(-(2**15), 2**15 - 1)),
        draw(st.integers(-128, 127)),
        draw(st.integers(-(2**15), 2**15 - 1)),
        draw(st.integers(-(2**31), 2**31 - 1)),
        draw(st.integers(0, 1)),  # never the response / oneway bits: a request that must be answered
    )
    kind = draw(st.sampled_from(["short", "remark", "ext", "entry", "utf8"]))
    if kind == "short":
        return fixed[: draw(st.integers(0, len(fixed) - 1))]
    if kind == "remark":
        return fixed + struct.pack(">i", draw(st.sampled_from([-1, 10**6, 2**31 - 1]))) + b"r"
    if kind == "ext":
        return fixed + struct.pack(">ii", 0, draw(st.sampled_from([-5, 999, 2**31 - 1])))
    if kind == "entry":
        entry = struct.pack(">h", 3) + b"key" + struct.pack(">i", 1000) + b"v"
        return fixed + struct.pack(">ii", 0, len(entry)) + entry
    entry = struct.pack(">h", 2) + b"\xff\xfe" + struct.pack(">i", 1) + b"v"
    return fixed + struct.pack(">ii", 0, len(entry)) + entry


@st.composite
def broken_json_header(draw: st.DrawFn) -> bytes:
    """A JSON header the server cannot turn into a command (the opaque may still be readable)."""
    opaque = draw(st.integers(1, 2**31 - 1))
    kind = draw(st.sampled_from(["code", "ext", "not-object", "not-json", "opaque"]))
    base: dict[str, Any] = {"code": RequestCode.GET_MAX_OFFSET, "extFields": {}, "flag": 0, "opaque": opaque}
    if kind == "code":
        base["code"] = draw(
            st.one_of(
                st.sampled_from(["abc", "1.5", "", "x1"]),
                st.floats(0.5, 1e9),
                st.lists(INT64, max_size=2),
                st.booleans(),
            )
        )
    elif kind == "ext":
        base["extFields"] = draw(st.one_of(st.lists(INT64, max_size=3), INT64, st.text(min_size=1, max_size=5)))
    elif kind == "opaque":
        base["opaque"] = draw(st.sampled_from(["x", 1.25, [1], {"a": 1}]))
    elif kind == "not-object":
        return orjson.dumps(draw(st.one_of(st.lists(INT64, max_size=3), INT64, st.text(max_size=5))))
    else:
        raw = orjson.dumps(base)
        return raw[: draw(st.integers(1, len(raw) - 1))]
    return orjson.dumps(base)


def raw_frame(header: bytes, body: bytes = b"", serialize_type: int = 0) -> bytes:
    return struct.pack(">iI", 4 + len(header) + len(body), (serialize_type << 24) | len(header)) + header + body


@st.composite
def hostile_stream(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["random", "truncated", "json", "binary", "type", "mixed"]))
    if kind == "random":
        return draw(st.binary(min_size=1, max_size=200))
    valid = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, v2("Healthy", 0), b"never stored").encode()
    if kind == "truncated":
        return valid[: draw(st.integers(1, len(valid) - 1))]
    if kind == "json":
        return raw_frame(draw(broken_json_header()), draw(st.binary(max_size=16)))
    if kind == "binary":
        return raw_frame(draw(broken_binary_header()), draw(st.binary(max_size=16)), 1)
    if kind == "type":
        header = orjson.dumps({"code": 30, "extFields": {}, "flag": 0, "opaque": 5})
        return raw_frame(header, b"", draw(st.integers(2, 255)))
    # mixed: broken frames back to back, then a truncated send
    parts = draw(st.lists(st.one_of(broken_json_header(), broken_binary_header()), min_size=1, max_size=3))
    out = b"".join(raw_frame(p, b"", 1 if p[:1] != b"{" else 0) for p in parts)
    return out + valid[: draw(st.integers(1, len(valid) - 1))]


# -- environment ---------------------------------------------------------------------------------
class ProcessorErrors(logging.Handler):
    """Exceptions the servers caught from processors (logged with a traceback)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info:
            exc = record.exc_info[1]
            self.records.append(f"{record.getMessage()}: {type(exc).__name__}: {exc}")


@contextmanager
def processor_errors() -> Iterator[ProcessorErrors]:
    handler = ProcessorErrors()
    logger = logging.getLogger("ledgermq")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


class Env:
    """A name server, a broker registered with it, a well-formed client and a hostile one."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ns: NamesrvApp | None = None
        self.h: Harness | None = None
        self._broker_cm: Any = None
        self.hostile = RemotingClient()
        self.expected_phy = 0
        self.rounds = 0
        self.fuzz_phy = 0  # commit-log offset of a message in topic Fuzz (for VIEW / send-back)

    @property
    def ns_addr(self) -> str:
        assert self.ns is not None
        return f"{HOST}:{self.ns.port}"

    @property
    def broker(self) -> Harness:
        assert self.h is not None
        return self.h

    async def start(self) -> None:
        cfg = NamesrvConfig(listen_host=HOST, listen_port=0, kv_config_path=str(self.root / "ns" / "kvConfig.json"))
        self.ns = NamesrvApp(cfg)
        await self.ns.start()
        self._broker_cm = running_broker(self.root / "broker", namesrv_addr=self.ns_addr)
        self.h = await self._broker_cm.__aenter__()
        h = self.broker
        await h.send("Healthy", b"prime")
        resp = await h.send("Fuzz", b"fuzz", queue_id=1, props={"KEYS": "fk"})
        self.fuzz_phy = decode_offset_msg_id(resp.ext_fields["msgId"])[1]
        assert (await h.heartbeat("10.0.0.1@healthy", "healthy_cg", ["Healthy"])).code == ResponseCode.SUCCESS
        await h.dispatched()
        self.expected_phy = h.app.broker.store.max_phy_offset
        deadline = asyncio.get_running_loop().time() + 10
        while not await self.route_ok():
            assert asyncio.get_running_loop().time() < deadline, "the broker never registered topic Healthy"
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        try:
            await asyncio.wait_for(self.hostile.close(), 5)
        finally:
            try:
                if self._broker_cm is not None:
                    await self._broker_cm.__aexit__(None, None, None)
            finally:
                if self.ns is not None:
                    await asyncio.wait_for(self.ns.stop(), 5)

    async def route_ok(self) -> bool:
        resp = await self.broker.client.invoke(
            self.ns_addr, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Healthy"}), CALL
        )
        if resp.code != ResponseCode.SUCCESS:
            return False
        doc = fastjson.loads(resp.body)
        addrs = [a for b in doc["brokerDatas"] for a in b["brokerAddrs"].values()]
        queues = [q for q in doc["queueDatas"] if q["brokerName"] == "broker-a"]
        return self.broker.addr in addrs and bool(queues) and queues[0]["perm"] == 6

    def stored_nothing(self, why: object) -> None:
        store = self.broker.app.broker.store
        assert store.max_phy_offset == self.expected_phy, f"stored by a malformed request: {why!r}"

    def accept_growth(self) -> None:
        """Account for a message a (lenient but answered SUCCESS) request stored."""
        self.expected_phy = self.broker.app.broker.store.max_phy_offset

    async def check_healthy(self) -> None:
        h, ns = self.broker, self.ns
        assert ns is not None
        app = h.app
        store = app.broker.store
        assert app.server._server is not None and app.server._server.is_serving()
        assert all(p.running for p in app._periodic), [p.name for p in app._periodic if not p.running]
        assert app.registrar.running
        schedule = app.broker.schedule
        assert schedule is not None and schedule.running
        assert ns.server._server is not None and ns.server._server.is_serving()
        assert ns._scan.running
        assert store.running and store.failed_reason is None, store.failed_reason
        self.stored_nothing("(checked before the health round trip)")

        self.rounds += 1
        body = b"healthy-%d" % self.rounds
        resp = await h.send("Healthy", body, queue_id=0)
        _, offset = decode_offset_msg_id(resp.ext_fields["msgId"])
        record = decode_record(store.look_message_by_offset(offset) or b"")
        assert record.body == body
        assert store.max_phy_offset == self.expected_phy + record.store_size
        self.expected_phy = store.max_phy_offset
        await h.dispatched()
        pulled = await h.pull("healthy_cg", "Healthy", 0, int(resp.ext_fields["queueOffset"]))
        assert [m.body for m in pulled] == [body]
        ids = await h.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "healthy_cg"})
        assert ids.code == ResponseCode.SUCCESS and b"10.0.0.1@healthy" in ids.body
        assert await self.route_ok()

    async def throw_raw(self, port: int, data: bytes) -> list[RemotingCommand]:
        """Write ``data`` on a fresh connection, half-close, read the answers until the server closes."""
        reader, writer = await asyncio.wait_for(asyncio.open_connection(HOST, port), CALL)
        received = b""
        try:
            writer.write(data)
            await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
            received = await asyncio.wait_for(reader.read(), 5)
        except (ConnectionError, BrokenPipeError):
            pass
        finally:
            writer.close()
            try:
                await asyncio.wait_for(writer.wait_closed(), 2)
            except (OSError, TimeoutError):
                pass
        answers = []
        pos = 0
        while pos + 4 <= len(received):
            (length,) = struct.unpack_from(">i", received, pos)
            assert 4 <= length <= len(received) - pos - 4, "the server wrote a torn or bogus frame"
            answers.append(decode_command(received[pos + 4 : pos + 4 + length]))
            pos += 4 + length
        assert pos == len(received)
        return answers

    async def hostile_call(self, addr: str, cmd: RemotingCommand) -> RemotingCommand:
        resp = await self.hostile.invoke(addr, cmd, CALL)
        assert resp.is_response and resp.opaque == cmd.opaque
        if resp.code != ResponseCode.SUCCESS:
            assert resp.remark, f"error {resp.code} without a remark for {cmd!r}"
        return resp


def run_fuzz(tmp_path: Path, body: Any) -> None:
    """Start the environment, run the hypothesis-driven ``body(runner, env)``, always stop. Afterwards,
    no processor may have failed with an unexpected exception: malformed input is to be refused as such
    (the server's catch-all still answers SYSTEM_ERROR with the exception text, but that is a processor
    bug, not a refusal)."""
    with processor_errors() as errors, asyncio.Runner() as runner:
        env = Env(tmp_path)
        try:
            runner.run(env.start())
            body(runner, env)
        finally:
            runner.run(env.stop())
    assert not errors.records, "processors failed with unexpected exceptions:\n" + "\n".join(
        sorted(set(errors.records))
    )


def assert_error(resp: RemotingCommand, what: object) -> None:
    assert resp.code != ResponseCode.SUCCESS, f"a malformed request was answered SUCCESS: {what!r} -> {resp!r}"
    assert resp.remark, f"error without a remark: {what!r} -> {resp!r}"


# -- fuzzing ------------------------------------------------------------------------------------------
def test_random_and_truncated_frames(tmp_path: Path) -> None:
    def body(runner: asyncio.Runner, env: Env) -> None:
        assert env.ns is not None

        @FUZZ
        @given(
            batch=st.lists(st.tuples(st.sampled_from(["broker", "namesrv"]), hostile_stream()), min_size=1, max_size=4)
        )
        def fuzz(batch: list[tuple[str, bytes]]) -> None:
            async def go() -> None:
                for target, data in batch:
                    port = env.broker.app.port if target == "broker" else env.ns.port  # type: ignore[union-attr]
                    sent = FrameDecoder()
                    try:
                        decodable = {c.opaque for c in sent.feed(data) if isinstance(c, RemotingCommand)}
                    except Exception:
                        decodable = set()
                    for answer in await env.throw_raw(port, data):
                        assert answer.is_response, answer
                        if answer.opaque not in decodable:
                            assert_error(answer, data)
                    env.stored_nothing(data)
                await env.check_healthy()

            runner.run(go())

        fuzz()

    run_fuzz(tmp_path, body)


def test_random_codes_and_fields(tmp_path: Path) -> None:
    def body(runner: asyncio.Runner, env: Env) -> None:
        assert env.ns is not None
        served = {
            "broker": sorted(set(env.broker.app.server.processors) - {int(c) for c in EXCLUDED_BROKER_CODES}),
            "namesrv": sorted(set(env.ns.server.processors) - {int(c) for c in EXCLUDED_NAMESRV_CODES}),
        }
        unserved = st.integers(-(2**15), 2**15 - 1).filter(
            lambda c: c not in env.broker.app.server.processors and c not in env.ns.server.processors  # type: ignore[union-attr]
        )
        request = st.sampled_from(["broker", "namesrv"]).flatmap(
            lambda target: st.tuples(
                st.just(target),
                st.one_of(st.sampled_from(served[target]), st.sampled_from(served[target]), unserved),
                ext_fields,
                bodies,
            )
        )

        @FUZZ
        @given(batch=st.lists(request, min_size=1, max_size=6))
        def fuzz(batch: list[tuple[str, int, dict[str, str], bytes]]) -> None:
            async def go() -> None:
                for target, code, ext, payload in batch:
                    addr = env.broker.addr if target == "broker" else env.ns_addr
                    resp = await env.hostile_call(addr, RemotingCommand.request(code, ext, payload))
                    if code not in served[target]:
                        assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED, resp
                        assert resp.remark == f" request type {code} not supported"
                    env.stored_nothing((code, ext, payload))
                await env.check_healthy()

            runner.run(go())

        fuzz()

    run_fuzz(tmp_path, body)


# Base requests of the client-facing codes, each valid as it stands, and the header fields whose value the
# processor always parses as a number (so any non-number there must be refused).
def base_requests(env: Env) -> dict[str, tuple[int, dict[str, Any], bytes, tuple[str, ...]]]:
    batch = encode_batch([BatchEntry(0, b"fb", P.encode_properties({"UNIQ_KEY": "E" * 32}))])
    pull = pull_header("Fuzz", 1, 0, consumerGroup="fuzz_cg", sysFlag=SUBSCRIPTION | COMMIT_OFFSET, commitOffset=0)
    offsets = {"consumerGroup": "fuzz_cg", "topic": "Fuzz", "queueId": 1}
    queue = {"topic": "Fuzz", "queueId": 1}
    query = {"topic": "Fuzz", "key": "fk", "maxNum": 4, "beginTimestamp": 0, "endTimestamp": 2**62}
    back = {"offset": env.fuzz_phy, "group": "fuzz_cg", "delayLevel": -1, "maxReconsumeTimes": 16}
    return {
        "v2": (RequestCode.SEND_MESSAGE_V2, v2("Fuzz", 1), b"fz", ("e", "f", "g", "h", "j")),
        "v1": (
            RequestCode.SEND_MESSAGE,
            v1("Fuzz", 1),
            b"fz",
            ("queueId", "sysFlag", "bornTimestamp", "flag", "reconsumeTimes"),
        ),
        "batch": (RequestCode.SEND_BATCH_MESSAGE, v2("Fuzz", 1, m="true"), batch, ("e", "f", "g")),
        "pull": (
            RequestCode.PULL_MESSAGE,
            pull,
            b"",
            ("queueId", "queueOffset", "maxMsgNums", "sysFlag", "commitOffset", "subVersion"),
        ),
        "query_offset": (RequestCode.QUERY_CONSUMER_OFFSET, offsets, b"", ("queueId",)),
        "update_offset": (
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {**offsets, "commitOffset": 1},
            b"",
            ("queueId", "commitOffset"),
        ),
        "max": (RequestCode.GET_MAX_OFFSET, queue, b"", ("queueId",)),
        "min": (RequestCode.GET_MIN_OFFSET, queue, b"", ("queueId",)),
        "earliest": (RequestCode.GET_EARLIEST_MSG_STORETIME, queue, b"", ("queueId",)),
        "search": (RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {**queue, "timestamp": 1}, b"", ("queueId", "timestamp")),
        "view": (RequestCode.VIEW_MESSAGE_BY_ID, {"offset": env.fuzz_phy}, b"", ("offset",)),
        "query": (RequestCode.QUERY_MESSAGE, query, b"", ("maxNum", "beginTimestamp", "endTimestamp")),
        "send_back": (RequestCode.CONSUMER_SEND_MSG_BACK, back, b"", ("offset", "delayLevel")),
    }


STATEFUL = {"v2", "v1", "batch", "pull", "update_offset", "send_back"}


def state_of(h: Harness) -> tuple[int, dict[str, dict[int, int]], list[str]]:
    broker = h.app.broker
    return broker.store.max_phy_offset, copy.deepcopy(broker.offsets.table), sorted(broker.topics.table)


def test_malformed_header_fields_are_refused(tmp_path: Path) -> None:
    def body(runner: asyncio.Runner, env: Env) -> None:
        bases = base_requests(env)

        async def sanity() -> None:
            for name, (code, ext, payload, _) in bases.items():
                resp = await env.hostile_call(env.broker.addr, RemotingCommand.request(code, ext, payload))
                assert resp.code == ResponseCode.SUCCESS, (name, resp)
            await env.broker.dispatched()
            env.accept_growth()

        runner.run(sanity())
        mutation = st.sampled_from(sorted(bases)).flatmap(
            lambda name: st.tuples(
                st.just(name),
                st.sampled_from(
                    bases[name][3] + (("topic",) if name == "v1" else ("b",) if name in ("v2", "batch") else ())
                ),
                NOT_A_NUMBER,
                ILLEGAL_TOPICS,
            )
        )

        @FUZZ
        @given(batch=st.lists(mutation, min_size=1, max_size=6))
        def fuzz(batch: list[tuple[str, str, str, str]]) -> None:
            async def go() -> None:
                for name, key, bad_number, bad_topic in batch:
                    code, ext, payload, _ = bases[name]
                    bad = bad_topic if key in ("b", "topic") else bad_number
                    before = state_of(env.broker)
                    cmd = RemotingCommand.request(code, {**ext, key: bad}, payload)
                    resp = await env.hostile_call(env.broker.addr, cmd)
                    assert_error(resp, (name, key, bad))
                    assert state_of(env.broker) == before, (name, key, bad)
                await env.check_healthy()

            runner.run(go())

        fuzz()

    run_fuzz(tmp_path, body)


def test_absurd_but_typed_values_are_answered_consistently(tmp_path: Path) -> None:
    """Negative queue ids, huge offsets and timestamps, absurd maxMsgNums (all within Java's int/long):
    any answer is fine, but it comes, errors carry a remark, and a SUCCESS send stored exactly the
    message its msgId names (an error stored nothing)."""

    def body(runner: asyncio.Runner, env: Env) -> None:
        bases = {k: v for k, v in base_requests(env).items() if k != "send_back"}  # send-back schedules re-deliveries
        int32 = st.one_of(
            st.sampled_from([0, -1, -2, 1, 3, 4, 2**31 - 1, -(2**31), 1000]), st.integers(-(2**31), 2**31 - 1)
        )
        int64 = st.one_of(st.sampled_from([0, -1, 2**62, 2**63 - 1, -(2**63)]), st.integers(-(2**63), 2**63 - 1))
        longs = {
            "g",
            "bornTimestamp",
            "queueOffset",
            "commitOffset",
            "subVersion",
            "offset",
            "timestamp",
            "beginTimestamp",
            "endTimestamp",
            "suspendTimeoutMillis",
        }
        mutation = st.sampled_from(sorted(bases)).flatmap(
            lambda name: st.tuples(
                st.just(name),
                st.sampled_from(bases[name][3]),
                int32,
                int64,
            )
        )

        @FUZZ
        @given(batch=st.lists(mutation, min_size=1, max_size=6))
        def fuzz(batch: list[tuple[str, str, int, int]]) -> None:
            async def go() -> None:
                for name, key, small, big in batch:
                    code, ext, payload, _ = bases[name]
                    value = big if key in longs else small
                    if name == "pull" and key == "sysFlag":
                        value &= ~2  # no SUSPEND: a held pull would rightly wait for its timeout
                    cmd = RemotingCommand.request(code, {**ext, key: value}, payload)
                    resp = await env.hostile_call(env.broker.addr, cmd)
                    store = env.broker.app.broker.store
                    if name in ("v2", "v1", "batch") and resp.code == ResponseCode.SUCCESS:
                        ids = resp.ext_fields["msgId"].split(",")
                        last: MessageRecord | None = None
                        for msg_id in ids:
                            _, offset = decode_offset_msg_id(msg_id)
                            last = decode_record(store.look_message_by_offset(offset) or b"")
                            assert last.topic == "Fuzz" and last.queue_id == int(resp.ext_fields["queueId"])
                        assert last is not None
                        assert store.max_phy_offset == last.physical_offset + last.store_size
                        env.accept_growth()
                    else:
                        env.stored_nothing((name, key, value, resp))
                await env.broker.dispatched()
                await env.check_healthy()

            runner.run(go())

        fuzz()

    run_fuzz(tmp_path, body)


def test_hostile_bodies(tmp_path: Path) -> None:
    """HEART_BEAT, LOCK_BATCH_MQ / UNLOCK_BATCH_MQ at the broker and REGISTER_BROKER at the name server."""

    def heartbeat_like(doc: Any) -> bytes:
        return orjson.dumps(doc, option=orjson.OPT_NON_STR_KEYS) if _jsonable(doc) else b"{"

    name = st.one_of(st.text(alphabet="abcXYZ09_-%|", min_size=1, max_size=8), st.text(max_size=6), json_values)
    subscription = st.fixed_dictionaries(
        {"topic": name},
        optional={
            k: json_values
            for k in ("subString", "tagsSet", "codeSet", "subVersion", "expressionType", "classFilterMode")
        },
    )
    consumer = st.fixed_dictionaries(
        {"groupName": name},
        optional={
            "consumeType": json_values,
            "messageModel": json_values,
            "consumeFromWhere": json_values,
            "unitMode": json_values,
            "subscriptionDataSet": st.one_of(json_values, st.lists(subscription, max_size=3)),
        },
    )
    heartbeat = st.fixed_dictionaries(
        {"clientID": name},
        optional={
            "consumerDataSet": st.one_of(json_values, st.lists(consumer, max_size=3)),
            "producerDataSet": st.one_of(json_values, st.lists(st.fixed_dictionaries({"groupName": name}), max_size=3)),
        },
    ).map(heartbeat_like)
    queue = st.fixed_dictionaries({"topic": name, "queueId": json_values}, optional={"brokerName": json_values})
    lock = st.fixed_dictionaries(
        {"clientId": name, "consumerGroup": name},
        optional={"mqSet": st.one_of(json_values, st.lists(queue, max_size=3))},
    ).map(heartbeat_like)
    register_body = st.one_of(
        st.fixed_dictionaries(
            {},
            optional={
                "filterServerList": json_values,
                "topicConfigSerializeWrapper": st.one_of(
                    json_values,
                    st.fixed_dictionaries(
                        {},
                        optional={
                            "dataVersion": json_values,
                            "topicConfigTable": st.one_of(
                                json_values, st.dictionaries(st.text(max_size=8), json_values, max_size=3)
                            ),
                        },
                    ),
                ),
            },
        ).map(heartbeat_like),
        bodies,
    )
    register_header = st.fixed_dictionaries(
        {"brokerName": st.just("hostile-b"), "clusterName": st.just("HostileCluster")},
        optional={
            "brokerAddr": st.one_of(st.just("10.9.9.9:10911"), values),
            "brokerId": values,
            "haServerAddr": values,
            "bodyCrc32": values,
            "compressed": values,
        },
    )
    item = st.one_of(
        st.tuples(st.just(RequestCode.HEART_BEAT), st.just({}), st.one_of(heartbeat, bodies)),
        st.tuples(
            st.sampled_from([RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ]),
            st.just({}),
            st.one_of(lock, bodies),
        ),
        st.tuples(st.just(RequestCode.REGISTER_BROKER), register_header, register_body),
    )

    def body(runner: asyncio.Runner, env: Env) -> None:
        assert env.ns is not None
        ns = env.ns

        @FUZZ
        @given(batch=st.lists(item, min_size=1, max_size=5))
        def fuzz(batch: list[tuple[int, dict[str, Any], bytes]]) -> None:
            async def go() -> None:
                for code, ext, payload in batch:
                    target = env.ns_addr if code == RequestCode.REGISTER_BROKER else env.broker.addr
                    live_before = sorted(ns.routes.live)
                    resp = await env.hostile_call(target, RemotingCommand.request(code, ext, payload))
                    if code == RequestCode.REGISTER_BROKER and resp.code != ResponseCode.SUCCESS:
                        assert sorted(ns.routes.live) == live_before, "a refused registration changed the routes"
                    if code == RequestCode.LOCK_BATCH_MQ and resp.code == ResponseCode.SUCCESS:
                        assert isinstance(fastjson.loads(resp.body).get("lockOKMQSet"), list)
                    env.stored_nothing((code, payload))
                await env.check_healthy()

            runner.run(go())

        fuzz()

    run_fuzz(tmp_path, body)


# -- deterministic cases where RocketMQ 4.9.7 refuses and ledgermq must too --------------------------------
@pytest.fixture
def env(tmp_path: Path) -> Iterator[tuple[asyncio.Runner, Env]]:
    with asyncio.Runner() as runner:
        e = Env(tmp_path)
        try:
            runner.run(e.start())
            yield runner, e
        finally:
            runner.run(e.stop())


MISSING = object()


def _refusals(
    runner: asyncio.Runner, env: Env, code: int, base: dict[str, Any], payload: bytes, key: str, bads: list[Any]
) -> list[str]:
    """Send ``base`` with ``key`` replaced by each bad value (MISSING drops it); describe every one that
    was not refused cleanly: answered SUCCESS, an error without a remark, a processor exception, or a
    change of the broker's state (commit log, consumer offsets, topics)."""

    async def go() -> list[str]:
        accepted = []
        for bad in bads:
            before = state_of(env.broker)
            ext = {k: v for k, v in base.items() if k != key}
            if bad is not MISSING:
                ext[key] = bad
            with processor_errors() as errors:
                resp = await env.hostile_call(env.broker.addr, RemotingCommand.request(code, ext, payload))
            shown = f"{key}=<missing>" if bad is MISSING else f"{key}={bad!r}"
            if resp.code == ResponseCode.SUCCESS or not resp.remark:
                accepted.append(f"{shown} -> code {resp.code} remark {resp.remark!r}")
            accepted += [f"{shown} -> processor exception {e}" for e in errors.records]
            after = state_of(env.broker)
            for part, old, new in zip(
                ("commit-log max offset", "consumer offsets", "topics"), before, after, strict=True
            ):
                if old != new:
                    change = f"{old} -> {new}" if part == "commit-log max offset" else "changed"
                    accepted.append(f"{shown} -> {part} {change}")
            env.accept_growth()
        await env.broker.dispatched()
        await env.check_healthy()
        return accepted

    return runner.run(go())


def _all_refusals(
    runner: asyncio.Runner, env: Env, cases: list[tuple[str, str, dict[str, Any]]], bads: list[Any]
) -> list[str]:
    """_refusals for every (base request, field, header overrides) case; failures prefixed by the code."""
    accepted = []
    bases = base_requests(env)
    for base, key, overrides in cases:
        code, ext, payload, _ = bases[base]
        name = RequestCode(code).name
        found = _refusals(runner, env, code, {**ext, **overrides}, payload, key, bads)
        accepted += [f"{name}: {line}" for line in found]
    return accepted


SEND_REQUIRED = [
    # Java answers SYSTEM_ERROR when these are missing: the null Integer/Long is unboxed in
    # AbstractSendMessageProcessor.msgCheck (queueId), SendMessageProcessor.handleRetryAndDLQ (sysFlag),
    # msgInner.setBornTimestamp / setFlag (asyncSendMessage; asyncSendBatchMessage likewise). For V2 and
    # batch, "" and "null" already fail Integer.parseInt in SendMessageRequestHeaderV2.decode.
    ("v2", "e", {}),
    ("v2", "f", {}),
    ("v2", "g", {}),
    ("v2", "h", {}),
    ("v1", "queueId", {}),
    ("v1", "sysFlag", {}),
    ("v1", "bornTimestamp", {}),
    ("v1", "flag", {}),
    ("batch", "e", {}),
    ("batch", "f", {}),
    ("batch", "g", {}),
    ("batch", "h", {}),
]


def test_send_without_a_required_number_stores_nothing(env: tuple[asyncio.Runner, Env]) -> None:
    """ledgermq's int_field falls back to a default (queueId -1 = a random queue, sysFlag/flag/
    bornTimestamp 0) when the field is missing, "" or "null", and the message is stored; the batch path
    does not read ``h`` at all."""
    runner, e = env
    accepted = _all_refusals(runner, e, SEND_REQUIRED, [MISSING, "", "null"])
    assert not accepted, "\n".join(accepted)


JAVA_PARSED_IGNORED = [
    # SendMessageRequestHeaderV2.decode parses d, h, j and l with Integer.parseInt for every V2 / batch send;
    # ledgermq reads d only to create a topic, l only for %RETRY% topics, and h, j, l not at all for batches.
    ("v2", "d", {}),
    ("v2", "l", {}),
    ("batch", "h", {}),
    ("batch", "j", {}),
    ("batch", "l", {}),
    # PullMessageRequestHeader.decode parses every numeric field whatever the flags; ledgermq reads
    # suspendTimeoutMillis only for a SUSPEND pull that found nothing.
    ("pull", "suspendTimeoutMillis", {"sysFlag": SUBSCRIPTION}),
]


def test_garbage_in_a_field_java_parses_is_refused(env: tuple[asyncio.Runner, Env]) -> None:
    runner, e = env
    accepted = _all_refusals(runner, e, JAVA_PARSED_IGNORED, ["abc", "1.5"])
    assert not accepted, "\n".join(accepted)


OUT_OF_RANGE = [
    # Integer fields beyond [-2**31, 2**31-1] and Long fields beyond [-2**63, 2**63-1] fail Integer.parseInt /
    # Long.parseLong (FastCodesHeader: the exception reaches the server, SYSTEM_ERROR; reflection-decoded
    # headers: the field stays null and is unboxed, SYSTEM_ERROR). ledgermq parses unbounded Python ints:
    # UPDATE_CONSUMER_OFFSET then stores and persists (consumerOffset.json, GET_ALL_CONSUMER_OFFSET to
    # slaves) numbers no Java broker can read back as int/long.
    ("update_offset", "queueId", 2**31),
    ("update_offset", "commitOffset", 2**63),
    ("query_offset", "queueId", -(2**31) - 1),
    ("max", "queueId", 2**40),
    ("pull", "queueOffset", 2**64),
    ("pull", "maxMsgNums", 10**18),
    ("v2", "d", 2**31),  # with a new topic, where d is read
    ("query", "maxNum", 2**31),
]


def test_numbers_beyond_java_int_and_long_are_refused(env: tuple[asyncio.Runner, Env]) -> None:
    runner, e = env
    accepted = []
    for base, key, value in OUT_OF_RANGE:
        overrides = {"b": "NewTopicFromD"} if base == "v2" else {}
        accepted += _all_refusals(runner, e, [(base, key, overrides)], [value])
    assert not accepted, "\n".join(accepted)


NOT_INTEGERS = [
    # Integer.parseInt / Long.parseLong accept neither float notation nor "NaN"/"Infinity". ledgermq's
    # int_field (protocol/headers.py) parses "1.0"/"1e0" as 1 and lets "nan"/"inf" escape as
    # ValueError/OverflowError, which the server's catch-all answers with the exception text.
    ("v2", "e", {}),
    ("v1", "flag", {}),
    ("update_offset", "commitOffset", {}),
    ("view", "offset", {}),
]


def test_float_notation_nan_and_infinity_are_not_integers(env: tuple[asyncio.Runner, Env]) -> None:
    runner, e = env
    accepted = _all_refusals(runner, e, NOT_INTEGERS, ["1.0", "1e0", "nan", "inf", "-Infinity"])
    assert not accepted, "\n".join(accepted)


READ_REQUIRED = [
    # Java unboxes the missing Integer/Long: getMessage(..., int maxMsgNums, ...), PullSysFlag.has*(int),
    # queryMessage(..., int maxNum, long begin, long end): SYSTEM_ERROR. ledgermq uses defaults.
    ("pull", "maxMsgNums", {}),
    ("pull", "sysFlag", {}),
    ("query", "maxNum", {}),
    ("query", "beginTimestamp", {}),
    ("query", "endTimestamp", {}),
]


def test_reads_without_a_required_number_are_refused(env: tuple[asyncio.Runner, Env]) -> None:
    runner, e = env
    accepted = _all_refusals(runner, e, READ_REQUIRED, [MISSING, "", "null"])
    assert not accepted, "\n".join(accepted)


def test_the_hostile_environment_itself_is_sound(env: tuple[asyncio.Runner, Env]) -> None:
    """The base requests succeed as they stand, and RegisterBrokerBody from the protocol module registers."""
    runner, e = env

    async def go() -> None:
        for name, (code, ext, payload, _) in base_requests(e).items():
            resp = await e.hostile_call(e.broker.addr, RemotingCommand.request(code, ext, payload))
            assert resp.code == ResponseCode.SUCCESS, (name, resp)
        await e.broker.dispatched()
        e.accept_growth()
        reg = RegisterBrokerBody(DataVersion(1, 1), {"Hx": TopicConfig("Hx", 2, 2)})
        header = {
            "brokerName": "hostile-b",
            "brokerAddr": "10.9.9.9:10911",
            "clusterName": "HostileCluster",
            "haServerAddr": "10.9.9.9:10912",
            "brokerId": 0,
        }
        resp = await e.hostile_call(
            e.ns_addr, RemotingCommand.request(RequestCode.REGISTER_BROKER, header, reg.encode())
        )
        assert resp.code == ResponseCode.SUCCESS, resp
        await e.check_healthy()

    runner.run(go())
