"""Sensors of the SMS service: a DLR webhook's status, the NPAI (unreachable numbers) list, and the
delivery reports of a campaign (as the provider's receiver on the API server has stored them).

All run in ``mode="poke"``, ``mode="reschedule"`` or with ``deferrable=True`` (the wait moves to
an async trigger in the triggerer), and decide with the same conditions in every mode. Waiting
cannot fix an unknown webhook, a rejected token or bad input: those fail at once. A transient read
error (connection, 429, 5xx, after the hook's own retries) only means "not yet": the sensor's
``timeout`` still bounds the wait. In deferrable mode the trigger is given the instant the timeout
falls at (counted from the task's start, as Airflow counts it in poke mode) and ends itself there, so
the wait ends on time in the triggerer and under ``airflow dags test`` alike.

DAG files import this module, so it imports only :mod:`airflow_provider_sms._task_arguments`; the
exceptions, the hook, the models, the wait conditions and the triggers are imported when a task runs.
Each sensor's ``execute_complete`` reads the event of its trigger, whose shapes are
:mod:`airflow_provider_sms._trigger_events`.

The wait metrics (:mod:`airflow_provider_sms.metrics`: ``wait.*``, ``delivery.*``, ``npai.found``) are
emitted by the sensor, in its task, in every mode: a deferred wait's trigger reports its polls in its
event, and the sensor counts them when it resumes.
"""

from __future__ import annotations

import abc
from collections import Counter
from datetime import datetime, timedelta, timezone
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.providers.common.compat.sdk import (
    AirflowFailException,
    AirflowNotFoundException,
    AirflowSensorTimeout,
    AirflowSkipException,
    BaseSensorOperator,
    PokeReturnValue,
    conf,
)

