"""Prometheus metrics of one broker, served as text on ``metricsHost:metricsPort`` (port 0:
off; the host defaults to the broker's listenHost).

Every value is computed when scraped, from the store, from the same HARuntimeInfo that
``admin haStatus`` prints (``ha_runtime_info``) and from the plain counters of
broker/stats.py (bumped by the processors; no prometheus_client object on the hot path). Each
broker has its own ``CollectorRegistry`` (never prometheus_client's global one), so
several brokers in one process do not clash.

All metrics carry ``cluster``, ``broker`` (the brokerName) and ``broker_id`` (0: master;
in DLedger mode it follows the Raft role), so master and slaves of a group differ.

* every broker, traffic (counted in broker/stats.py, cheap on the hot path):
  ``ledgermq_messages_in_total`` / ``ledgermq_bytes_in_total`` (label ``topic``: stored
  sends, as TOPIC_PUT_NUMS/SIZE), ``ledgermq_messages_out_total`` /
  ``ledgermq_bytes_out_total`` (``topic``, ``group``: messages returned by pulls, as
  GROUP_GET_NUMS/SIZE), ``ledgermq_pull_results_total`` (``result`` found|miss),
  ``ledgermq_request_duration_seconds`` (histogram; ``code`` the RequestCode name,
  ``status`` the ResponseCode name or NONE for one-way; a held pull includes its hold);
* every broker, consumer lag computed at scrape time from the offset table and the store,
  for groups with committed offsets: ``ledgermq_consumer_lag_messages`` (``group``,
  ``topic``: summed over queues, always complete), ``ledgermq_consumer_queue_lag_messages``
  (``group``, ``topic``, ``queue``; at most ``StatsSettings.max_lag_series`` series, in
  sorted order) and ``ledgermq_consumer_lag_series_dropped`` (per-queue series left out);
* every broker, disk: ``ledgermq_store_commitlog_size_bytes`` (segment files times their
  size), ``ledgermq_store_disk_used_ratio`` (partition of the commit log),
  ``ledgermq_commitlog_flush_seconds`` (histogram of commit-log fsyncs that wrote);
* a master: ``ledgermq_ha_replication_wait_seconds`` (histogram: a SYNC_MASTER send's wait
  for its slave's acknowledgement, timeouts included; empty on an ASYNC_MASTER);
* every broker: ``ledgermq_commitlog_max_offset``, ``ledgermq_commitlog_min_offset``,
  ``ledgermq_store_dispatch_behind_bytes``, ``ledgermq_store_dispatch_failing`` (1 while
  puts are refused because what is stored cannot be made readable),
  ``ledgermq_store_dispatch_failures_total``, ``ledgermq_store_consume_queues``,
  ``ledgermq_store_consume_queue_open_files``, ``ledgermq_store_consume_queue_files_pending``;
* a master, per slave (label ``slave``, its HA address; slaves that went away recently are
  kept with ``connected`` 0, as in haStatus): ``ledgermq_ha_slave_acked_offset`` (-1 before
  its first report), ``ledgermq_ha_slave_lag_bytes``, ``ledgermq_ha_slave_lag_seconds``
  (NaN while unknown), ``ledgermq_ha_slave_connected``, ``ledgermq_ha_slave_in_sync``; and
  ``ledgermq_ha_in_sync_slaves``, ``ledgermq_ha_refused_connections_total`` (connections
  closed because the peer reported an offset beyond the master's max: a slave ahead of or
  diverged from its master, or a stranger);
* a slave: ``ledgermq_ha_client_connected`` (label ``master``),
  ``ledgermq_ha_client_connects_total``, ``ledgermq_ha_client_reported_offset``,
  ``ledgermq_ha_client_errors`` (1 while the last connection attempt failed; 0 once
  connected again), ``ledgermq_ha_client_error_state`` (its kind as a number: 0 none, 1 no
  master address, 2 connect/handshake failed, 3 refused as diverged, 4 other; the text is in
  the log and in ``admin haStatus``, never in a label) and ``ledgermq_ha_client_diverged``
  (1 while that reason is that our commit log is ahead of or diverged from the master's).
  The slave's lag behind its master is not exported: a 4.x master never tells its slave
  its max offset; read it from the master's ``ledgermq_ha_slave_lag_bytes``.
* a broker in DLedger mode (label ``group``, the dLegerGroup):
  ``ledgermq_dledger_term``, ``ledgermq_dledger_is_leader``,
  ``ledgermq_dledger_commit_index``, ``ledgermq_dledger_last_index``,
  ``ledgermq_dledger_first_index`` (the first index still stored),
  ``ledgermq_dledger_driver_failures_total``; on the leader,
  ``ledgermq_dledger_member_lag`` (label ``member``, n<k>; itself included): the leader's
  last index minus the member's match index, in Raft entries, and
  ``ledgermq_dledger_member_stuck`` (1: the member needs entries the leader's retention
  deleted). The master-slave (HA)
  metrics are not exported in DLedger mode.

Renamed or changed labels (no metric was removed): every metric gained ``cluster`` and
``broker_id``; ``ledgermq_ha_client_errors`` lost its ``last_error`` label (free text: an
unbounded label value) in favour of ``ledgermq_ha_client_error_state``.

The HTTP side is a few lines of ``asyncio.start_server``: ``GET /metrics`` answers the
0.0.4 text format, any other path 404, any other method 405; one request per connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from ledgermq.broker.context import Broker
from ledgermq.broker.processors.ha_status import ha_runtime_info
from ledgermq.broker.stats import StatsSettings
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.raft import Role
from ledgermq.store.retention import disk_usage_ratio
from ledgermq.util.latency import LatencyHistogram

log = logging.getLogger(__name__)

# HAService closes such connections with "... is beyond the master's max offset ..." (ha/session.py).
REFUSED_MARKER = "beyond the master's max offset"
DIVERGED_MARKER = "ahead of or diverged"
_REQUEST_TIMEOUT_S = 5.0
_MAX_REQUEST_HEAD = 16 * 1024
BASE_LABELS = ["cluster", "broker", "broker_id"]

# ledgermq_ha_client_error_state: the kind of the slave's last HA failure, never its text.
HA_ERROR_NONE, HA_ERROR_NO_MASTER, HA_ERROR_CONNECT, HA_ERROR_DIVERGED, HA_ERROR_OTHER = range(5)


def ha_error_state(error: str, refused: bool) -> int:
    """A small number for the HA client's last error text (the text stays in the log and
    in ``admin haStatus``): a label value must never be free text."""
    if refused or DIVERGED_MARKER in error or REFUSED_MARKER in error:
        return HA_ERROR_DIVERGED
    if not error:
        return HA_ERROR_NONE
    if "no master HA address" in error:
        return HA_ERROR_NO_MASTER
    if error.startswith(("OSError", "ConnectionRefusedError", "ConnectionResetError", "TimeoutError")) or any(
        w in error for w in ("timed out", "does not resolve", "no handshake", "Connection")
    ):
        return HA_ERROR_CONNECT
    return HA_ERROR_OTHER


def _name(enum_type: type[RequestCode] | type[ResponseCode], code: int) -> str:
    try:
        return enum_type(code).name
    except ValueError:
        return "NONE" if code < 0 else str(code)


def _histogram(
    name: str, doc: str, labels: list[str], series: Iterable[tuple[list[str], LatencyHistogram]]
) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, doc, labels=labels)
    for values, h in series:
        family.add_metric(values, h.cumulative(), h.sum)
    return family


class BrokerCollector:
    """Computes every metric from the broker at scrape time (event-loop thread)."""

    def __init__(self, broker: Broker, settings: StatsSettings | None = None) -> None:
        self.broker = broker
        self.settings = settings or broker.stats.settings

    def _base(self) -> list[str]:
        c = self.broker.config
        return [c.cluster_name, c.broker_name, str(c.broker_id)]

    def _gauge(self, name: str, doc: str, extra: tuple[str, ...] = ()) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, doc, labels=[*BASE_LABELS, *extra])

    def _counter(self, name: str, doc: str, extra: tuple[str, ...] = ()) -> CounterMetricFamily:
        return CounterMetricFamily(name, doc, labels=[*BASE_LABELS, *extra])

    def _one_gauge(self, name: str, doc: str, value: float) -> GaugeMetricFamily:
        g = self._gauge(name, doc)
        g.add_metric(self._base(), value)
        return g

    def _one_counter(self, name: str, doc: str, value: float) -> CounterMetricFamily:
        c = self._counter(name, doc)
        c.add_metric(self._base(), value)
        return c

    def collect(self) -> Iterator[Metric]:
        b = self.broker
        store = b.store
        for metric, doc, value in (
            ("ledgermq_commitlog_max_offset", "Commit-log max (write) offset in bytes.", store.max_phy_offset),
            (
                "ledgermq_commitlog_min_offset",
                "Commit-log min offset (start of the oldest segment).",
                store.min_phy_offset,
            ),
            (
                "ledgermq_store_dispatch_behind_bytes",
                "Commit-log bytes not yet dispatched.",
                store.dispatch_behind_bytes,
            ),
            (
                "ledgermq_store_dispatch_failing",
                "1 while stored messages cannot be dispatched into their consume queues or their queue "
                "files cannot be created (puts are refused meanwhile; the reason is in the log and in "
                "brokerStatus' dispatchError).",
                1 if store.dispatch_problem else 0,
            ),
            ("ledgermq_store_consume_queues", "Consume queues in the store.", len(store.queues.queues)),
            (
                "ledgermq_store_consume_queue_open_files",
                "Descriptors open on consume-queue files (bounded by maxOpenConsumeQueueFiles).",
                store.queues.open_files.open_count,
            ),
            (
                "ledgermq_store_consume_queue_files_pending",
                "New consume-queue segments still held in memory, their files not yet created.",
                store.queues.creator.backlog,
            ),
            (
                "ledgermq_store_commitlog_size_bytes",
                "Bytes of commit-log segment files on disk (segments times their fixed size).",
                sum(mf.size for mf in list(store.commitlog.queue.files)),
            ),
            (
                "ledgermq_store_disk_used_ratio",
                "Used fraction of the partition holding the commit log (-1: unknown); retention "
                "deletes at diskMaxUsedSpaceRatio and refuses writes near full.",
                _disk_ratio(Path(b.store_config.commitlog_path)),
            ),
        ):
            yield self._one_gauge(metric, doc, value)
        yield self._one_counter(
            "ledgermq_store_dispatch_failures",
            "Failed attempts to dispatch a record or create a consume-queue file.",
            store.dispatch_failures,
        )
        yield _histogram(
            "ledgermq_commitlog_flush_seconds",
            "Duration of commit-log flushes (fsync of the dirty segments) that wrote something.",
            BASE_LABELS,
            [(self._base(), store.flush_latency)],
        )
        yield from self._traffic()
        yield from self._lag()
        yield from self._requests()
        if b.dledger is not None:
            yield from self._dledger()
            return
        info = ha_runtime_info(b)
        if b.ha is not None:
            yield from self._master(info["haConnectionInfo"])
        elif not info["master"]:
            yield from self._slave(info["haClientRuntimeInfo"])

    # -- messages in and out, requests, lag ---------------------------------------------
    def _traffic(self) -> Iterable[Metric]:
        base = self._base()
        stats = self.broker.stats
        msgs_in = self._counter("ledgermq_messages_in", "Messages stored by sends, per topic.", ("topic",))
        bytes_in = self._counter("ledgermq_bytes_in", "Commit-log bytes written by sends, per topic.", ("topic",))
        for topic, s in sorted(stats.topic_put.items()):
            msgs_in.add_metric([*base, topic], s.nums)
            bytes_in.add_metric([*base, topic], s.size)
        msgs_out = self._counter(
            "ledgermq_messages_out", "Messages returned by pulls, per topic and group.", ("topic", "group")
        )
        bytes_out = self._counter(
            "ledgermq_bytes_out", "Bytes of messages returned by pulls, per topic and group.", ("topic", "group")
        )
        for (topic, group), s in sorted(stats.group_get.items()):
            msgs_out.add_metric([*base, topic, group], s.nums)
            bytes_out.add_metric([*base, topic, group], s.size)
        yield from (msgs_in, bytes_in, msgs_out, bytes_out)
        pulls = self._counter(
            "ledgermq_pull_results", "Pulls answered, by whether they returned messages.", ("result",)
        )
        pulls.add_metric([*base, "found"], stats.get_found)
        pulls.add_metric([*base, "miss"], stats.get_miss)
        yield pulls

    def _lag(self) -> Iterable[Metric]:
        """Per group and topic (always) and per queue (at most ``max_lag_series`` series, in
        sorted order; the rest are counted in ``ledgermq_consumer_lag_series_dropped``):
        the store's max offset minus the group's committed offset, for committed offsets."""
        base = self._base()
        store = self.broker.store
        limit = self.settings.max_lag_series
        total = self._gauge(
            "ledgermq_consumer_lag_messages",
            "Messages not yet consumed: queue max offset minus the group's committed offset, summed per topic.",
            ("group", "topic"),
        )
        per_queue = self._gauge(
            "ledgermq_consumer_queue_lag_messages",
            "Queue max offset minus the group's committed offset (bounded count of series).",
            ("group", "topic", "queue"),
        )
        series = dropped = 0
        for key, queues in sorted(self.broker.offsets.table.items()):
            topic, _, group = key.partition("@")
            lag_sum = 0
            for queue_id, committed in sorted(queues.items()):
                lag = max(0, store.max_offset_in_queue(topic, queue_id) - committed) if committed >= 0 else 0
                lag_sum += lag
                if series < limit:
                    per_queue.add_metric([*base, group, topic, str(queue_id)], lag)
                    series += 1
                else:
                    dropped += 1
            total.add_metric([*base, group, topic], lag_sum)
        yield total
        yield per_queue
        yield self._one_gauge(
            "ledgermq_consumer_lag_series_dropped",
            "Per-queue lag series left out of this scrape (over the bound); the per-topic sum still counts them.",
            dropped,
        )

    def _requests(self) -> Iterable[Metric]:
        base = self._base()
        stats = self.broker.stats
        yield _histogram(
            "ledgermq_request_duration_seconds",
            "Time from a request's dispatch to its answer, by request code and response code "
            "(held pulls include their hold).",
            [*BASE_LABELS, "code", "status"],
            [
                ([*base, _name(RequestCode, code), _name(ResponseCode, status)], h)
                for (code, status), h in sorted(stats.requests.items())
            ],
        )
        if self.broker.ha is not None:
            yield _histogram(
                "ledgermq_ha_replication_wait_seconds",
                "SYNC_MASTER: how long a send waited for a slave's acknowledgement (timeouts included).",
                BASE_LABELS,
                [(base, stats.replication)],
            )

    # -- DLedger, HA -------------------------------------------------------------------
    def _dledger(self) -> Iterable[Metric]:
        dl = self.broker.dledger
        st = dl.status() if dl is not None else None
        if st is None:
            return
        labels = [*self._base(), self.broker.store_config.dleger_group]
        for metric, doc, value in (
            ("ledgermq_dledger_term", "The Raft term this member is in.", st.term),
            ("ledgermq_dledger_is_leader", "1 if this member is the group's Raft leader (its master).", 0),
            ("ledgermq_dledger_commit_index", "Highest Raft log index known committed.", st.commit),
            ("ledgermq_dledger_last_index", "Last index of this member's Raft log.", st.last_index),
            (
                "ledgermq_dledger_first_index",
                "First index this member still stores (retention moves it).",
                dl.store.dledger.ledger.first_index + 1 if dl is not None and dl.store.dledger is not None else 1,
            ),
        ):
            g = self._gauge(metric, doc, ("group",))
            g.add_metric(labels, (1 if st.role is Role.LEADER else 0) if metric.endswith("is_leader") else value)
            yield g
        failures = self._counter(
            "ledgermq_dledger_driver_failures",
            "Times this member's Raft driver fail-stopped (a write failed) and was restarted or is being restarted.",
            ("group",),
        )
        failures.add_metric(labels, dl.driver_failures if dl is not None else 0)
        yield failures
        if st.role is Role.LEADER:
            lag = self._gauge(
                "ledgermq_dledger_member_lag",
                "Leader's last index minus the member's match index (Raft entries; the leader's view).",
                ("group", "member"),
            )
            stuck = self._gauge(
                "ledgermq_dledger_member_stuck",
                "1 if the member needs entries the leader's retention deleted (it cannot catch up).",
                ("group", "member"),
            )
            stuck_now = dl.watch.needs.stuck if dl is not None else frozenset()
            for member, match in sorted(st.match.items()):
                lag.add_metric([*labels, member], max(0, st.last_index - match))
                stuck.add_metric([*labels, member], 1 if member in stuck_now else 0)
            yield lag
            yield stuck

    def _master(self, conns: list[dict[str, Any]]) -> Iterable[Metric]:
        base = self._base()
        slave = ("slave",)
        acked = self._gauge("ledgermq_ha_slave_acked_offset", "Latest commit-log offset the slave acknowledged.", slave)
        lag_b = self._gauge(
            "ledgermq_ha_slave_lag_bytes", "Master max offset minus the slave's acknowledged offset.", slave
        )
        lag_s = self._gauge(
            "ledgermq_ha_slave_lag_seconds",
            "Age of the oldest message the slave has not acknowledged (NaN: unknown).",
            slave,
        )
        conn = self._gauge("ledgermq_ha_slave_connected", "1 if the slave's HA connection is open.", slave)
        sync = self._gauge(
            "ledgermq_ha_slave_in_sync", "1 if the slave is connected and within haSlaveFallbehindMax.", slave
        )
        for c in conns:
            labels = [*base, c["addr"]]
            acked.add_metric(labels, c["slaveAckOffset"])
            lag_b.add_metric(labels, c["diff"])
            lag_ms = c["lagTimeMillis"]
            lag_s.add_metric(labels, math.nan if lag_ms < 0 else lag_ms / 1000)
            conn.add_metric(labels, 1 if c["connected"] else 0)
            sync.add_metric(labels, 1 if c["inSync"] else 0)
        yield from (acked, lag_b, lag_s, conn, sync)
        yield self._one_gauge(
            "ledgermq_ha_in_sync_slaves",
            "Slaves connected and within haSlaveFallbehindMax.",
            sum(1 for c in conns if c["inSync"]),
        )
        ha = self.broker.ha
        yield self._one_counter(
            "ledgermq_ha_refused_connections",
            "HA connections closed for reporting an offset beyond the master's max (slave ahead/diverged, stranger).",
            ha.refused_connections if ha is not None else 0,
        )
        if ha is None:
            return
        yield self._one_gauge(
            "ledgermq_ha_epoch", "The master's replication epoch (one per start as master).", ha.epochs.last_epoch
        )
        yield self._one_gauge(
            "ledgermq_ha_recovering",
            "1 while a master that restarted after a crash refuses writes until its slave returns its lost tail.",
            1 if ha.recovering else 0,
        )
        yield self._one_counter(
            "ledgermq_ha_truncated_slaves",
            "Slaves told to truncate a tail that diverged from this master's log or that it lacks.",
            ha.truncated_slaves,
        )
        yield self._one_counter(
            "ledgermq_ha_took_back_bytes",
            "Bytes this master took back from a slave after losing the tail of its commit log.",
            ha.took_back_bytes,
        )

    def _slave(self, client: dict[str, Any]) -> Iterable[Metric]:
        base = self._base()
        master = client["masterAddr"]
        connected = self._gauge(
            "ledgermq_ha_client_connected", "1 if the HA connection to the master is open.", ("master",)
        )
        connected.add_metric([*base, master], 1 if client["connected"] else 0)
        yield connected
        yield self._one_counter("ledgermq_ha_client_connects", "HA connections made to a master.", client["connects"])
        yield self._one_gauge(
            "ledgermq_ha_client_reported_offset",
            "Offset last reported to the master (-1: none yet).",
            client["reportedOffset"],
        )
        error: str = client["lastError"]
        errors = self._gauge(
            "ledgermq_ha_client_errors",
            "1 while the last HA connection failed (kind: ledgermq_ha_client_error_state; text: log, admin haStatus).",
            ("master",),
        )
        errors.add_metric([*base, master], 1 if error else 0)
        yield errors
        yield self._one_gauge(
            "ledgermq_ha_client_error_state",
            "Kind of the slave's last HA failure: 0 none, 1 no master address known, 2 connecting or handshake "
            "failed, 3 refused as diverged/ahead of the master, 4 other.",
            ha_error_state(error, bool(client.get("refused"))),
        )
        yield self._one_gauge(
            "ledgermq_ha_client_diverged",
            "1 while the master refuses this slave (its log diverged and nobody may decide which to keep), "
            "or the last HA failure says our log is ahead of or diverged from the master's.",
            1 if client.get("refused") or DIVERGED_MARKER in error else 0,
        )
        yield self._one_counter(
            "ledgermq_ha_client_truncations",
            "Times the master told this slave to cut a tail that diverged or that the master lacked.",
            client.get("truncations", 0),
        )
        yield self._one_counter(
            "ledgermq_ha_client_truncated_bytes",
            "Commit-log bytes this slave truncated on its master's word.",
            client.get("truncatedBytes", 0),
        )


def _disk_ratio(path: Path) -> float:
    """Used fraction of the partition that holds (or will hold) ``path``; -1 if unknown."""
    while not path.exists() and path.parent != path:
        path = path.parent
    try:
        return disk_usage_ratio(path)
    except OSError:
        return -1.0


class BrokerMetrics:
    """The broker's registry and its ``/metrics`` HTTP endpoint (started only on request)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.registry = CollectorRegistry(auto_describe=False)
        self.collector = BrokerCollector(broker)
        self.registry.register(self.collector)
        self.host = "127.0.0.1"
        self.port = 0
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[Any]] = set()

    def render(self) -> bytes:
        return generate_latest(self.registry)

    @property
    def serving(self) -> bool:
        return self._server is not None

    async def start(self, port: int, host: str = "127.0.0.1") -> None:
        """Serve ``/metrics`` on ``host:port`` (0 picks a free port; see ``port``)."""
        if self._server is not None:
            return
        self._server = await asyncio.start_server(self._handle, host, port, limit=_MAX_REQUEST_HEAD)
        self.host = host
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("metrics of broker %s on http://%s:%d/metrics", self.broker.config.broker_name, host, self.port)

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        for task in list(self._handlers):
            task.cancel()
        if self._handlers:
            await asyncio.wait(list(self._handlers), timeout=2.0)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 2.0)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _REQUEST_TIMEOUT_S)
            except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                return
            parts = head.split(b"\r\n", 1)[0].decode("latin-1").split()
            if len(parts) != 3 or not parts[2].startswith("HTTP/"):
                status, ctype, body = "400 Bad Request", "text/plain; charset=utf-8", b"bad request\n"
            elif parts[0] not in ("GET", "HEAD"):
                status, ctype, body = "405 Method Not Allowed", "text/plain; charset=utf-8", b"method not allowed\n"
            elif parts[1].split("?", 1)[0] != "/metrics":
                status, ctype, body = "404 Not Found", "text/plain; charset=utf-8", b"not found; try /metrics\n"
            else:
                try:
                    status, ctype, body = "200 OK", CONTENT_TYPE_PLAIN_0_0_4, self.render()
                except Exception as exc:  # a broken figure must not take the endpoint down silently
                    log.exception("metrics: collecting failed")
                    status, ctype = "500 Internal Server Error", "text/plain; charset=utf-8"
                    body = f"collecting metrics failed: {type(exc).__name__}: {exc}\n".encode()
            header = f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
            writer.write(f"{header}Connection: close\r\n\r\n".encode("latin-1"))
            if parts and parts[0] != "HEAD":
                writer.write(body)
            with contextlib.suppress(ConnectionError):
                await writer.drain()
        except asyncio.CancelledError:
            # stop() cuts off a connection it is serving. Python 3.11's stream server logs a
            # handler that ends cancelled as an error ("Exception in callback"), so end normally.
            return
        finally:
            if task is not None:
                self._handlers.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
