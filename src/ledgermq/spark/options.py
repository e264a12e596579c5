"""The source's and the sink's options: parsed once, validated with messages that name the
option, and kept as plain picklable values (Spark ships readers and writers to its Python
workers by pickling them).

Option names follow spark-sql-kafka where the idea is the same. Spark hands options over
as strings in a case-insensitive map; names are matched without regard to case and the
messages use the documented spelling.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from ledgermq.client.errors import MQClientError
from ledgermq.client.records import TagExpressionError, check_subscribable
from ledgermq.client.tls import TlsOptions
from ledgermq.spark.offsets import EARLIEST, LATEST, OffsetError, Offsets, parse_offsets, parse_queue_key

DEFAULT_GROUP: Final = "ledgermq-spark"
DEFAULT_POLL_TIMEOUT_MS: Final = 120_000
DEFAULT_PULL_BATCH_SIZE: Final = 2048
MAX_PULL_BATCH_SIZE: Final = 65_536
DEFAULT_SEND_BATCH_SIZE: Final = 128
_GROUP_RE: Final = re.compile(r"[%|a-zA-Z0-9_-]{1,255}")
_TOPIC_RE: Final = re.compile(r"[%|a-zA-Z0-9_-]{1,127}")

# Options Spark itself may add to a source's or sink's map; accepted and ignored.
SPARK_OPTIONS: Final = frozenset({"path", "paths", "checkpointlocation", "queryname"})

COMMON: Final = (
    "namesrvAddr",
    "apiTimeoutMs",
    "useTLS",
    "tlsTrustCertPath",
    "tlsCertPath",
    "tlsKeyPath",
    "tlsKeyPassword",
    "tlsAuthServer",
)
TLS_OPTIONS: Final = COMMON[3:]
READ_BOTH: Final = (
    "subscribe",
    "subscribePattern",
    "assign",
    "startingOffsets",
    "startingTimestamp",
    "failOnDataLoss",
    "minPartitions",
    "tags",
    "groupId",
    "pollTimeoutMs",
    "pullBatchSize",
)
READ_BATCH_ONLY: Final = ("endingOffsets",)
READ_STREAM_ONLY: Final = ("maxOffsetsPerTrigger",)
WRITE: Final = ("topic", "producerGroup", "sendBatchSize", "sendTimeoutMs", "retryTimes", "exactlyOnce", "commitTopic")
DEFAULT_WRITER_GROUP: Final = "ledgermq-spark-writer"
# exactlyOnce=true: the producer group of the half messages (its producers answer every
# broker check with ROLLBACK, so it must serve nothing else) and the topic of commit records.
DEFAULT_EO_GROUP: Final = "ledgermq-spark-eo"
DEFAULT_COMMIT_TOPIC: Final = "LEDGERMQ_SPARK_COMMITS"


class OptionError(ValueError):
    """A missing, unknown or malformed option; the message names it."""


class OffsetSpec:
    """``earliest``, ``latest`` or specific offsets (``-2``/``-1`` per queue allowed)."""

    __slots__ = ("kind", "offsets")

    def __init__(self, kind: str, offsets: Offsets | None = None) -> None:
        self.kind = kind  # "earliest" | "latest" | "specific"
        self.offsets: Offsets = offsets or {}

    def __repr__(self) -> str:
        return self.kind if self.kind != "specific" else f"specific({self.offsets})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OffsetSpec) and (self.kind, self.offsets) == (other.kind, other.offsets)

    def __hash__(self) -> int:
        return hash(self.kind)

    def default_for(self, missing: int) -> int:
        """The per-queue value of ``earliest`` / ``latest`` (as -2 / -1)."""
        if self.kind == "earliest":
            return EARLIEST
        if self.kind == "latest":
            return LATEST
        return missing


@dataclass(frozen=True, slots=True)
class Subscription:
    """Exactly one of: topics (``subscribe``), a pattern (``subscribePattern``) or assigned
    queues (``assign``: topic -> broker -> queue ids)."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assign: dict[str, dict[str, tuple[int, ...]]] = field(default_factory=dict)

    @property
    def option(self) -> str:
        return "subscribePattern" if self.pattern is not None else "assign" if self.assign else "subscribe"

    def matches(self, topic: str) -> bool:
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        if self.assign:
            return topic in self.assign
        return topic in self.topics


