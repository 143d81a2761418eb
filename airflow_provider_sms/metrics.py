"""The provider's metrics, sent through Airflow's own ``Stats`` (``[metrics]``: StatsD, Datadog,
InfluxDB or OpenTelemetry), under the prefix ``sms.``.

:data:`METRICS` is the one list of what the provider emits: each metric's name, type, unit, tags and
when it is emitted. The Metrics page of the manual, the dashboard and its test all read it.

Names follow the official providers (edge3, Airflow's own task metrics): each metric is sent under a
fixed name with its tags (Datadog, InfluxDB and OpenTelemetry keep them as tags or attributes) and, for
plain StatsD, which drops tags, a second time under a name that embeds its bounded tags (the connection,
a reason, a status), e.g. ``sms.send.filtered.sms_default.flood``. DAG and task ids stay tags only, and
no name, tag or value holds a telephone number, a text, a token or a campaign id.

Emitting never raises and never waits: a metric that cannot be sent is logged at debug level and
dropped, and Airflow's StatsD client sends UDP datagrams. With metrics off (Airflow's default), each call
costs the building of a small dict.
"""

from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from collections.abc import Mapping

    from airflow_provider_sms.models import CampaignResult


log = logging.getLogger(__name__)

PREFIX = "sms"
Kind = Literal["counter", "gauge", "timer"]
Component = Literal["worker", "triggerer", "API server"]
# Airflow's rule for a metric name (its StatsD validator), and its longest name.
NAME_RULE = re.compile(r"^[A-Za-z0-9_.\-/]+$")
MAX_NAME = 250
# A tag value inside a name: Airflow's characters only, a dot would add a level to the name.
_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9_\-]")


@dataclass(frozen=True)
class Metric:
    """One metric the provider emits.

    :param name: the name after ``sms.``.
    :param kind: ``counter``, ``gauge`` or ``timer`` (milliseconds).
    :param unit: what a value counts.
    :param tags: the tags (OpenTelemetry attributes) it is sent with.
    :param in_name: the tags also embedded, in this order, in its plain-StatsD name; each has a bounded
        set of values (connections, reasons, statuses).
    :param when: when it is emitted.
    :param component: the Airflow component that emits it.
    """

    name: str
    kind: Kind
    unit: str
    tags: tuple[str, ...]
    in_name: tuple[str, ...]
    when: str
    component: Component

    @property
    def full_name(self) -> str:
        """The name Airflow sends (before ``[metrics]`` adds its own prefix)."""
        return f"{PREFIX}.{self.name}"

    @property
    def statsd_name(self) -> str:
        """The plain-StatsD name, with its embedded tags as ``<tag>`` placeholders."""
        return ".".join([self.full_name, *(f"<{tag}>" for tag in self.in_name)])


_SEND = ("conn_id", "dag_id", "task_id", "operator", "pushtype")
_WAIT = ("conn_id", "dag_id", "task_id", "sensor")
# The filters of the service, as the send's answer counts them.
FILTER_REASONS = ("blacklisted", "duplicated", "npai", "invalid", "not_allowed", "flood", "country_limit")
# Why the delivery-report receiver refused a call: 404 unknown_name and caller, 413 size, 415/400/422 body,
# 401/403 signature (404 too for a webhook that is no DLR one), 503 the three *_unavailable.
RECEIVER_REFUSALS = (
    "unknown_name",
    "caller",
    "size",
    "body",
    "signature",
    "connection_unavailable",
    "signature_unavailable",
    "store_unavailable",
)

