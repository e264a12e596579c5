"""``ledgermq_controller_mode_*``: what a broker in controller mode knows of its role, its
group and its lease, computed at scrape time from ``ControllerModeService`` (broker/metrics.py
yields these beside the HA metrics of the broker's current role)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from ledgermq.broker.controller_mode.service import ControllerModeService
from ledgermq.broker.controller_mode.view import Role

__all__ = ["controller_mode_metrics"]

PREFIX = "ledgermq_controller_mode_"


def controller_mode_metrics(
    service: ControllerModeService, label_names: Sequence[str], labels: Sequence[str]
) -> Iterator[Metric]:
    names, values = list(label_names), list(labels)

    def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
        g = GaugeMetricFamily(PREFIX + name, doc, labels=names)
        g.add_metric(values, value)
        return g

    def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
        c = CounterMetricFamily(PREFIX + name, doc, labels=names)
        c.add_metric(values, value)
        return c

    role = GaugeMetricFamily(
        PREFIX + "role", "1 for the role the controller gave this broker.", labels=[*names, "role"]
    )
    for r in Role:
        role.add_metric([*values, r.value], 1 if service.role is r else 0)
    yield role
    yield gauge(
        "broker_controller_id",
        "This broker's controller-assigned id (-1 before the controller granted one).",
        -1 if service.broker_id is None else service.broker_id,
    )
    yield gauge("master_epoch", "The group's master epoch as this broker last applied it.", service.view.master_epoch)
    tracker = service.tracker
    if tracker is not None:
        members, epoch = tracker.accepted.members, tracker.accepted.epoch
    else:
        members, epoch = service.view.sync_state_set, service.view.sync_state_set_epoch
    yield gauge(
        "sync_state_set_size",
        "Members of the SyncStateSet (a master: as the controller accepted it; a slave: as last told).",
        len(members),
    )
    yield gauge("sync_state_set_epoch", "The SyncStateSet's epoch (same source as its size).", epoch)
    yield gauge(
        "lease_remaining_seconds",
        "How long this master may still acknowledge writes without hearing from the controller leader (0: fenced).",
        service.lease.remaining_s(service.clock.monotonic()) if service.role is Role.MASTER else 0.0,
    )
    yield counter(
        "elections_seen", "Newer master epochs this broker learned from the controller after its first.",
        service.elections_seen,
    )  # fmt: skip
    changes = CounterMetricFamily(
        PREFIX + "sync_state_set_changes",
        "SyncStateSet changes this broker proposed as master, by the controller's answer (unanswered: refused).",
        labels=[*names, "result"],
    )
    changes.add_metric([*values, "accepted"], service.sync_state.accepted_changes)
    changes.add_metric([*values, "refused"], service.sync_state.refused_changes)
    yield changes
    yield counter("role_changes", "Roles taken on the controller's word.", service.role_changes)
    yield counter(
        "role_change_failures", "Role switches that failed (each tried again at the next metadata sync).",
        service.role_change_failures,
    )  # fmt: skip
    yield counter(
        "fenced_writes", "Sends refused because this master's controller lease had lapsed.", service.gate.fenced_writes
    )
    yield counter(
        "heartbeat_failures", "Heartbeats to a controller node that failed or went unanswered.",
        service.heartbeats.failures,
    )  # fmt: skip
