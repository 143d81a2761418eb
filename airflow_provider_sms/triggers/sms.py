"""Async triggers behind the sensors' ``deferrable=True``: they poll from the triggerer.

A triggerer restart runs ``run()`` again from the start, so triggers only ever read: the service
through :class:`~airflow_provider_sms.hooks.sms.SmsAsyncHook` (GET /webhook/:id, GET /npai), or the
delivery-report receiver's summary on the Airflow API server; nothing that sends can run here.
Transient read errors (connection, 429, 5xx) are retried inside the poll loop; an unknown id, a
rejected token or bad input end the wait with an error event.

Each trigger ends itself at its sensor's timeout (``timeout_at``, an instant fixed when the sensor
started), with a timeout event: so the wait ends on time wherever the trigger runs, in the triggerer
(after a restart too: the instant is serialized) or inline under ``airflow dags test``, which ignores
the deferral's timeout.

The conditions they wait for are those of the sensors' ``poke``
(:mod:`airflow_provider_sms._wait_conditions`), so every mode decides the same way; the one event
each trigger yields has a shape of :mod:`airflow_provider_sms._trigger_events`, which the sensors'
``execute_complete`` read.
"""

from __future__ import annotations

import abc
import asyncio
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, TypeAlias

from airflow.providers.common.compat.sdk import AirflowNotFoundException
from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_sms import DEFAULT_CONN_ID
from airflow_provider_sms._off_loop import QUICK, off_loop
from airflow_provider_sms._trigger_events import (
    DeliveryReportsCounted,
    NpaiFound,
    WaitFailed,
    WaitTimedOut,
    WebhookReady,
    wait_failed,
)
from airflow_provider_sms._wait_conditions import DeliveryWait, NpaiFilter, npai_result, webhook_ready
from airflow_provider_sms.delay import parse_instant
from airflow_provider_sms.exceptions import SmsError, SmsTransportError
from airflow_provider_sms.hooks.sms import SmsAsyncHook

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable

# What a poll returns when the wait is over: the success event of one of the triggers below.
SuccessEvent: TypeAlias = WebhookReady | NpaiFound | DeliveryReportsCounted