from airflow_provider_sms import DEFAULT_CONN_ID
from airflow_provider_sms._task_arguments import (
    check_final_share,
    check_min_entries,
    check_wait_has_count,
    check_webhook_id,
    invalid_value,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from airflow.providers.common.compat.sdk import Context

    from airflow_provider_sms._trigger_events import (
        DeliveryReportsCounted,
        NpaiFound,
        NpaiMatches,
        WaitFailed,
        WaitTimedOut,
        WebhookReady,
    )
    from airflow_provider_sms._wait_conditions import DeliveryWait, NpaiFilter
    from airflow_provider_sms.delivery_reports.client import SummaryRequest
    from airflow_provider_sms.delivery_reports.summary import DeliverySummary
    from airflow_provider_sms.exceptions import SmsError, SmsTransportError
    from airflow_provider_sms.hooks.sms import SmsHook
    from airflow_provider_sms.triggers.sms import (
        SmsDeliveryReportsTrigger,
        SmsNpaiTrigger,
        SmsPollingTrigger,
        SmsWebhookTrigger,
    )

# Airflow's own deferral timeout is only the backstop for a trigger that cannot report (no triggerer
# running): it falls this long after the trigger's own timeout event, which every Airflow version turns
# into the poke-mode failure or skip (3.0 fails a soft_fail sensor on its own deferral timeout).
DEFERRAL_TIMEOUT_GRACE = timedelta(minutes=1)
# A delivery status as the delivery.reports metric tags it: the service's names in snake case (the summary
# names an undocumented status by its number, which the tag does not carry: its values stay few).
UNDOCUMENTED_STATUS = "other"
NO_REPORT = "no_report"


class SmsBaseSensor(BaseSensorOperator):
    """What the SMS sensors share: the hook, the deferral and the handling of errors.

    :param sms_conn_id: the Airflow connection of type ``sms``.
    :param deferrable: hand the wait to an async trigger (frees the worker slot). The trigger polls
        every ``poke_interval`` (doubling it with ``exponential_backoff``, up to ``max_wait``) and
        ends itself at ``timeout`` after the task's start: the task then fails with
        ``AirflowSensorTimeout``, or is skipped with ``soft_fail``, as in poke mode. This holds under
        ``airflow dags test`` too, whose inline trigger loop ignores Airflow's deferral timeout.
    """

    template_fields: Sequence[str] = ("sms_conn_id",)
    # The sensor's name in the ``sensor`` tag of the wait metrics.
    metric_sensor: ClassVar[str]

    def __init__(
        self,
        *,
        sms_conn_id: str = DEFAULT_CONN_ID,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.sms_conn_id = sms_conn_id
        self.deferrable = deferrable
        self._started: datetime | None = None

    @cached_property
    def hook(self) -> SmsHook:
        """The client of the service (one per task try)."""
        from airflow_provider_sms.hooks.sms import SmsHook

        return SmsHook(self.sms_conn_id)

    @abc.abstractmethod
    def check_inputs(self) -> None:
        """Validate the (rendered) arguments before any request; SmsValidationError names the field."""

    @abc.abstractmethod
    def check_once(self) -> PokeReturnValue:
        """One look at the service (poke and reschedule modes)."""

    @abc.abstractmethod
    def trigger(self, timeout_at: datetime) -> SmsPollingTrigger:
        """The trigger that waits in deferrable mode.

        :param timeout_at: when the sensor's timeout ends the wait.
        """

    def _polling_kwargs(self, timeout_at: datetime) -> dict[str, Any]:
        max_wait = self.max_wait.total_seconds() if self.max_wait else None
        return {
            "sms_conn_id": self.sms_conn_id,
            "poke_interval": self.poke_interval,
            "exponential_backoff": self.exponential_backoff,
            "max_wait": max_wait,
            "timeout_at": timeout_at.isoformat(),
        }

    def metric_tags(self) -> dict[str, str]:
        """The tags of this wait's metrics: its connection, DAG, task and sensor (nothing personal)."""
        return {
            "conn_id": self.sms_conn_id,
            "dag_id": self.dag_id,
            "task_id": self.task_id,
            "sensor": self.metric_sensor,
        }

    def ends_at_timeout(self, exc: AirflowSensorTimeout | AirflowSkipException) -> bool:
        """Whether ``exc``, raised by Airflow's poke loop, ends the wait at its timeout: an
        AirflowSensorTimeout, or with ``soft_fail`` the skip the loop raises instead (every other skip
        it raises comes from an error, its cause; the sensors' pokes raise none).

        :param exc: what the poke loop raised.
        """
        return isinstance(exc, AirflowSensorTimeout) or (self.soft_fail and exc.__cause__ is None)

    def resumed(
        self, event: WebhookReady | NpaiFound | DeliveryReportsCounted | WaitFailed | WaitTimedOut
    ) -> None:
        """Count what the trigger's event reports: the polls of the deferred wait, and its timeout.

        :param event: what the trigger yielded (an event of an earlier version has no poll count).
        """
        from airflow_provider_sms import metrics

        tags = self.metric_tags()
        metrics.count("wait.polls", event.get("polls", 0), **tags)
        if event["status"] == "timeout":
            metrics.count("wait.timeouts", reason="timeout", **tags)

    def first_start(self, context: Context) -> datetime:
        """When the wait started, as Airflow counts the sensor's timeout: the task's start, or in
        reschedule mode, where each poke is a new start, the first poke's.

        :param context: the task's context (its ``ti``; none in tests that call ``execute`` directly).
        """
        ti = context.get("ti")
        first = ti.get_first_reschedule_date(context) if self.reschedule and ti is not None else None
        started: datetime | None = first or getattr(ti, "start_date", None)
        return started or datetime.now(timezone.utc)

    def execute(self, context: Context) -> Any:
        """Check the input, then wait here (poke/reschedule) or in the triggerer (deferrable)."""
        from airflow_provider_sms.exceptions import SmsValidationError

        self._started = self.first_start(context)
        try:
            self.check_inputs()
        except SmsValidationError as exc:
            raise AirflowFailException(str(exc)) from None
        if not self.deferrable:
            try:
                return super().execute(context)
            except (AirflowSensorTimeout, AirflowSkipException) as exc:
                if self.ends_at_timeout(exc):
                    from airflow_provider_sms import metrics

                    metrics.count("wait.timeouts", reason="timeout", **self.metric_tags())
                raise
        # No first poke on the worker: in deferrable mode all the waiting happens in the triggerer.
        self.defer(
            trigger=self.trigger(self._started + timedelta(seconds=self.timeout)),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout) + DEFERRAL_TIMEOUT_GRACE,
        )
        return None

    def poke(self, context: Context) -> PokeReturnValue:
        """One check; failures that waiting cannot cure end the task at once."""
        from airflow_provider_sms import metrics
        from airflow_provider_sms.exceptions import (
            SmsAuthError,
            SmsNotFoundError,
            SmsTransportError,
            SmsValidationError,
        )

        metrics.count("wait.polls", **self.metric_tags())
        try:
            return self.check_once()
        except (SmsNotFoundError, SmsAuthError, SmsValidationError, AirflowNotFoundException) as exc:
            # Unknown webhook, rejected token, bad input or connection: waiting cannot fix them.
            raise AirflowFailException(str(exc)) from None
        except SmsTransportError as exc:
            ended = self.ended_unread(exc)
            if ended is not None:
                raise ended from None
            self.log.warning("could not read the service (%s); poking again later", exc)
            return PokeReturnValue(is_done=False)

    def ended_unread(self, problem: SmsTransportError) -> SmsError | None:
        """The error that ends the wait now that the service could not be read (``problem``), or None to
        poke again (the base: always again, until the sensor's timeout)."""
        return None

    def wait_failure(self, event: WaitFailed | WaitTimedOut) -> Exception:
        """The error that ends the task for the trigger's error or timeout event.

        A timeout fails the task with ``AirflowSensorTimeout``, or skips it with ``soft_fail``, as in
        poke mode; an error waiting cannot cure fails it at once.

        :param event: what the trigger yielded (an old trigger's event may lack some keys).
        """
        from airflow_provider_sms._trigger_events import FATAL_ERRORS
        from airflow_provider_sms.exceptions import SmsError

        message = event.get("message") or f"the trigger ended with {event!r}"
        if event["status"] == "timeout":
            # Logged as well: newer Airflow versions replace a soft_fail skip's message with their own.
            self.log.warning("%s", message)
            return AirflowSkipException(message) if self.soft_fail else AirflowSensorTimeout(message)
        if event.get("error") in FATAL_ERRORS:
            return AirflowFailException(message)
        return SmsError(message)


class SmsWebhookSensor(SmsBaseSensor):
    """Wait until a webhook (e.g. the DLR receiver) shows ``expected_status``; return its record.

    Typical use: before a campaign that uses ``gsmsmsid``, make sure the delivery-report receiver is
    live and answering. An unknown webhook id fails at once rather than poking until the timeout.

    :param webhook_id: the webhook's id (templated).
    :param expected_status: the status to wait for (``live``; compared without case).
    :param require_healthy: also wait until the service's last call to the webhook got a 2xx answer.
    :param sms_conn_id: the Airflow connection of type ``sms``.
    :param deferrable: wait in the triggerer (see :class:`SmsBaseSensor`).

    Returns (XCom) the webhook record as a dict: ``webhook_id``, ``type``, ``url``, ``status``,
    ``signature``, ``last_http_code``.
    """

    template_fields: Sequence[str] = (*SmsBaseSensor.template_fields, "webhook_id", "expected_status")
    metric_sensor: ClassVar[str] = "webhook"

    def __init__(
        self,
        *,
        webhook_id: str | int,
        expected_status: str = "live",
        require_healthy: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.webhook_id = webhook_id
        self.expected_status = expected_status
        self.require_healthy = require_healthy

    def check_inputs(self) -> None:
        """The webhook id must be one (no empty id, no slash) and the expected status non-blank."""
        check_webhook_id(self.webhook_id)
        if not isinstance(self.expected_status, str) or not self.expected_status.strip():
            raise invalid_value(
                "expected_status", self.expected_status, "give the status to wait for, e.g. 'live'"
            )

    def check_once(self) -> PokeReturnValue:
        """Read the webhook and compare it with the expected state."""
        from airflow_provider_sms._wait_conditions import webhook_ready

        webhook = self.hook.get_webhook(self.webhook_id)
        done = webhook_ready(webhook, self.expected_status, self.require_healthy)
        self.log.info(
            "webhook %s: status %s, last HTTP code %s (%s)",
            webhook.webhook_id,
            webhook.status,
            webhook.last_http_code,
            "ready"
            if done
            else f"waiting for {self.expected_status}"
            + (" and a 2xx last call" if self.require_healthy else ""),
        )
        return PokeReturnValue(is_done=done, xcom_value=webhook.model_dump(mode="json") if done else None)

    def trigger(self, timeout_at: datetime) -> SmsWebhookTrigger:
        """The async trigger polling GET /webhook/:id.

        :param timeout_at: when the sensor's timeout ends the wait.
        """
        from airflow_provider_sms.triggers.sms import SmsWebhookTrigger

        return SmsWebhookTrigger(
            webhook_id=str(self.webhook_id),
            expected_status=self.expected_status,
            require_healthy=self.require_healthy,
            **self._polling_kwargs(timeout_at),
        )

    def execute_complete(
        self, context: Context, event: WebhookReady | WaitFailed | WaitTimedOut
    ) -> dict[str, Any]:
        """The webhook record of the trigger's success event (XCom), or the failure or timeout it reports."""
        self.resumed(event)
        if event["status"] == "success":
            return event["webhook"]
        raise self.wait_failure(event)


class SmsNpaiSensor(SmsBaseSensor):
    """Wait until the NPAI list holds ``min_entries`` entries matching the filters; return them.

    Use it after a campaign to clean a CRM of the numbers that no longer reach anyone. Every page of
    the list is read (``start``/``length``, see :class:`airflow_provider_sms.hooks.sms.NpaiPages`).
    Entry dates (``Y-m-d H:i:s``) are read as Europe/Paris and compared with ``since`` as instants,
    so the filter is right across the DST changes.

    :param campaign_id: only entries produced by this campaign, e.g. the ``ticket`` of a send
        (templated; a string of digits is accepted).
    :param destinations: only these numbers (templated); ``+33 6 12 34 56 78`` style is normalized.
    :param since: only entries dated at or after this instant (templated): a timezone-aware
        datetime, an ISO-8601 string with offset (``{{ data_interval_start }}``) or ``Y-m-d H:i:s``
        read as Europe/Paris. Past instants are expected here.
    :param min_entries: how many matching entries end the wait (at least 1).
    :param sms_conn_id: the Airflow connection of type ``sms``.
    :param deferrable: wait in the triggerer (see :class:`SmsBaseSensor`).

    Returns (XCom) ``{"count": n, "destinations": [...], "entries": [entry dicts]}``.
    """

    template_fields: Sequence[str] = (*SmsBaseSensor.template_fields, "campaign_id", "destinations", "since")
    metric_sensor: ClassVar[str] = "npai"

    def __init__(
        self,
        *,
        campaign_id: int | str | None = None,
        destinations: str | Iterable[str] | None = None,
        since: Any = None,
        min_entries: int = 1,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.campaign_id = campaign_id
        self.destinations = destinations
        self.since = since
        self.min_entries = min_entries
        # Not templated, so checked now: a DAG with a bad value fails when it is parsed, not when it runs.
        check_min_entries(min_entries)

    @cached_property
    def npai_filter(self) -> NpaiFilter:
        """The checked filters (built from the rendered template fields)."""
        from airflow_provider_sms._wait_conditions import NpaiFilter

        return NpaiFilter.build(self.campaign_id, self.destinations, self.since, self.min_entries)

    def check_inputs(self) -> None:
        """Build the filters, so that bad input fails before the first request."""
        self.log.info("waiting for %s", self.npai_filter.describe())

    def check_once(self) -> PokeReturnValue:
        """Read the whole list and count the matching entries."""
        from airflow_provider_sms._wait_conditions import npai_result

        npai = self.hook.get_npai()
        matches = self.npai_filter.matching(npai)
        done = len(matches) >= self.npai_filter.min_entries
        self.log.info(
            "%s of %s NPAI entries match (%s needed)", len(matches), len(npai.entries), self.min_entries
        )
        return PokeReturnValue(is_done=done, xcom_value=self.found(npai_result(matches)) if done else None)

    def trigger(self, timeout_at: datetime) -> SmsNpaiTrigger:
        """The async trigger polling GET /npai.

        :param timeout_at: when the sensor's timeout ends the wait.
        """
        from airflow_provider_sms.triggers.sms import SmsNpaiTrigger

        return SmsNpaiTrigger(**self.npai_filter.to_kwargs(), **self._polling_kwargs(timeout_at))

    def execute_complete(self, context: Context, event: NpaiFound | WaitFailed | WaitTimedOut) -> NpaiMatches:
        """The matching entries of the trigger's success event (XCom), or the failure or timeout it
        reports."""
        self.resumed(event)
        if event["status"] == "success":
            return self.found(event["npai"])
        raise self.wait_failure(event)

    def found(self, result: NpaiMatches) -> NpaiMatches:
        """``result``, the wait's return value, counted in the ``npai.found`` metric (its distinct numbers).

        :param result: the matching entries.
        """
        from airflow_provider_sms import metrics

        metrics.count("npai.found", len(result["destinations"]), **self.metric_tags())
        return result


class SmsDeliveryReportsSensor(SmsBaseSensor):
    """Wait until enough of a campaign's messages have a final delivery status, or a deadline passes.

    The delivery reports are those the provider's receiver on the Airflow API server has stored (see
    the "Delivery reports" page: the service must post them there). Each message counts once, at its
    latest status; ``sent`` is not final, every other status is. When the share is reached, or when
    ``deadline`` has passed (``complete`` is then False), the sensor returns the counts by status and
    the numbers whose final status is not ``delivered``, for the clean-up step. The service's
    campaign id is unique and is its campaign's key: every report of it counts.

    :param campaign: the send's result (``send.output``: its ``tickets``, ``sent``, ``sent_at`` and
        ``delivery_at`` are used), or a campaign id, or a list of them (templated).
    :param expected: how many messages were sent (templated); taken from the send's result when None.
    :param min_final_share: the share of ``expected`` messages with a final status that ends the wait
        (templated; above 0, at most 1).
    :param deadline: how long to wait at most, counted from when the campaign goes out (the send's
        ``delivery_at``: its delay, or when it was sent) when ``campaign`` is the send's result, else
        from the task's start (its first poke in reschedule mode); then the counts known are returned.
    :param sms_conn_id: the Airflow connection of type ``sms`` whose reports are meant.
    :param deferrable: wait in the triggerer (see :class:`SmsBaseSensor`).

    Returns (XCom) ``{"campaign_ids", "expected", "reported", "final", "final_share",
    "min_final_share", "counted_from", "complete", "by_status", "failed_count", "failed"}``
    (``counted_from``: the send's ``sent_at``, or None given bare ids).
    """

    template_fields: Sequence[str] = (
        *SmsBaseSensor.template_fields,
        "campaign",
        "expected",
        "min_final_share",
    )
    # A send upstream on the same connection checks, before its first request, that the delivery-report
    # receiver answers (the wait cannot work without it).
    needs_delivery_receiver: ClassVar[bool] = True
    metric_sensor: ClassVar[str] = "delivery_reports"

    def __init__(
        self,
        *,
        campaign: Any,
        expected: int | str | None = None,
        min_final_share: float | str = 0.95,
        deadline: timedelta = timedelta(hours=6),
        **kwargs: Any,
    ) -> None:
        check_wait_has_count(campaign, expected)  # before the task joins its DAG
        super().__init__(**kwargs)
        self.campaign = campaign
        self.expected = expected
        self.min_final_share = min_final_share
        if not isinstance(deadline, timedelta) or deadline <= timedelta(0):
            raise invalid_value("deadline", deadline, "must be a positive timedelta")
        self.deadline = deadline
        # Not templated when literal: checked now, so a DAG with a bad value fails when it is parsed.
        if not isinstance(min_final_share, str):
            check_final_share(min_final_share)
        self._deadline_at: datetime | None = None

    @cached_property
    def wait(self) -> DeliveryWait:
        """The checked arguments (built from the rendered template fields)."""
        from airflow_provider_sms._wait_conditions import DeliveryWait

        return DeliveryWait.build(self.campaign, self.expected, self.min_final_share)

    def check_inputs(self) -> None:
        """Build the wait (bad input fails before the first request) and fix the deadline."""
        wait = self.wait
        counted_from = wait.delivery_at or self._started or datetime.now(timezone.utc)
        self._deadline_at = counted_from + self.deadline
        self.log.info(
            "waiting for %.0f%% of %s message(s) of campaign(s) %s to have a final status, until %s "
            "(%s after %s)",
            wait.min_final_share * 100,
            wait.expected,
            ", ".join(map(str, wait.campaign_ids)),
            self._deadline_at.isoformat(),
            self.deadline,
            f"the campaign goes out, {counted_from.isoformat()}" if wait.delivery_at else "the task started",
        )

    def summary_request(self, *, with_failed: bool = False) -> SummaryRequest:
        """Where the receiver's summary is, and the key to read it (both from the connection)."""
        from airflow_provider_sms.delivery_reports.client import ReceiverAccess, SummaryRequest
        from airflow_provider_sms.delivery_reports.settings import SUMMARY_PATH

        access = ReceiverAccess.of(self.hook)
        return SummaryRequest(access.url(SUMMARY_PATH), access.key, self.wait.campaign_ids, with_failed)

    def ended_unread(self, problem: SmsTransportError) -> SmsError | None:
        """Past the deadline, a receiver that cannot be read ends the wait (the counts are unknown)."""
        if self._deadline_at is None:
            return None
        return self.wait.unread_at_deadline(self._deadline_at, problem)

    def check_once(self) -> PokeReturnValue:
        """Read the summary; done when the share is reached or the deadline has passed."""
        from airflow_provider_sms.delivery_reports.client import fetch_summary

        summary = fetch_summary(self.summary_request())
        self.log.info("%s", self.wait.describe(summary))
        complete = self.wait.reached(summary)
        if not complete and (note := self.wait.refusals_note(summary)):
            self.log.warning("%s", note)
        if not complete and (self._deadline_at is None or datetime.now(timezone.utc) < self._deadline_at):
            return PokeReturnValue(is_done=False)
        return PokeReturnValue(is_done=True, xcom_value=self.finish(complete))

    def trigger(self, timeout_at: datetime) -> SmsDeliveryReportsTrigger:
        """The async trigger polling the receiver's summary.

        :param timeout_at: when the sensor's timeout ends the wait (``deadline`` returns the counts
            known when it comes first).
        """
        from airflow_provider_sms.triggers.sms import SmsDeliveryReportsTrigger

        if self._deadline_at is None:
            raise RuntimeError("the deadline is set when the sensor starts, before it defers")
        return SmsDeliveryReportsTrigger(
            summary_url=self.summary_request().url,
            deadline=self._deadline_at.isoformat(),
            **self.wait.to_kwargs(),
            **self._polling_kwargs(timeout_at),
        )

    def execute_complete(
        self, context: Context, event: DeliveryReportsCounted | WaitFailed | WaitTimedOut
    ) -> dict[str, Any]:
        """The counts, with the failed numbers read now (the trigger's event does not carry them).

        The failure or timeout the trigger's other events report ends the task instead.
        """
        self.resumed(event)
        if event["status"] == "success":
            return self.finish(bool(event.get("complete")))
        raise self.wait_failure(event)

    def finish(self, complete: bool) -> dict[str, Any]:
        """The return value: the latest counts and the numbers that failed."""
        from airflow_provider_sms.delivery_reports.client import fetch_summary

        summary = fetch_summary(self.summary_request(with_failed=True))
        if complete:
            self.log.info("done: %s", self.wait.describe(summary))
        else:
            self.log.warning("deadline passed before the share was reached: %s", self.wait.describe(summary))
        if summary.failed_count:
            from airflow_provider_sms.phone_numbers import mask_number

            examples = ", ".join(map(mask_number, (summary.failed or [])[:5]))
            self.log.info(
                "%s message(s) failed, e.g. %s (in full in the XCom)", summary.failed_count, examples
            )
        self.count_delivery(summary, complete)
        return self.wait.result(summary, complete=complete)

    def count_delivery(self, summary: DeliverySummary, complete: bool) -> None:
        """Count where the campaign stands as the wait ends: its messages by status (``no_report`` for
        those sent without a report), the share delivered, and a deadline that came first.

        :param summary: the latest counts.
        :param complete: whether the share of final statuses was reached.
        """
        from airflow_provider_sms import metrics
        from airflow_provider_sms.models import DELIVERED_STATUSES, DELIVERY_STATUSES

        tags = self.metric_tags()
        tag_of = {name: name.replace(" ", "_") for name in DELIVERY_STATUSES.values()}
        by_status: Counter[str] = Counter()
        for name, messages in summary.by_status.items():
            by_status[tag_of.get(name, UNDOCUMENTED_STATUS)] += messages
        by_status[NO_REPORT] = max(self.wait.expected - summary.reported, 0)
        for status, messages in by_status.items():
            metrics.count("delivery.reports", messages, status=status, **tags)
        if self.wait.expected > 0:
            delivered = sum(
                summary.by_status.get(DELIVERY_STATUSES[status], 0) for status in DELIVERED_STATUSES
            )
            metrics.gauge("delivery.delivered_share", min(1.0, delivered / self.wait.expected), **tags)
        if not complete:
            metrics.count("wait.timeouts", reason="deadline", **tags)