@dataclass(frozen=True, slots=True)
class ReadOptions:
    namesrv: tuple[str, ...]
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    starting_timestamp: int | None = None
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    tags: str = "*"
    group_id: str | None = None
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    pull_batch_size: int = DEFAULT_PULL_BATCH_SIZE
    api_timeout_ms: int = 3000
    streaming: bool = False
    tls: TlsOptions | None = None  # useTLS=true: how to connect (None: plain)

    @property
    def pull_group(self) -> str:
        """The consumer group pulls are made under (the broker auto-creates it)."""
        return self.group_id or DEFAULT_GROUP

    @property
    def tag_set(self) -> frozenset[str] | None:
        """The tags the expression selects; None for ``*`` (everything)."""
        parsed = check_subscribable(self.tags)  # checked when the options were read
        return None if parsed.matches_all else frozenset(parsed.tags)


@dataclass(frozen=True, slots=True)
class WriteOptions:
    namesrv: tuple[str, ...]
    topic: str | None
    producer_group: str
    send_batch_size: int = DEFAULT_SEND_BATCH_SIZE
    send_timeout_ms: int = 3000
    retry_times: int = 2
    api_timeout_ms: int = 3000
    tls: TlsOptions | None = None  # useTLS=true: how to connect (None: plain)
    exactly_once: bool = False
    commit_topic: str = DEFAULT_COMMIT_TOPIC
    # where a streaming query checkpoints (the key of its commit records); None in a batch write
    checkpoint_location: str | None = None