class SmsPollingTrigger(BaseTrigger):
    """Base of the SMS triggers: reads the connection, then polls until :meth:`poll` has an answer.

    :param sms_conn_id: the Airflow connection of type ``sms``.
    :param poke_interval: seconds between polls.
    :param exponential_backoff: double the wait after each poll that did not succeed.
    :param max_wait: longest wait between polls when backing off (seconds; no cap when ``None``).
    :param timeout_at: when the sensor's timeout ends the wait (ISO 8601 with offset); ``None`` (a
        trigger serialized by an earlier version) leaves it to Airflow's deferral timeout.
    """

    def __init__(
        self,
        *,
        sms_conn_id: str = DEFAULT_CONN_ID,
        poke_interval: float = 60.0,
        exponential_backoff: bool = False,
        max_wait: float | None = None,
        timeout_at: str | None = None,
    ) -> None:
        # BaseTrigger.__init__ has no annotations; untyped_calls_exclude does not reach calls via super().
        super().__init__()  # type: ignore[no-untyped-call]
        self.sms_conn_id = sms_conn_id
        self.poke_interval = float(poke_interval)
        self.exponential_backoff = exponential_backoff
        self.max_wait = max_wait
        self.timeout_at = None if timeout_at is None else parse_instant(timeout_at, field="timeout_at")

    def _base_kwargs(self) -> dict[str, Any]:
        return {
            "sms_conn_id": self.sms_conn_id,
            "poke_interval": self.poke_interval,
            "exponential_backoff": self.exponential_backoff,
            "max_wait": self.max_wait,
            "timeout_at": None if self.timeout_at is None else self.timeout_at.in_tz("UTC").isoformat(),
        }

    @abc.abstractmethod
    async def poll(self, hook: SmsAsyncHook) -> SuccessEvent | None:
        """One look at the service: the success event when the wait is over, else ``None``."""

    @abc.abstractmethod
    def waiting_for(self) -> str:
        """What the wait is for, in words (the timeout event's message)."""

    def ended_unread(self, problem: SmsTransportError) -> SmsError | None:
        """The error that ends the wait now that the service could not be read (``problem``), or None to
        poll again (the base: always again, until the sensor's timeout)."""
        return None

    def next_wait(self, wait: float) -> float | None:
        """``wait``, cut to the time left before the sensor's timeout; ``None`` once the timeout has passed.

        :param wait: the seconds the poll loop would wait before its next poll.
        """
        if self.timeout_at is None:
            return wait
        left = self.timeout_at.timestamp() - datetime.now(timezone.utc).timestamp()
        return min(wait, left) if left > 0 else None

    def timed_out(self) -> WaitTimedOut:
        """The timeout event, naming what was still awaited and when the timeout fell."""
        if self.timeout_at is None:
            raise RuntimeError("only a trigger given timeout_at times out by itself")
        at = self.timeout_at.in_tz("UTC").isoformat()
        message = (
            f"Sensor has timed out: still waiting for {self.waiting_for()} at {at}, the end of the "
            "sensor's timeout (counted from the task's start)"
        )
        return {"status": "timeout", "timeout_at": at, "message": message}

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Poll until success, a failure that waiting cannot cure or the sensor's timeout; yield one event.

        Each poll is followed by a wait cut to the time left, so the last poll falls at the timeout. The
        event carries how many polls were made: the sensor counts them in its metrics when it resumes,
        in its task (the triggerer's own metrics set-up varies with Airflow's version).
        """
        polls = 0
        async with SmsAsyncHook(self.sms_conn_id) as hook:
            try:
                await hook.get_settings()
            except (SmsError, AirflowNotFoundException) as exc:
                self.log.error("%s", exc)
                yield polled(wait_failed(exc), polls)
                return
            interval = self.poke_interval
            while True:
                problem = None
                polls += 1
                try:
                    event = await self.poll(hook)
                except SmsTransportError as exc:
                    if (ended := self.ended_unread(exc)) is not None:
                        self.log.error("%s", ended)
                        yield polled(wait_failed(ended), polls)
                        return
                    # Connection errors, 429 and 5xx: the next poll retries, until the sensor's timeout.
                    problem, wait = exc, max(interval, exc.retry_after or 0.0)
                except SmsError as exc:
                    self.log.error("%s", exc)
                    yield polled(wait_failed(exc), polls)
                    return
                else:
                    if event is not None:
                        yield polled(event, polls)
                        return
                    wait = interval
                cut = self.next_wait(wait)
                if cut is None:
                    timed_out = self.timed_out()
                    self.log.warning("%s", timed_out["message"])
                    yield polled(timed_out, polls)
                    return
                if problem is not None:
                    self.log.warning("%s; polling again in %.1fs", problem, cut)
                await asyncio.sleep(cut)
                if self.exponential_backoff:
                    interval = min(interval * 2, self.max_wait or float("inf"))


def polled(event: SuccessEvent | WaitFailed | WaitTimedOut, polls: int) -> TriggerEvent:
    """The trigger event of ``event``, with the number of polls the wait made.

    :param event: the wait's one event.
    :param polls: the polls made (0 when the connection could not be read).
    """
    event["polls"] = polls
    return TriggerEvent(event)


class SmsWebhookTrigger(SmsPollingTrigger):
    """Wait until a webhook shows ``expected_status`` (GET /webhook/:id).

    :param webhook_id: the webhook's id.
    :param expected_status: the status to wait for (``live``).
    :param require_healthy: also wait for a 2xx ``last_http_code``.
    """

    def __init__(
        self,
        *,
        webhook_id: str,
        expected_status: str = "live",
        require_healthy: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.webhook_id = str(webhook_id)
        self.expected_status = expected_status
        self.require_healthy = require_healthy

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Classpath and keyword arguments that rebuild this trigger in the triggerer."""
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "webhook_id": self.webhook_id,
                "expected_status": self.expected_status,
                "require_healthy": self.require_healthy,
                **self._base_kwargs(),
            },
        )

    def waiting_for(self) -> str:
        """The webhook and the state awaited, in words."""
        healthy = " with a 2xx last call" if self.require_healthy else ""
        return f"webhook {self.webhook_id} to be {self.expected_status}{healthy}"

    async def poll(self, hook: SmsAsyncHook) -> WebhookReady | None:
        """Read the webhook; success when it is in the expected state."""
        webhook = await hook.get_webhook(self.webhook_id)
        if webhook_ready(webhook, self.expected_status, self.require_healthy):
            self.log.info(
                "webhook %s is %s (last HTTP code %s)",
                self.webhook_id,
                webhook.status,
                webhook.last_http_code,
            )
            return {"status": "success", "webhook": webhook.model_dump(mode="json")}
        self.log.info(
            "webhook %s is %s (last HTTP code %s); waiting for %s%s",
            self.webhook_id,
            webhook.status,
            webhook.last_http_code,
            self.expected_status,
            " and a 2xx last call" if self.require_healthy else "",
        )
        return None