METRICS: dict[str, Metric] = {
    metric.name: metric
    for metric in (
        # Sends: both send operators and SmsNotifier, in the worker (or where a callback runs).
        Metric(
            "send.numbers",
            "counter",
            "numbers",
            _SEND,
            ("conn_id",),
            "a send's answer: the numbers of its audience the service counted",
            "worker",
        ),
        Metric(
            "send.sent",
            "counter",
            "numbers",
            _SEND,
            ("conn_id",),
            "a send's answer: the numbers the service sent to",
            "worker",
        ),
        Metric(
            "send.filtered",
            "counter",
            "numbers",
            (*_SEND, "reason"),
            ("conn_id", "reason"),
            "a send's answer: the numbers a filter of the service removed, by reason ("
            + ", ".join(FILTER_REASONS)
            + ")",
            "worker",
        ),
        Metric(
            "send.credits_spent",
            "counter",
            "credits",
            _SEND,
            ("conn_id",),
            "a send's answer: the credits it cost",
            "worker",
        ),
        Metric(
            "send.batches",
            "counter",
            "requests",
            _SEND,
            ("conn_id",),
            "each POST of a batch the service answered",
            "worker",
        ),
        Metric(
            "send.duration",
            "timer",
            "milliseconds",
            _SEND,
            ("conn_id",),
            "a send's end: from the task's start (execute) to the service's answer to its last batch",
            "worker",
        ),
        Metric(
            "credits_left",
            "gauge",
            "credits",
            ("conn_id",),
            ("conn_id",),
            "a send's answer: the account's balance after it",
            "worker",
        ),
        Metric(
            "campaigns",
            "counter",
            "campaigns",
            (*_SEND, "outcome"),
            ("conn_id", "outcome"),
            "a send task's outcome: sent, duplicate (refused by the claim store), gated (a gate refused; "
            "tag gate), asked (an approval asked), approved, maybe_sent (outcome unknown, not retried), "
            "nobody_reached (sent to no number), failed (refused by the service or not sent)",
            "worker",
        ),
        Metric(
            "gate.refused",
            "counter",
            "campaigns",
            (*_SEND, "gate"),
            ("conn_id", "gate"),
            "a gate refuses a campaign, by gate (max_cost, max_filtered_ratio, min_credits_after)",
            "worker",
        ),
        # Simulations.
        Metric(
            "simulate.credits",
            "counter",
            "credits",
            _SEND,
            ("conn_id",),
            "a simulation (SmsSimulateOperator): the credits the campaign would cost",
            "worker",
        ),
        Metric(
            "simulate.numbers",
            "counter",
            "numbers",
            _SEND,
            ("conn_id",),
            "a simulation: the numbers the campaign would be sent to",
            "worker",
        ),
        # Notifications (SmsNotifier).
        Metric(
            "notifier.sent",
            "counter",
            "notifications",
            ("conn_id", "pushtype"),
            ("conn_id",),
            "a notification reached at least one number",
            "worker",
        ),
        Metric(
            "notifier.not_delivered",
            "counter",
            "notifications",
            ("conn_id", "pushtype", "reason"),
            ("conn_id", "reason"),
            "a notification reached nobody, by reason (filtered, flood when the anti-flood alone filtered "
            "it, refused, unreachable, maybe_sent, invalid, error)",
            "worker",
        ),
        Metric(
            "notifier.fallback",
            "counter",
            "notifications",
            ("conn_id", "outcome"),
            ("conn_id", "outcome"),
            "a notification that reached nobody is handed to the fallback notifier (outcome: sent, "
            "failed, none when no fallback is set)",
            "worker",
        ),
        Metric(
            "notifier.folded",
            "counter",
            "notifications",
            ("conn_id",),
            ("conn_id",),
            "an alert held for one or more of its numbers, to be carried by the next alert to them after "
            "the fold interval",
            "worker",
        ),
        # Waits: the sensors, in their task. A deferred wait's trigger (in the triggerer) puts its polls in
        # the event it ends with, and the sensor counts them when it resumes: each wait is counted once, by
        # its task, in every mode, whatever the triggerer's metrics set-up.
        Metric(
            "wait.polls",
            "counter",
            "polls",
            _WAIT,
            ("conn_id", "sensor"),
            "each poll of a wait (sensor: webhook, npai, delivery_reports), failed ones too; a deferred "
            "wait's when it resumes (polls before a triggerer restart are not counted)",
            "worker",
        ),
        Metric(
            "wait.timeouts",
            "counter",
            "waits",
            (*_WAIT, "reason"),
            ("conn_id", "sensor", "reason"),
            "a wait ended by time, by reason: timeout (the sensor's timeout: the task fails, or is skipped "
            "with soft_fail) or deadline (a delivery wait's deadline came before its share: it returns the "
            "counts known)",
            "worker",
        ),
        Metric(
            "delivery.reports",
            "counter",
            "numbers",
            ("conn_id", "dag_id", "task_id", "status"),
            ("conn_id", "status"),
            "a delivery wait ends: the campaign's messages by latest status (the service's status names in "
            "snake case, e.g. delivered, not_delivered, expired; other for an undocumented status; no_report "
            "for messages sent that have no report yet)",
            "worker",
        ),
        Metric(
            "delivery.delivered_share",
            "gauge",
            "ratio 0-1",
            ("conn_id", "dag_id", "task_id"),
            ("conn_id",),
            "a delivery wait ends: the share of the messages sent (the wait's expected) whose latest status "
            "is delivered",
            "worker",
        ),
        Metric(
            "npai.found",
            "counter",
            "numbers",
            ("conn_id", "dag_id", "task_id"),
            ("conn_id",),
            "an NPAI wait ends with enough entries: the distinct numbers among the entries it returns",
            "worker",
        ),
        # The API server: the delivery-report receiver, its flusher, the campaigns indexer. Each call of the
        # receiver is counted once: stored, duplicate or refused (their sum is the calls received).
        Metric(
            "receiver.stored",
            "counter",
            "reports",
            ("conn_id",),
            ("conn_id",),
            "each commit of the receiver: the new reports it stored (each call answered 200 after it)",
            "API server",
        ),
        Metric(
            "receiver.duplicates",
            "counter",
            "reports",
            ("conn_id",),
            ("conn_id",),
            "each commit of the receiver: the reports it held already, posted again (answered 200, "
            "stored once)",
            "API server",
        ),
        Metric(
            "receiver.refused",
            "counter",
            "calls",
            ("conn_id", "reason"),
            ("reason",),
            "a call of the receiver refused, by reason ("
            + ", ".join(RECEIVER_REFUSALS)
            + "); conn_id is set once the name is known to receive reports",
            "API server",
        ),
        Metric(
            "flusher.asset_events",
            "counter",
            "asset events",
            ("conn_id",),
            ("conn_id",),
            "the flusher commits a batch of stored reports with its asset event (a batch of a connection "
            "whose asset no DAG schedules on makes none)",
            "API server",
        ),
        Metric(
            "flusher.lag",
            "timer",
            "milliseconds",
            ("conn_id",),
            ("conn_id",),
            "a look of the flusher that makes batches: how long the oldest report it put in one had waited "
            "since it was stored",
            "API server",
        ),
        Metric(
            "indexer.copied",
            "counter",
            "campaigns",
            (),
            (),
            "a look of the campaigns indexer: the campaigns it added or brought up to date (committed)",
            "API server",
        ),
        Metric(
            "indexer.left_out",
            "counter",
            "records",
            ("reason",),
            ("reason",),
            "the campaigns indexer leaves a campaign record out, once per record, by reason (unsigned, "
            "connection_unreadable, other_connection)",
            "API server",
        ),
    )
}


