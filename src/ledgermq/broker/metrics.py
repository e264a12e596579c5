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
  ``ledgermq_store_consume_queue_open_files``, ``ledgermq_store_consume_queue_files_pending``,
  ``ledgermq_store_corruptions_found_total``, ``ledgermq_store_repairs_total``,
  ``ledgermq_store_damaged_bytes``, ``ledgermq_store_damaged_ranges``,
  ``ledgermq_store_scrubbed_bytes_total``, ``ledgermq_store_queue_rebuilds_total``,
  ``ledgermq_store_queue_units_rewritten_total``, ``ledgermq_store_queue_placeholders_total``,
  ``ledgermq_store_index_rebuilds_total`` (docs/storage-integrity.md);
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
* a broker in controller mode (docs/controller.md), besides the HA metrics of its role:
  ``ledgermq_controller_mode_role`` (label ``role``: STARTING, MASTER, SLAVE, SWITCHING; 1
  for the current one), ``ledgermq_controller_mode_broker_controller_id`` (-1 before the
  controller granted one), ``ledgermq_controller_mode_master_epoch``,
  ``ledgermq_controller_mode_sync_state_set_size`` and ``..._sync_state_set_epoch`` (a
  master: the set the controller accepted; a slave: as the controller last told it),
  ``ledgermq_controller_mode_lease_remaining_seconds`` (a master's write lease; 0: fenced),
  ``ledgermq_controller_mode_elections_seen_total`` (newer master epochs learned after the
  first), ``ledgermq_controller_mode_sync_state_set_changes_total`` (label ``result``:
  accepted, refused: the master's proposals, unanswered ones counted as refused),
  ``ledgermq_controller_mode_role_changes_total``, ``..._role_change_failures_total`` (switches that
  raised, each tried again at the next metadata sync),
  ``ledgermq_controller_mode_fenced_writes_total`` (sends refused for a lapsed lease) and
  ``ledgermq_controller_mode_heartbeat_failures_total``. There ``ledgermq_ha_slave_in_sync``
  and ``ledgermq_ha_in_sync_slaves`` count SyncStateSet members, as haStatus does.

Renamed or changed labels (no metric was removed): every metric gained ``cluster`` and
``broker_id``; ``ledgermq_ha_client_errors`` lost its ``last_error`` label (free text: an
unbounded label value) in favour of ``ledgermq_ha_client_error_state``.

* every broker, TLS (process-wide): ``ledgermq_tls_connections_total`` (``direction`` in|out,
  ``transport`` tls|plain) and ``ledgermq_tls_handshake_failures_total`` (``direction``,
  ``reason``: expired, untrusted, wrong-host, no-client-cert, plain-on-enforcing, timeout,
  peer-closed, refused-by-peer, other); docs/tls.md.

The store's families are in metrics_store.py, the HTTP endpoint in metrics_http.py.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from ledgermq.broker.context import Broker
from ledgermq.broker.controller_mode.metrics import controller_mode_metrics
from ledgermq.broker.metrics_store import store_metrics
from ledgermq.broker.processors.ha_status import ha_runtime_info
from ledgermq.broker.stats import StatsSettings
from ledgermq.net.tls.counters import COUNTERS as TLS_COUNTERS
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.raft import Role
from ledgermq.util.latency import LatencyHistogram

log = logging.getLogger(__name__)

# HAService closes such connections with "... is beyond the master's max offset ..." (ha/session.py).
REFUSED_MARKER = "beyond the master's max offset"
DIVERGED_MARKER = "ahead of or diverged"
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

    def base(self) -> list[str]:
        c = self.broker.config
        return [c.cluster_name, c.broker_name, str(c.broker_id)]

    def gauge(self, name: str, doc: str, extra: tuple[str, ...] = ()) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, doc, labels=[*BASE_LABELS, *extra])

    def counter(self, name: str, doc: str, extra: tuple[str, ...] = ()) -> CounterMetricFamily:
        return CounterMetricFamily(name, doc, labels=[*BASE_LABELS, *extra])

    def one_gauge(self, name: str, doc: str, value: float) -> GaugeMetricFamily:
        g = self.gauge(name, doc)
        g.add_metric(self.base(), value)
        return g

    def one_counter(self, name: str, doc: str, value: float) -> CounterMetricFamily:
        c = self.counter(name, doc)
        c.add_metric(self.base(), value)
        return c

    def collect(self) -> Iterator[Metric]:
        b = self.broker
        yield from store_metrics(self.broker, self)
        yield _histogram(
            "ledgermq_commitlog_flush_seconds",
            "Duration of commit-log flushes (fsync of the dirty segments) that wrote something.",
            BASE_LABELS,
            [(self.base(), b.store.flush_latency)],
        )
        yield from self._traffic()
        yield from self._tls()
        yield from self._lag()
        yield from self._requests()
        yield from self._timers()
        if b.controller is not None:
            yield from controller_mode_metrics(b.controller, BASE_LABELS, self.base())
        if b.dledger is not None:
            yield from self._dledger()
            return
        info = ha_runtime_info(b)
        if b.ha is not None:
            yield from self._master(info["haConnectionInfo"])
            yield from self._repairs(info)
        elif not info["master"]:
            yield from self._slave(info["haClientRuntimeInfo"])
            yield from self._repairs(info)

    # -- messages in and out, requests, lag ---------------------------------------------
    def _tls(self) -> Iterable[Metric]:
        """Process-wide (net/tls/counters.py): every port and link of this broker process."""
        conns = self.counter(
            "ledgermq_tls_connections",
            "Connections established, by direction (in: accepted, out: made) and transport (tls, plain).",
            ("direction", "transport"),
        )
        for (direction, transport), n in sorted(TLS_COUNTERS.connections.items()):
            conns.add_metric([*self.base(), direction, transport], n)
        yield conns
        failures = self.counter(
            "ledgermq_tls_handshake_failures",
            "Connections refused or TLS handshakes failed, by direction and reason (expired, untrusted, "
            "wrong-host, no-client-cert, plain-on-enforcing, timeout, peer-closed, refused-by-peer, other).",
            ("direction", "reason"),
        )
        for (direction, reason), n in sorted(TLS_COUNTERS.failures.items()):
            failures.add_metric([*self.base(), direction, reason], n)
        yield failures

    def _traffic(self) -> Iterable[Metric]:
        base = self.base()
        stats = self.broker.stats
        msgs_in = self.counter("ledgermq_messages_in", "Messages stored by sends, per topic.", ("topic",))
        bytes_in = self.counter("ledgermq_bytes_in", "Commit-log bytes written by sends, per topic.", ("topic",))
        for topic, s in sorted(stats.topic_put.items()):
            msgs_in.add_metric([*base, topic], s.nums)
            bytes_in.add_metric([*base, topic], s.size)
        msgs_out = self.counter(
            "ledgermq_messages_out", "Messages returned by pulls, per topic and group.", ("topic", "group")
        )
        bytes_out = self.counter(
            "ledgermq_bytes_out", "Bytes of messages returned by pulls, per topic and group.", ("topic", "group")
        )
        for (topic, group), s in sorted(stats.group_get.items()):
            msgs_out.add_metric([*base, topic, group], s.nums)
            bytes_out.add_metric([*base, topic, group], s.size)
        yield from (msgs_in, bytes_in, msgs_out, bytes_out)
        pulls = self.counter("ledgermq_pull_results", "Pulls answered, by whether they returned messages.", ("result",))
        pulls.add_metric([*base, "found"], stats.get_found)
        pulls.add_metric([*base, "miss"], stats.get_miss)
        yield pulls

    def _timers(self) -> Iterable[Metric]:
        """Timer messages (broker/timer/, docs/timers.md)."""
        timer = self.broker.timer
        if timer is None:
            return
        progress = timer.timers.progress()
        behind = max(0, progress.queue_max - progress.queue_offset)
        yield self.one_gauge(
            "ledgermq_timer_pending", "Timer messages stored and not delivered yet.", progress.pending + behind
        )
        yield self.one_gauge("ledgermq_timer_unfiled", "Timer messages not yet filed into the wheel.", behind)
        yield self.one_gauge(
            "ledgermq_timer_read_behind_seconds",
            "How far the next slot to deliver is behind now (a delivering broker).",
            max(0.0, (self.broker.clock.wall_ms() - progress.read_ms) / 1000) if timer.running else 0.0,
        )
        for metric, doc, value in (
            ("ledgermq_timer_filed", "Timer units filed into the wheel.", progress.filed),
            ("ledgermq_timer_delivered", "Timer messages written to their topics.", timer.delivered),
            ("ledgermq_timer_rolled", "Timers parked at the roll window's end and filed again.", timer.rolled),
            (
                "ledgermq_timer_skipped",
                "Timers that could not be delivered (record gone, unreadable timer log).",
                timer.skipped + timer.timers.unreadable,
            ),
            ("ledgermq_timer_put_failures", "Timer deliveries refused by the writer (retried).", timer.put_failures),
        ):
            yield self.one_counter(metric, doc, value)
        yield _histogram(
            "ledgermq_timer_lateness_seconds",
            "How long after its time (the end of its precision step) a timer was delivered.",
            BASE_LABELS,
            [(self.base(), timer.lateness)],
        )

    def _lag(self) -> Iterable[Metric]:
        """Per group and topic (always) and per queue (at most ``max_lag_series`` series, in
        sorted order; the rest are counted in ``ledgermq_consumer_lag_series_dropped``):
        the store's max offset minus the group's committed offset, for committed offsets."""
        base = self.base()
        store = self.broker.store
        limit = self.settings.max_lag_series
        total = self.gauge(
            "ledgermq_consumer_lag_messages",
            "Messages not yet consumed: queue max offset minus the group's committed offset, summed per topic.",
            ("group", "topic"),
        )
        per_queue = self.gauge(
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
        yield self.one_gauge(
            "ledgermq_consumer_lag_series_dropped",
            "Per-queue lag series left out of this scrape (over the bound); the per-topic sum still counts them.",
            dropped,
        )

    def _requests(self) -> Iterable[Metric]:
        base = self.base()
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
        labels = [*self.base(), self.broker.store_config.dleger_group]
        for metric, doc, value in (
            ("ledgermq_dledger_term", "The Raft term this member is in.", st.term),
            ("ledgermq_dledger_is_leader", "1 if this member is the group's Raft leader (its master).", 0),
            ("ledgermq_dledger_commit_index", "Highest Raft log index known committed.", st.commit),
            ("ledgermq_dledger_last_index", "Last index of this member's Raft log.", st.last_index),
            (
                "ledgermq_dledger_first_index",
                "First index this member still stores (retention moves it).",
                dl.store.commitlog.ledger.first_index + 1 if dl is not None else 1,
            ),
        ):
            g = self.gauge(metric, doc, ("group",))
            g.add_metric(labels, (1 if st.role is Role.LEADER else 0) if metric.endswith("is_leader") else value)
            yield g
        failures = self.counter(
            "ledgermq_dledger_driver_failures",
            "Times this member's Raft driver fail-stopped (a write failed) and was restarted or is being restarted.",
            ("group",),
        )
        failures.add_metric(labels, dl.driver_failures if dl is not None else 0)
        yield failures
        repairs = self.counter(
            "ledgermq_dledger_repairs",
            "Times this member's log was found damaged (rot, a missing file) and a repair from the leader began.",
            ("group",),
        )
        repairs.add_metric(labels, dl.repairs_started if dl is not None else 0)
        yield repairs
        repairing = self.gauge(
            "ledgermq_dledger_repairing_until",
            "While this member repairs a damaged log: the index it must reach again; 0 otherwise.",
            ("group",),
        )
        repairing.add_metric(labels, st.repair_until)
        yield repairing
        if st.role is Role.LEADER:
            lag = self.gauge(
                "ledgermq_dledger_member_lag",
                "Leader's last index minus the member's match index (Raft entries; the leader's view).",
                ("group", "member"),
            )
            stuck = self.gauge(
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
        base = self.base()
        slave = ("slave",)
        acked = self.gauge("ledgermq_ha_slave_acked_offset", "Latest commit-log offset the slave acknowledged.", slave)
        lag_b = self.gauge(
            "ledgermq_ha_slave_lag_bytes", "Master max offset minus the slave's acknowledged offset.", slave
        )
        lag_s = self.gauge(
            "ledgermq_ha_slave_lag_seconds",
            "Age of the oldest message the slave has not acknowledged (NaN: unknown).",
            slave,
        )
        conn = self.gauge("ledgermq_ha_slave_connected", "1 if the slave's HA connection is open.", slave)
        sync = self.gauge(
            "ledgermq_ha_slave_in_sync",
            "1 if the slave is connected and within haSlaveFallbehindMax (controller mode: a SyncStateSet member).",
            slave,
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
        yield self.one_gauge(
            "ledgermq_ha_in_sync_slaves",
            "Slaves connected and within haSlaveFallbehindMax (controller mode: SyncStateSet members).",
            sum(1 for c in conns if c["inSync"]),
        )
        ha = self.broker.ha
        yield self.one_counter(
            "ledgermq_ha_refused_connections",
            "HA connections closed for reporting an offset beyond the master's max (slave ahead/diverged, stranger).",
            ha.refused_connections if ha is not None else 0,
        )
        if ha is None:
            return
        yield self.one_gauge(
            "ledgermq_ha_epoch", "The master's replication epoch (one per start as master).", ha.epochs.last_epoch
        )
        yield self.one_gauge(
            "ledgermq_ha_recovering",
            "1 while a master that restarted after a crash refuses writes until its slave returns its lost tail.",
            1 if ha.recovering else 0,
        )
        yield self.one_counter(
            "ledgermq_ha_truncated_slaves",
            "Slaves told to truncate a tail that diverged from this master's log or that it lacks.",
            ha.truncated_slaves,
        )
        yield self.one_counter(
            "ledgermq_ha_took_back_bytes",
            "Bytes this master took back from a slave after losing the tail of its commit log.",
            ha.took_back_bytes,
        )

    def _repairs(self, info: dict[str, Any]) -> Iterable[Metric]:
        base = self.base()
        repairs = self.counter(
            "ledgermq_ha_repairs",
            "Damaged commit-log ranges repaired through HA: taken (rewritten here from a peer's bytes), given "
            "(sent to a slave that holds them damaged) or expired (let go by a slave: its master's retention had "
            "deleted them).",
            ("direction",),
        )
        nbytes = self.counter("ledgermq_ha_repaired_bytes", "Bytes of those repairs.", ("direction",))
        for direction, count, size in (
            ("taken", info["repairsTaken"], info["repairBytesTaken"]),
            ("given", info["repairsGiven"], info["repairBytesGiven"]),
            ("expired", info["repairsExpired"], info["repairBytesExpired"]),
        ):
            repairs.add_metric([*base, direction], count)
            nbytes.add_metric([*base, direction], size)
        yield from (repairs, nbytes)
        yield self.one_gauge(
            "ledgermq_ha_unrepaired_ranges",
            "Damaged ranges no connected replica could repair (no replica holds them healthy; see admin haStatus).",
            len(info["unrepaired"]),
        )

    def _slave(self, client: dict[str, Any]) -> Iterable[Metric]:
        base = self.base()
        master = client["masterAddr"]
        connected = self.gauge(
            "ledgermq_ha_client_connected", "1 if the HA connection to the master is open.", ("master",)
        )
        connected.add_metric([*base, master], 1 if client["connected"] else 0)
        yield connected
        yield self.one_counter("ledgermq_ha_client_connects", "HA connections made to a master.", client["connects"])
        yield self.one_gauge(
            "ledgermq_ha_client_reported_offset",
            "Offset last reported to the master (-1: none yet).",
            client["reportedOffset"],
        )
        error: str = client["lastError"]
        errors = self.gauge(
            "ledgermq_ha_client_errors",
            "1 while the last HA connection failed (kind: ledgermq_ha_client_error_state; text: log, admin haStatus).",
            ("master",),
        )
        errors.add_metric([*base, master], 1 if error else 0)
        yield errors
        yield self.one_gauge(
            "ledgermq_ha_client_error_state",
            "Kind of the slave's last HA failure: 0 none, 1 no master address known, 2 connecting or handshake "
            "failed, 3 refused as diverged/ahead of the master, 4 other.",
            ha_error_state(error, bool(client.get("refused"))),
        )
        yield self.one_gauge(
            "ledgermq_ha_client_diverged",
            "1 while the master refuses this slave (its log diverged and nobody may decide which to keep), "
            "or the last HA failure says our log is ahead of or diverged from the master's.",
            1 if client.get("refused") or DIVERGED_MARKER in error else 0,
        )
        yield self.one_counter(
            "ledgermq_ha_client_truncations",
            "Times the master told this slave to cut a tail that diverged or that the master lacked.",
            client.get("truncations", 0),
        )
        yield self.one_counter(
            "ledgermq_ha_client_truncated_bytes",
            "Commit-log bytes this slave truncated on its master's word.",
            client.get("truncatedBytes", 0),
        )
