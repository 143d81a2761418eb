"""The sandbox's delivery reports: after a send, one report per number POSTed to DLR webhook "1"."""

from __future__ import annotations

import email.utils
import queue
import threading
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx
import pendulum

from airflow_provider_sms import codec
from airflow_provider_sms.delay import PARIS
from airflow_provider_sms.exceptions import SmsApiError
from airflow_provider_sms.models import DeliveryReport
from airflow_provider_sms.sandbox.state import COUNTRY_CODES, PostedReport

if TYPE_CHECKING:
    from collections.abc import Sequence

    from airflow_provider_sms.sandbox.state import DeliveryLedger, SandboxConfig, SandboxState

# The webhook delivery reports go to, and the only hosts they may go to.
DLR_WEBHOOK_ID = "1"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost")
# How long one call may take before it counts as unanswered (and is tried again).
CALL_TIMEOUT = 5.0


def post_delivery_reports(state: SandboxState, record: dict[str, Any]) -> None:
    """POST one delivery report per number sent to DLR webhook "1", loopback only, as the service does.

    Runs in threads of its own (``dlr_concurrency`` posters sharing the campaign's reports), so the
    send's answer does not wait for the receiver. Statuses are taken in turn from the state's
    ``dlr_statuses``; a report answered with anything but a 2xx (or not answered) is tried again after
    a backoff that doubles, or the answer's ``Retry-After`` when longer, both capped at
    ``dlr_max_wait``, up to ``dlr_tries`` times. Every call is counted in the state's
    :class:`~airflow_provider_sms.sandbox.state.DeliveryLedger`, and ``last_http_code`` keeps the code
    of the latest one (0: no answer).

    :param state: the account, which holds the webhook and the ledger.
    :param record: the campaign as the state recorded it (recipients, numbers sent to, ticket).
    """
    try:
        webhook = state.webhook(DLR_WEBHOOK_ID)
    except SmsApiError:
        return
    if urlsplit(webhook.url).hostname not in LOOPBACK_HOSTS or not record["sent_to"]:
        return
    headers = {"Content-Type": "application/json", "X-SMSFactor-Signature": webhook.signature or ""}
    poster = _Poster(state, webhook.url, headers)
    # The reports are made in the thread too: a send to 100,000 numbers answers without waiting for them.
    threading.Thread(
        target=poster.run,
        args=(record, state.dlr_statuses, state.dlr_tries, state.dlr_concurrency),
        name="sandbox-dlr",
        daemon=True,
    ).start()


def reports_of(record: dict[str, Any], statuses: Sequence[int]) -> list[PostedReport]:
    """The reports of a campaign, one per number sent to, statuses taken in turn.

    :param record: the campaign as the state recorded it.
    :param statuses: the statuses to give them, in turn.
    """
    sent_to = set(record["sent_to"])
    recipients = [recipient for recipient in record["recipients"] if recipient["value"] in sent_to]
    reports = []
    for index, recipient in enumerate(recipients):
        report = DeliveryReport(
            date=pendulum.now(PARIS),
            status=statuses[index % len(statuses)],
            destination=recipient["value"],
            message_id=recipient.get("gsmsmsid"),
            campaign_id=int(record["ticket"]),
            country_code=next(
                (code for prefix, code in COUNTRY_CODES.items() if recipient["value"].startswith(prefix)),
                None,
            ),
        )
        reports.append(
            PostedReport(
                codec.encode_delivery_report(report), report.campaign_id, report.destination, report.status
            )
        )
    return reports


def retry_after_seconds(value: str | None) -> float | None:
    """The wait a ``Retry-After`` header asks for (seconds, or an HTTP date); None if absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # an HTTP date is GMT; parsedate_to_datetime leaves "-0000" naive
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())


class _Poster:
    """Posts the reports of one campaign to one webhook URL, counting every call in the state's ledger."""

    def __init__(self, state: SandboxState, url: str, headers: dict[str, str]) -> None:
        self.state = state
        self.config: SandboxConfig = state.config
        # The ledger of this send: a reset replaces (and closes) it, which stops the posting.
        self.ledger: DeliveryLedger = state.dlr_ledger
        self.url = url
        self.headers = headers

    def run(self, record: dict[str, Any], statuses: Sequence[int], tries: int, concurrency: int) -> None:
        """Make the reports, then post them with ``concurrency`` posters (this thread is one of them)."""
        reports = reports_of(record, statuses)
        self.ledger.add(reports)
        waiting: queue.SimpleQueue[PostedReport] = queue.SimpleQueue()
        for report in reports:
            waiting.put(report)
        for number in range(1, min(concurrency, len(reports))):
            threading.Thread(
                target=self.post_all, args=(waiting, tries), name=f"sandbox-dlr-{number}", daemon=True
            ).start()
        self.post_all(waiting, tries)

    def post_all(self, waiting: queue.SimpleQueue[PostedReport], tries: int) -> None:
        """Take reports from ``waiting`` and post each until it is done, until none is left."""
        with httpx.Client(timeout=CALL_TIMEOUT) as client:
            while not self.ledger.closed:
                try:
                    report = waiting.get_nowait()
                except queue.Empty:
                    return
                self.post_one(client, report, tries)
                if self.config.dlr_delay:
                    time.sleep(self.config.dlr_delay)

    def post_one(self, client: httpx.Client, report: PostedReport, tries: int) -> None:
        """Post ``report`` until a 2xx or ``tries`` calls; wait between two as the service would."""
        backoff = self.config.dlr_backoff
        for attempt in range(1, max(1, tries) + 1):
            try:
                answer = client.post(self.url, content=report.body, headers=self.headers)
            except httpx.HTTPError:
                code, retry_after = 0, None
            else:
                code, retry_after = answer.status_code, retry_after_seconds(answer.headers.get("Retry-After"))
            self.ledger.record_try(report, code, retry_after is not None)
            self.state.record_webhook_call(DLR_WEBHOOK_ID, code)
            if 200 <= code < 300 or attempt >= tries or self.ledger.closed:
                break
            # Retry-After is honoured, but capped: the receiver's 30 s would make tests wait for nothing.
            time.sleep(min(max(backoff, retry_after or 0.0), self.config.dlr_max_wait))
            backoff = min(backoff * 2, self.config.dlr_max_wait)
        self.ledger.finish(report)
