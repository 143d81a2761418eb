"""What the sensors wait for, decided the same way in every mode (poke, reschedule, deferrable).

Not public API: the sensors and the triggers are. :func:`webhook_ready`, :class:`NpaiFilter` and
:class:`DeliveryWait` are shared by the sensors' ``poke`` and the async triggers, so this module sits
beside both packages rather than in either; what a trigger tells its sensor is
:mod:`airflow_provider_sms._trigger_events`. The sensors import this module when a task runs, not
when a DAG file is parsed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from airflow_provider_sms._task_arguments import check_final_share, check_min_entries
from airflow_provider_sms.delay import parse_instant
from airflow_provider_sms.exceptions import SmsError, SmsValidationError
from airflow_provider_sms.phone_numbers import normalize_number

if TYPE_CHECKING:
    import pendulum

    from airflow_provider_sms._trigger_events import NpaiMatches
    from airflow_provider_sms.delivery_reports.summary import DeliverySummary
    from airflow_provider_sms.models import NpaiEntry, NpaiList, Webhook

# Upper bounds of the cost of looking at one entry, rounded up so that an estimate never runs short:
# grouping it and the plain checks, and the read of its date (pendulum's parse) for a ``since`` filter.
ENTRY_CHECK_SECONDS = 0.1e-6
DATE_READ_SECONDS = 25e-6


def webhook_ready(webhook: Webhook, expected_status: str, require_healthy: bool) -> bool:
    """True when the webhook shows ``expected_status`` (and, with ``require_healthy``, a 2xx last call).

    :param webhook: the record read from GET /webhook/:id.
    :param expected_status: the status to wait for, e.g. ``live`` (compared without case).
    :param require_healthy: also require ``last_http_code`` to be 2xx (the receiver answers).
    """
    if webhook.status.strip().lower() != expected_status.strip().lower():
        return False
    code = webhook.last_http_code
    return not require_healthy or (code is not None and 200 <= code < 300)


@dataclass(frozen=True)
class NpaiFilter:
    """Which NPAI entries the NPAI sensor waits for; built with :meth:`build`, which checks the input.

    :param campaign_id: only entries produced by this campaign (the ``ticket`` of a send).
    :param destinations: only these numbers (normalized to international digits).
    :param since: only entries dated at or after this instant (entry dates are Europe/Paris).
    :param min_entries: how many matching entries end the wait.
    """

    campaign_id: int | None = None
    destinations: frozenset[str] | None = None
    since: pendulum.DateTime | None = None
    min_entries: int = 1

    @classmethod
    def build(
        cls,
        campaign_id: int | str | None = None,
        destinations: str | int | Iterable[str | int] | None = None,
        since: object = None,
        min_entries: int = 1,
    ) -> NpaiFilter:
        """Check and normalize the sensor's arguments, raising SmsValidationError that names the field.

        :param campaign_id: an int or a string of digits (templates render the send's ticket as text).
        :param destinations: a number or a list of numbers, in any form ``normalize_number`` accepts.
        :param since: a timezone-aware datetime, an ISO-8601 string with offset or ``Y-m-d H:i:s``
            (read as Europe/Paris); past instants are the usual case.
        :param min_entries: an integer of at least 1.
        """
        return cls(
            campaign_id=_campaign_id(campaign_id),
            destinations=_destinations(destinations),
            since=None if since is None or since == "" else parse_instant(since, field="since"),
            min_entries=check_min_entries(min_entries),
        )

    def matching(self, npai: NpaiList) -> list[NpaiEntry]:
        """The entries of ``npai`` that pass every filter, in the service's order.

        Dates are compared as instants, so ``since`` is right across the DST changes; an entry
        whose date cannot be read as a Paris time does not match a ``since`` filter.
        """
        matches = []
        for entry in npai.entries if self.campaign_id is None else npai.of_campaign(self.campaign_id):
            if self.destinations is not None and entry.destination not in self.destinations:
                continue
            # The date is only parsed for entries that passed the cheap filters.
            if self.since is not None and not _dated_from(entry, self.since):
                continue
            matches.append(entry)
        return matches

    def seconds(self, npai: NpaiList) -> float:
        """An estimate of how long :meth:`matching` takes on ``npai``, to choose where to run it.

        It looks at every entry while the list is not grouped by campaign yet (grouping it does),
        then only at the campaign's; with ``since``, each of those may have its date read.
        """
        if self.campaign_id is not None and npai.grouped_by_campaign:
            candidates = len(npai.of_campaign(self.campaign_id))
        else:
            candidates = len(npai.entries)
        return candidates * (DATE_READ_SECONDS if self.since is not None else ENTRY_CHECK_SECONDS)

    def describe(self) -> str:
        """The filters in words, for logs."""
        parts = [f"at least {self.min_entries} NPAI entr{'y' if self.min_entries == 1 else 'ies'}"]
        if self.campaign_id is not None:
            parts.append(f"of campaign {self.campaign_id}")
        if self.destinations is not None:
            parts.append(f"for {len(self.destinations)} destination(s)")
        if self.since is not None:
            parts.append(f"dated from {self.since.to_iso8601_string()}")
        return " ".join(parts)

    def to_kwargs(self) -> dict[str, Any]:
        """Plain values that :meth:`build` turns back into an equal filter (trigger serialization)."""
        return {
            "campaign_id": self.campaign_id,
            "destinations": sorted(self.destinations) if self.destinations is not None else None,
            "since": self.since.isoformat() if self.since is not None else None,
            "min_entries": self.min_entries,
        }


def npai_result(entries: list[NpaiEntry]) -> NpaiMatches:
    """What the NPAI sensor returns (XCom): the matching entries, their count and their numbers."""
    return {
        "count": len(entries),
        "destinations": sorted({entry.destination for entry in entries}),
        "entries": [entry.model_dump(mode="json") for entry in entries],
    }


def _dated_from(entry: NpaiEntry, since: pendulum.DateTime) -> bool:
    try:
        # Compare timestamps: two datetimes of the same zone compare by wall clock, ignoring `fold`,
        # so 02:30 CEST would count as later than 02:15 CET on the night the clocks go back.
        return entry.paris_date.timestamp() >= since.timestamp()
    except ValueError:  # SmsValidationError included: a date that is no Paris time matches no `since`
        return False


def _campaign_id(value: object) -> int | None:
    if value is None or value == "":
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    raise SmsValidationError.for_value(
        "campaign_id", value, "must be a campaign's id, an integer (the ticket of a send)"
    )


def _destinations(value: object) -> frozenset[str] | None:
    if value is None:
        return None
    items = [value] if isinstance(value, (str, int)) else value
    if not isinstance(items, Iterable):
        raise SmsValidationError.for_value(
            "destinations", value, "must be a telephone number or a list of them"
        )
    numbers = set()
    for index, item in enumerate(items):
        try:
            numbers.add(normalize_number(item))
        except ValueError as exc:
            message = f"destinations[{index}]: {exc}"
            raise SmsValidationError.for_field(f"destinations[{index}]", message) from None
    if not numbers:
        message = "destinations: an empty list matches nothing; give numbers, or None for any number"
        raise SmsValidationError.for_field("destinations", message)
    return frozenset(numbers)


@dataclass(frozen=True)
class DeliveryWait:
    """What the delivery-reports sensor and trigger wait for, checked once.

    :param campaign_ids: the campaigns (tickets) whose messages are counted.
    :param expected: how many messages were sent (the share's denominator).
    :param min_final_share: the share of ``expected`` with a final status that ends the wait.
    :param delivery_at: when the SMS go out (the send's ``delivery_at``: its delay, or when it was
        sent); None when only campaign ids were given.
    :param sent_at: when the campaign was sent (the send's ``sent_at``), returned as ``counted_from``;
        None when only campaign ids were given.
    """

    campaign_ids: tuple[int, ...]
    expected: int
    min_final_share: float
    delivery_at: pendulum.DateTime | None = None
    sent_at: pendulum.DateTime | None = None

    @classmethod
    def build(
        cls, campaign: object, expected: object, min_final_share: object, *, sent_at: object = None
    ) -> DeliveryWait:
        """Check the (rendered) arguments; SmsValidationError names the one to fix.

        :param campaign: a send's result (its ``tickets``, ``sent``, ``delivery_at`` and ``sent_at``
            are read), a campaign id, or a list of them.
        :param expected: the number of messages; taken from the send's result when None.
        :param sent_at: when the campaign was sent, when ``campaign`` is not the send's result (the
            trigger's rebuilt wait).
        """
        delivery_at = None
        if isinstance(campaign, Mapping):
            ids: object = campaign.get("tickets") or [campaign.get("ticket")]
            if expected is None:
                expected = campaign.get("sent")
            if campaign.get("delivery_at") is not None:
                delivery_at = parse_instant(campaign["delivery_at"], field="campaign['delivery_at']")
            sent_at = campaign.get("sent_at", sent_at)
        else:
            ids = [campaign] if isinstance(campaign, (str, int)) else campaign
        if not isinstance(ids, Iterable) or isinstance(ids, (str, bytes)):
            ids = [ids]
        try:
            campaign_ids = tuple(cid for cid in map(_campaign_id, ids) if cid is not None)
        except SmsValidationError:
            campaign_ids = ()
        if not campaign_ids:
            raise SmsValidationError.for_value(
                "campaign", campaign, "give the send's result (send.output), a campaign id or a list of them"
            )
        if isinstance(expected, str) and expected.strip().isdigit():
            expected = int(expected)
        if isinstance(expected, bool) or not isinstance(expected, int) or expected < 0:
            raise SmsValidationError.for_value(
                "expected", expected, "give the number of messages sent (the send's result has it as 'sent')"
            )
        # In UTC, as the send's result gives it.
        field = "campaign['sent_at']" if isinstance(campaign, Mapping) else "sent_at"
        sent = None if sent_at is None else parse_instant(sent_at, field=field).in_tz("UTC")
        return cls(campaign_ids, expected, check_final_share(min_final_share), delivery_at, sent)

    def reached(self, summary: DeliverySummary) -> bool:
        """Whether enough messages have a final status."""
        return summary.final_share(self.expected) >= self.min_final_share

    def describe(self, summary: DeliverySummary) -> str:
        """One log line: where the campaign stands."""
        statuses = ", ".join(f"{name} {count}" for name, count in sorted(summary.by_status.items())) or "none"
        return (
            f"campaign(s) {', '.join(map(str, self.campaign_ids))}: {summary.final} of {self.expected} "
            f"messages have a final status ({summary.final_share(self.expected):.1%}, "
            f"{self.min_final_share:.0%} needed); reports by status: {statuses}"
        )

    @staticmethod
    def unread_at_deadline(deadline: datetime, problem: Exception) -> SmsError | None:
        """The error that ends a wait whose deadline passed while the receiver could not be read, or None
        before the deadline: a receiver that keeps answering "not yet" does not stretch the deadline.

        :param deadline: when the wait ends (aware).
        :param problem: the last read's error (a connection error, 429 or 5xx).
        """
        if datetime.now(timezone.utc) < deadline:
            return None
        return SmsError(
            f"The deadline {deadline.isoformat()} passed while the delivery-report receiver could not be "
            f"read ({problem}): the counts are unknown. The reports it stored are kept; a retry of this "
            "task reads them."
        )

    @staticmethod
    def refusals_note(summary: DeliverySummary) -> str | None:
        """Why reports may not arrive: what the receiver refused for the connection in the last hour,
        by reason, with the latest one and what to do; None when it refused nothing."""
        from airflow_provider_sms.delivery_reports.summary import REFUSAL_ADVICE, REFUSAL_REASONS

        if not summary.refusals:
            return None
        reasons = "; ".join(
            f"{refused.count} {REFUSAL_REASONS.get(refused.reason, refused.reason)}, latest at "
            f"{refused.last_at.astimezone(timezone.utc):%H:%M:%S} UTC ({refused.last_detail}): "
            f"{REFUSAL_ADVICE.get(refused.reason, 'see the API server log')}"
            for refused in summary.refusals
        )
        total = sum(refused.count for refused in summary.refusals)
        return f"the receiver refused {total} call(s) for this connection in the last hour: {reasons}"

    def to_kwargs(self) -> dict[str, Any]:
        """The arguments that rebuild this wait (in the trigger)."""
        return {
            "campaign_ids": list(self.campaign_ids),
            "expected": self.expected,
            "min_final_share": self.min_final_share,
            "sent_at": self.sent_at.isoformat() if self.sent_at is not None else None,
        }

    def result(self, summary: DeliverySummary, *, complete: bool) -> dict[str, Any]:
        """The sensor's return value (XCom): counts by status and the numbers that failed."""
        return {
            "campaign_ids": list(self.campaign_ids),
            "expected": self.expected,
            "reported": summary.reported,
            "final": summary.final,
            "final_share": round(summary.final_share(self.expected), 4),
            "min_final_share": self.min_final_share,
            "counted_from": self.sent_at.isoformat() if self.sent_at is not None else None,
            "complete": complete,
            "by_status": summary.by_status,
            "failed_count": summary.failed_count,
            "failed": summary.failed or [],
        }