# -- helpers ---------------------------------------------------------------------------------
class _Opts:
    """Case-insensitive view of the option map that remembers which names were read."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.values: dict[str, str] = {}
        for k, v in options.items():
            self.values[str(k).lower()] = "" if v is None else str(v)

    def get(self, name: str) -> str | None:
        return self.values.get(name.lower())

    def has(self, name: str) -> bool:
        value = self.get(name)
        return value is not None and value.strip() != ""

    def check_known(self, allowed: tuple[str, ...], *, misplaced: Mapping[str, str] | None = None) -> None:
        known = {a.lower(): a for a in allowed}
        for name in sorted(self.values):
            if name in known or name in SPARK_OPTIONS:
                continue
            if misplaced and name in {m.lower() for m in misplaced}:
                spelled = next(m for m in misplaced if m.lower() == name)
                raise OptionError(f"option '{spelled}' {misplaced[spelled]}")
            raise OptionError(f"unknown option '{name}'; the options are: {', '.join(sorted(allowed, key=str.lower))}")


def _int(opts: _Opts, name: str, *, minimum: int, maximum: int | None = None) -> int | None:
    text = opts.get(name)
    if text is None or not text.strip():
        return None
    try:
        value = int(text.strip())
    except ValueError:
        raise OptionError(f"option '{name}' must be an integer, got {text!r}") from None
    if value < minimum or (maximum is not None and value > maximum):
        bound = f">= {minimum}" if maximum is None else f"between {minimum} and {maximum}"
        raise OptionError(f"option '{name}' must be {bound}, got {value}")
    return value


def _bool(opts: _Opts, name: str, default: bool) -> bool:
    text = opts.get(name)
    if text is None or not text.strip():
        return default
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise OptionError(f"option '{name}' must be true or false, got {text!r}")


def _namesrv(opts: _Opts) -> tuple[str, ...]:
    text = opts.get("namesrvAddr")
    if text is None or not text.strip():
        raise OptionError("option 'namesrvAddr' is required: the name servers as 'host:port;host:port'")
    addrs = tuple(a.strip() for a in text.split(";") if a.strip())
    for a in addrs:
        host, sep, port = a.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise OptionError(f"option 'namesrvAddr': {a!r} is not host:port (separate name servers with ';')")
    return addrs


def _topic(name: str, topic: str) -> str:
    if not _TOPIC_RE.fullmatch(topic):
        raise OptionError(f"option '{name}': {topic!r} is not a valid topic name (^[%|a-zA-Z0-9_-]{{1,127}}$)")
    return topic


def _subscription(opts: _Opts) -> Subscription:
    given = [n for n in ("subscribe", "subscribePattern", "assign") if opts.has(n)]
    if len(given) != 1:
        how = "none was given" if not given else f"got {', '.join(given)}"
        raise OptionError(f"exactly one of the options 'subscribe', 'subscribePattern' or 'assign' is required; {how}")
    kind = given[0]
    text = (opts.get(kind) or "").strip()
    if kind == "subscribe":
        topics = tuple(dict.fromkeys(_topic("subscribe", t.strip()) for t in text.split(",") if t.strip()))
        if not topics:
            raise OptionError("option 'subscribe' names no topic (a comma-separated list is expected)")
        return Subscription(topics=topics)
    if kind == "subscribePattern":
        try:
            re.compile(text)
        except re.error as exc:
            raise OptionError(f"option 'subscribePattern': {text!r} is not a regular expression: {exc}") from None
        return Subscription(pattern=text)
    return Subscription(assign=_assign(text))


def _assign(text: str) -> dict[str, dict[str, tuple[int, ...]]]:
    example = '{"TopicA": {"broker-a": [0, 1]}}'
    try:
        doc = json.loads(text)
    except ValueError:
        raise OptionError(f"option 'assign' is not JSON; expected e.g. {example}") from None
    if not isinstance(doc, dict) or not doc:
        raise OptionError(f"option 'assign' must be a non-empty JSON object like {example}")
    out: dict[str, dict[str, tuple[int, ...]]] = {}
    for topic, brokers in doc.items():
        _topic("assign", topic)
        if not isinstance(brokers, dict) or not brokers:
            raise OptionError(f"option 'assign': topic {topic!r} must map broker names to lists of queue ids")
        per: dict[str, tuple[int, ...]] = {}
        for broker, ids in brokers.items():
            if not isinstance(ids, list) or not ids:
                raise OptionError(f"option 'assign': {topic}/{broker} must be a non-empty list of queue ids")
            if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
                raise OptionError(f"option 'assign': the queue ids of {topic}/{broker} must be integers >= 0")
            per[str(broker)] = tuple(sorted(set(ids)))
        out[topic] = per
    return out


def _offset_spec(opts: _Opts, name: str, default: str, *, streaming: bool, ending: bool) -> OffsetSpec:
    text = (opts.get(name) or "").strip()
    if not text:
        return OffsetSpec(default)
    lowered = text.lower()
    if lowered in ("earliest", "latest"):
        if ending and lowered == "earliest":
            raise OptionError(f"option '{name}': 'earliest' is not allowed as an end (use 'latest' or JSON)")
        if not ending and not streaming and lowered == "latest":
            raise OptionError(f"option '{name}': 'latest' is not allowed for a batch query (it would read nothing)")
        return OffsetSpec(lowered)
    try:
        offsets = parse_offsets(text, f"option '{name}'")
    except OffsetError as exc:
        raise OptionError(str(exc)) from None
    for q, value in offsets.items():
        if ending and value == EARLIEST:
            raise OptionError(f"option '{name}': -2 (earliest) is not allowed as the end of {q}")
        if not ending and not streaming and value == LATEST:
            raise OptionError(f"option '{name}': -1 (latest) is not allowed as the start of {q} in a batch query")
    return OffsetSpec("specific", offsets)


# -- entry points ----------------------------------------------------------------------------
def parse_read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """Validate the source's options for a batch (``streaming=False``) or streaming read."""
    opts = _Opts(options)
    if streaming:
        opts.check_known(
            COMMON + READ_BOTH + READ_STREAM_ONLY,
            misplaced={"endingOffsets": "is for batch queries only (spark.read); a stream has no end"},
        )
    else:
        opts.check_known(
            COMMON + READ_BOTH + READ_BATCH_ONLY,
            misplaced={"maxOffsetsPerTrigger": "is for streaming queries only (spark.readStream)"},
        )
    sub = _subscription(opts)
    starting = _offset_spec(
        opts, "startingOffsets", "latest" if streaming else "earliest", streaming=streaming, ending=False
    )
    ending = OffsetSpec("latest")
    if not streaming:
        ending = _offset_spec(opts, "endingOffsets", "latest", streaming=False, ending=True)
    for name, spec in (("startingOffsets", starting), ("endingOffsets", ending)):
        for q in spec.offsets:
            if not sub.matches(q.topic):
                raise OptionError(
                    f"option '{name}' names topic {q.topic!r}, which option '{sub.option}' does not select"
                )
            if sub.assign and q.queue_id not in sub.assign[q.topic].get(q.broker, ()):
                raise OptionError(f"option '{name}' names queue {q}, which option 'assign' does not assign")
    tags = (opts.get("tags") or "*").strip() or "*"
    if "\x01" in tags or "\x02" in tags:
        raise OptionError("option 'tags' contains a control character")
    try:
        check_subscribable(tags)
    except TagExpressionError as exc:
        raise OptionError(f"option 'tags': {exc}") from None
    group = (opts.get("groupId") or "").strip() or None
    if group is not None and not _GROUP_RE.fullmatch(group):
        raise OptionError(f"option 'groupId': {group!r} is not a valid group name (^[%|a-zA-Z0-9_-]+$)")
    return ReadOptions(
        namesrv=_namesrv(opts),
        subscription=sub,
        starting=starting,
        ending=ending,
        starting_timestamp=_int(opts, "startingTimestamp", minimum=0),
        max_offsets_per_trigger=_int(opts, "maxOffsetsPerTrigger", minimum=1),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        min_partitions=_int(opts, "minPartitions", minimum=1),
        tags=tags,
        group_id=group,
        poll_timeout_ms=_int(opts, "pollTimeoutMs", minimum=1) or DEFAULT_POLL_TIMEOUT_MS,
        pull_batch_size=_int(opts, "pullBatchSize", minimum=1, maximum=MAX_PULL_BATCH_SIZE) or DEFAULT_PULL_BATCH_SIZE,
        api_timeout_ms=_int(opts, "apiTimeoutMs", minimum=1) or 3000,
        streaming=streaming,
        tls=_tls(opts),
    )


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    opts = _Opts(options)
    opts.check_known(COMMON + WRITE)
    topic = (opts.get("topic") or "").strip() or None
    if topic is not None:
        _topic("topic", topic)
    exactly_once = _bool(opts, "exactlyOnce", False)
    default_group = DEFAULT_EO_GROUP if exactly_once else DEFAULT_WRITER_GROUP
    group = (opts.get("producerGroup") or "").strip() or default_group
    if not _GROUP_RE.fullmatch(group):
        raise OptionError(f"option 'producerGroup': {group!r} is not a valid group name")
    commit_topic = (opts.get("commitTopic") or "").strip()
    if commit_topic and not exactly_once:
        raise OptionError("option 'commitTopic' needs exactlyOnce=true")
    return WriteOptions(
        namesrv=_namesrv(opts),
        topic=topic,
        producer_group=group,
        send_batch_size=_int(opts, "sendBatchSize", minimum=1, maximum=10_000) or DEFAULT_SEND_BATCH_SIZE,
        send_timeout_ms=_int(opts, "sendTimeoutMs", minimum=1) or 3000,
        retry_times=_int(opts, "retryTimes", minimum=0, maximum=16) if opts.has("retryTimes") else 2,  # type: ignore[arg-type]
        api_timeout_ms=_int(opts, "apiTimeoutMs", minimum=1) or 3000,
        tls=_tls(opts),
        exactly_once=exactly_once,
        commit_topic=_topic("commitTopic", commit_topic) if commit_topic else DEFAULT_COMMIT_TOPIC,
        checkpoint_location=(opts.get("checkpointLocation") or "").strip() or None,
    )


def _tls(opts: _Opts) -> TlsOptions | None:
    """``useTLS=true`` and its certificates (the ``tls.client.*`` keys of RocketMQ)."""
    if not _bool(opts, "useTLS", False):
        given = [n for n in TLS_OPTIONS[1:] if opts.has(n)]
        if given:
            raise OptionError(f"option '{given[0]}' needs useTLS=true")
        return None
    try:
        return TlsOptions(
            trust_cert_path=(opts.get("tlsTrustCertPath") or "").strip(),
            cert_path=(opts.get("tlsCertPath") or "").strip(),
            key_path=(opts.get("tlsKeyPath") or "").strip(),
            key_password=opts.get("tlsKeyPassword") or "",
            auth_server=_bool(opts, "tlsAuthServer", True),
        )
    except MQClientError as exc:
        raise OptionError(f"TLS options: {exc}") from None


def queue_key_option(topic: str, key: str) -> str:
    """Validate a ``broker:queueId`` key (used by tests and docs)."""
    return str(parse_queue_key(topic, key))