class SmsNpaiTrigger(SmsPollingTrigger):
    """Wait until the NPAI list holds ``min_entries`` entries matching the filters (GET /npai, every page).

    :param campaign_id: only entries of this campaign.
    :param destinations: only these numbers.
    :param since: only entries dated at or after this instant (ISO-8601 with offset, or as the sensor takes).
    :param min_entries: how many matching entries end the wait.
    """

    def __init__(
        self,
        *,
        campaign_id: int | str | None = None,
        destinations: Iterable[str] | None = None,
        since: str | None = None,
        min_entries: int = 1,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.npai_filter = NpaiFilter.build(campaign_id, destinations, since, min_entries)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Classpath and keyword arguments that rebuild this trigger in the triggerer."""
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {**self.npai_filter.to_kwargs(), **self._base_kwargs()},
        )

    def waiting_for(self) -> str:
        """The NPAI entries awaited, in words."""
        return self.npai_filter.describe()

    async def poll(self, hook: SmsAsyncHook) -> NpaiFound | None:
        """Read every page of the list; success when enough entries match."""
        npai = await hook.get_npai()
        # Filtering a long list takes CPU time: off the triggerer's event loop, unless it is quick.
        quick = self.npai_filter.seconds(npai) <= QUICK
        matches = await off_loop(self.npai_filter.matching, npai, inline=quick)
        if len(matches) >= self.npai_filter.min_entries:
            self.log.info("%s matching NPAI entries found", len(matches))
            return {"status": "success", "npai": npai_result(matches)}
        self.log.info("%s of %s found; waiting", len(matches), self.npai_filter.describe())
        return None


class SmsDeliveryReportsTrigger(SmsPollingTrigger):
    """Wait until enough of a campaign's messages have a final status, or ``deadline`` passes.

    Polls the receiver's summary on the Airflow API server (not the service), with the key derived
    from the connection's access token.

    :param summary_url: the receiver's summary endpoint, as the worker that deferred reached it.
    :param campaign_ids: the campaigns (tickets) counted.
    :param expected: how many messages were sent.
    :param min_final_share: the share with a final status that ends the wait.
    :param deadline: when to stop waiting and report what is known (ISO 8601 with offset).
    :param sent_at: when the campaign was sent (the send's ``sent_at``, ISO 8601 with offset), returned
        as ``counted_from``; None given bare ids.
    """

    def __init__(
        self,
        *,
        summary_url: str,
        campaign_ids: Iterable[int],
        expected: int,
        min_final_share: float,
        deadline: str,
        sent_at: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.summary_url = summary_url
        self.wait = DeliveryWait.build(list(campaign_ids), expected, min_final_share, sent_at=sent_at)
        self.deadline = deadline

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Classpath and keyword arguments that rebuild this trigger in the triggerer."""
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "summary_url": self.summary_url,
                **self.wait.to_kwargs(),
                "deadline": self.deadline,
                **self._base_kwargs(),
            },
        )

    def waiting_for(self) -> str:
        """The share of final statuses awaited, in words."""
        campaigns = ", ".join(map(str, self.wait.campaign_ids))
        return (
            f"{self.wait.min_final_share:.0%} of {self.wait.expected} message(s) of campaign(s) {campaigns} "
            f"to have a final status (or the deadline {self.deadline})"
        )

    def ended_unread(self, problem: SmsTransportError) -> SmsError | None:
        """Past the deadline, a receiver that cannot be read ends the wait (the counts are unknown)."""
        return self.wait.unread_at_deadline(datetime.fromisoformat(self.deadline), problem)

    async def poll(self, hook: SmsAsyncHook) -> DeliveryReportsCounted | None:
        """Read the summary; success when the share is reached or the deadline has passed."""
        from airflow_provider_sms.delivery_reports.client import SummaryRequest, afetch_summary
        from airflow_provider_sms.delivery_reports.settings import read_key

        key = read_key((await hook.get_settings()).token)
        summary = await afetch_summary(SummaryRequest(self.summary_url, key, self.wait.campaign_ids))
        self.log.info("%s", self.wait.describe(summary))
        complete = self.wait.reached(summary)
        if not complete and (note := self.wait.refusals_note(summary)):
            self.log.warning("%s", note)
        if complete or datetime.now(timezone.utc) >= datetime.fromisoformat(self.deadline):
            return {"status": "success", "summary": summary.model_dump(mode="json"), "complete": complete}
        return None