def _check(metric: Metric) -> None:
    names = [metric.full_name + "".join(f".{'x' * 40}" for _ in metric.in_name)]
    if not NAME_RULE.match(metric.full_name) or len(names[0]) > MAX_NAME:
        raise ValueError(f"metric {metric.full_name!r} breaks Airflow's rule for a name")
    if not set(metric.in_name) <= set(metric.tags):
        raise ValueError(f"metric {metric.full_name!r} embeds a tag it does not have")


for _metric in METRICS.values():
    _check(_metric)


@functools.cache
def _stats() -> Any:
    # Imported when first used (DAG files import modules that import this one), and looked up once:
    # common-compat tries the module of each Airflow version in turn.
    from airflow.providers.common.compat.sdk import Stats

    return Stats


@functools.cache
def _names_with_tags() -> bool:
    """Whether to send the plain-StatsD names too: Airflow's ``[metrics] legacy_names_on`` (3.2 and
    later; earlier Airflow always sends its own)."""
    from airflow.providers.common.compat.sdk import conf

    return bool(conf.getboolean("metrics", "legacy_names_on", fallback=True))


def _name_part(value: object) -> str:
    return _NOT_IN_NAME.sub("_", str(value))[:40] or "_"


def _emit(method: str, name: str, value: float, tags: Mapping[str, object]) -> None:
    try:
        metric = METRICS[name]
        tag_values = {tag: str(tags[tag]) for tag in metric.tags if tags.get(tag) is not None}
        stats = _stats()
        send = getattr(stats, method)
        send(metric.full_name, value, tags=tag_values)
        if metric.in_name and _names_with_tags():
            embedded = ".".join(_name_part(tags.get(tag, "none")) for tag in metric.in_name)
            send(f"{metric.full_name}.{embedded}", value)
    except Exception as exc:
        # A metric never costs a send: whatever goes wrong here is dropped.
        log.debug("Metric %s not sent: %s", name, exc)


def count(name: str, value: int = 1, /, **tags: object) -> None:
    """Add ``value`` to the counter ``sms.<name>`` (a name of :data:`METRICS`); never raises."""
    if value:
        _emit("incr", name, value, tags)


def gauge(name: str, value: float, /, **tags: object) -> None:
    """Set the gauge ``sms.<name>`` to ``value``; never raises."""
    _emit("gauge", name, value, tags)


def timing(name: str, seconds: float, /, **tags: object) -> None:
    """Record ``seconds`` (sent in milliseconds) on the timer ``sms.<name>``; never raises."""
    _emit("timing", name, seconds * 1000.0, tags)


def task_tags(ti: Any, **tags: object) -> dict[str, object]:
    """``tags`` with the DAG and task ids of the task instance ``ti`` (None: outside a task)."""
    if ti is not None:
        tags.update(dag_id=ti.dag_id, task_id=ti.task_id)
    return tags


def send_answer(result: CampaignResult, **tags: object) -> None:
    """The figures of one answered send (a batch of a campaign, or a notification): numbers, sent,
    filtered by reason, credits spent and left, one batch."""
    count("send.batches", 1, **tags)
    count("send.numbers", result.total, **tags)
    count("send.sent", result.sent, **tags)
    for reason in FILTER_REASONS:
        count("send.filtered", getattr(result, reason), reason=reason, **tags)
    count("send.credits_spent", result.cost, **tags)
    gauge("credits_left", result.credits, **tags)
