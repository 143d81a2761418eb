"""The sandbox's delivery reports: after a send, one report per number POSTed to DLR webhook "1"."""

from __future__ import annotations

import threading
import time
from typing import Any
from urllib.parse import urlsplit

import httpx
import pendulum

from airflow_provider_sms import codec
from airflow_provider_sms.delay import PARIS
from airflow_provider_sms.exceptions import SmsApiError
from airflow_provider_sms.models import DeliveryReport
from airflow_provider_sms.sandbox.state import COUNTRY_CODES, SandboxState

# The webhook delivery reports go to, and the only hosts they may go to.
DLR_WEBHOOK_ID = "1"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost")


def post_delivery_reports(state: SandboxState, record: dict[str, Any]) -> None:
    """POST one delivery report per number sent to DLR webhook "1", loopback only, as the service does.

    Runs in a thread of its own, so the send's answer does not wait for the receiver. Statuses are
    taken in turn from ``SandboxConfig.dlr_statuses``; a report answered with anything but a 2xx (or
    not answered) is tried again with a doubling backoff, up to ``dlr_tries`` times; every try is
    counted and ``last_http_code`` keeps the code of the latest one (0: no answer).

    :param state: the account, which holds the webhook and counts the calls.
    :param record: the campaign as the state recorded it (recipients, numbers sent to, ticket).
    """
    try:
        webhook = state.webhook(DLR_WEBHOOK_ID)
    except SmsApiError:
        return
    if urlsplit(webhook.url).hostname not in LOOPBACK_HOSTS:
        return
    config = state.config
    statuses = state.dlr_statuses
    sent_to = set(record["sent_to"])
    recipients = [recipient for recipient in record["recipients"] if recipient["value"] in sent_to]
    reports = [
        DeliveryReport(
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
        for index, recipient in enumerate(recipients)
    ]
    if not reports:
        return
    headers = {"Content-Type": "application/json", "X-SMSFactor-Signature": webhook.signature or ""}

    def deliver() -> None:
        with httpx.Client(timeout=5) as client:
            for report in reports:
                body = codec.encode_delivery_report(report)
                wait = config.dlr_backoff
                for _ in range(max(1, state.dlr_tries)):
                    try:
                        code = client.post(webhook.url, content=body, headers=headers).status_code
                    except httpx.HTTPError:
                        code = 0
                    state.record_webhook_call(DLR_WEBHOOK_ID, code, report.model_dump(mode="json"))
                    if 200 <= code < 300:
                        break
                    time.sleep(wait)
                    wait = min(wait * 2, 5.0)
                if config.dlr_delay:
                    time.sleep(config.dlr_delay)

    threading.Thread(target=deliver, name="sandbox-dlr", daemon=True).start()
