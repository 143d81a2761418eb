"""The provider's own shapes of delivery reports, not the service's: a campaign's summary, and the
reports of one asset event (a batch).

The service never sends it: the receiver on the Airflow API server computes it from the reports it
stored (:mod:`.store`) and serves it, and the delivery-reports sensor and trigger read it
(:mod:`.client`). So it lives with the delivery reports rather than in :mod:`airflow_provider_sms.models`,
which holds the service's resources only, and so do its bodies (JSON), written by the receiver and read
by the client: the service's wire (:mod:`airflow_provider_sms.codec`) does not know them.
"""

from __future__ import annotations

import datetime as dt
from typing import TypeVar

from pydantic import ValidationError, field_validator

from airflow_provider_sms.codec import quote_body
from airflow_provider_sms.exceptions import SmsApiError
from airflow_provider_sms.models import DeliveryReport, SmsModel

_Body = TypeVar("_Body", bound=SmsModel)
# Why the receiver refused a report, as counted for a connection (:class:`RefusalCount`).
REFUSAL_REASONS: dict[str, str] = {
    "caller_not_allowed": "the caller's address is not allowed (dlr_allowed_callers)",
    "bad_signature": "the signature header is missing or is not the webhook's",
    "signature_unavailable": "the webhook's signature could not be read from the service",
    "invalid_report": "the body is not a valid report (too large, not JSON, or a field out of bounds)",
    "store_unavailable": "the database could not store it (answered 503; the service retries)",
}
# What to do about each, for the wait's log.
REFUSAL_ADVICE: dict[str, str] = {
    "caller_not_allowed": "add the service's address to the connection's dlr_allowed_callers",
    "bad_signature": "the connection's dlr_webhook_id must name the webhook the service posts to",
    "signature_unavailable": "the API server must reach the service with the connection's token",
    "invalid_report": "the API server's log has each refused body's reason",
    "store_unavailable": "the API server's log says why the database refused; the service retries",
}


class RefusalCount(SmsModel):
    """How many calls for a connection the receiver refused for one reason in the last hour.

    :param reason: one of :data:`REFUSAL_REASONS`.
    :param count: how many calls.
    :param last_at: when the latest was refused.
    :param last_detail: what that one was answered, e.g. ``calls from 10.0.0.7 are not allowed ...``.
    """

    reason: str
    count: int
    last_at: dt.datetime
    last_detail: str


class DeliverySummary(SmsModel):
    """Where a campaign's messages stand, from the delivery reports received so far.

    Each message (a destination of the campaign) counts once, at its latest status: a final status
    wins over ``sent``, then the latest date.

    :param campaign_ids: the campaigns (tickets) summed up; a batched send has one per batch.
    :param reported: messages with at least one report.
    :param by_status: messages by status name, e.g. ``{"delivered": 950, "sent": 30, "expired": 20}``.
    :param final: messages whose status is final (anything but ``sent``).
    :param failed_count: messages whose final status is not ``delivered``.
    :param failed: those messages' numbers in number order, when asked for (else None): one page.
    :param failed_next: where the next page of failed numbers starts (None: this was the last): an
        opaque position, the id of a report of the page's last number, never the number itself (it
        travels in a URL, and the API server's access log keeps URLs).
    :param refusals: what the receiver refused for this connection in the last hour, by reason.
    """

    campaign_ids: list[int]
    reported: int
    by_status: dict[str, int]
    final: int
    failed_count: int
    failed: list[str] | None = None
    failed_next: int | None = None
    refusals: list[RefusalCount] = []

    def final_share(self, expected: int) -> float:
        """The share of ``expected`` messages that have a final status (1.0 when none are expected)."""
        return 1.0 if expected <= 0 else min(1.0, self.final / expected)


class StoredReport(DeliveryReport):
    """A report as stored by the receiver: its date in UTC, and its id (the order reports arrived in).

    Its country code is read back as the table holds it: a row stored before the receiver took only
    two-letter codes must not make its batch unreadable.

    :param id: the report's id in the receiver's table.
    """

    id: int

    @field_validator("country_code")
    @classmethod
    def _two_letters(cls, value: str | None) -> str | None:
        return value


class BatchPage(SmsModel):
    """A page of the reports of one batch (one asset event), by id.

    :param reports: the reports.
    :param next_after_id: the ``after_id`` of the next page (None: this was the last).
    """

    reports: list[StoredReport]
    next_after_id: int | None = None


def encode_delivery_summary(summary: DeliverySummary) -> bytes:
    """The body of the receiver's campaign summary (JSON): what the delivery-reports wait polls."""
    return summary.model_dump_json().encode()


def decode_delivery_summary(body: bytes) -> DeliverySummary:
    """Read a campaign summary from the receiver; an unreadable one raises SmsApiError with its start."""
    return _read(DeliverySummary, body, "summary")


def encode_batch_page(page: BatchPage) -> bytes:
    """The body of the receiver's page of a batch's reports (JSON): what ``reports_from_events`` reads."""
    return page.model_dump_json().encode()


def decode_batch_page(body: bytes) -> BatchPage:
    """Read a page of a batch's reports from the receiver; an unreadable one raises SmsApiError."""
    return _read(BatchPage, body, "batch")


def _read(model: type[_Body], body: bytes, what: str) -> _Body:
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        raise SmsApiError(
            None,
            f"the delivery-reports {what} is not readable ({exc.error_count()} error(s))",
            body=quote_body(body),
        ) from None
