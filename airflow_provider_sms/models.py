"""The single definition of each resource of the SMS service (pydantic v2).

Request models (:class:`Message`, :class:`Recipient`, :class:`ListRef`) validate what a DAG author
gives, with errors that name the field and the rule. Response models (:class:`CampaignResult`,
:class:`Webhook`, :class:`NpaiList`) are what the hook returns; :class:`DeliveryReport` is what the
service posts to a DLR webhook. The sandbox uses the same models.

The service's resources only: checking many recipients at once is
:mod:`airflow_provider_sms.recipients`, the number rule :mod:`airflow_provider_sms.phone_numbers`,
the provider's own summary of delivery reports
:mod:`airflow_provider_sms.delivery_reports.summary`.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any, Literal

import pendulum
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from airflow_provider_sms._validation import quoted
from airflow_provider_sms.delay import paris_wall_time, to_api_delay
from airflow_provider_sms.exceptions import SmsValidationError
from airflow_provider_sms.phone_numbers import normalize_number
from airflow_provider_sms.short_urls import marker_mismatch

PushType = Literal["alert", "marketing"]

# Characters XML 1.0 cannot carry: such text could never reach the service in XML format.
_XML_FORBIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
# Characters no link may hold: whitespace, C0/C1 controls and the XML non-characters.
_URL_FORBIDDEN = re.compile("[\\s\x00-\x1f\x7f-\x9f\ufffe\uffff]")
_SENDER = re.compile(r"[A-Za-z0-9 ]{1,11}|[0-9]{1,15}")

# What the table of delivery reports (``sms_delivery_report``) holds, in one place for the table and the
# models: a report that could not be stored is refused as invalid (the service is told it will never be
# taken) rather than answered "try again later" forever.
DESTINATION_MAX_LENGTH = 32
# Also what a recipient's gsmsmsid may be: the service echoes it as the report's message_id.
MESSAGE_ID_MAX_LENGTH = 128
COUNTRY_CODE_MAX_LENGTH = 8
# What a report's country code is: two capital letters (ISO 3166-1 alpha-2), as the service sends them.
_COUNTRY_CODE = re.compile("[A-Z]{2}")
# status is a 32-bit INTEGER, campaign_id a BIGINT.
STATUS_MAX = 2**31 - 1
CAMPAIGN_ID_MAX = 2**63 - 1
# reported_at, in UTC: MySQL's TIMESTAMP, the narrowest column of the databases Airflow supports, holds
# 1970-01-01 00:00:01 to 2038-01-19 03:14:07; whole days inside that range, both ends included.
REPORT_DATE_MIN = dt.datetime(1970, 1, 2, tzinfo=dt.timezone.utc)
REPORT_DATE_MAX = dt.datetime(2038, 1, 18, 23, 59, 59, 999999, tzinfo=dt.timezone.utc)


class SmsModel(BaseModel):
    """Base of every model: unknown fields from the service are ignored, aliases or names accepted."""

    # defer_build: the validators are built on first use, not at import (DAG files import these models
    # through the operators, and a DAG file's parse pays for nothing its tasks do not run).
    model_config = ConfigDict(extra="ignore", populate_by_name=True, defer_build=True)


def _check_xml_safe(value: str, field: str) -> str:
    found = _XML_FORBIDDEN.search(value)
    if found:
        raise ValueError(
            f"{field} contains the control character {found.group()!r} at position {found.start()}, "
            "which an SMS cannot carry"
        )
    return value


class Message(SmsModel):
    """The ``message`` of a campaign.

    :param text: the SMS text; each ``<-short->`` marker is replaced by a short URL from ``links``.
    :param pushtype: ``alert`` or ``marketing``; required when sending with short URLs.
    :param delay: when to send; any form accepted by :func:`airflow_provider_sms.delay.parse_delay`,
        stored as the API's ``Y-m-d H:i:s`` in Europe/Paris.
    :param sender: custom sender: up to 11 letters/digits, or up to 15 digits.
    :param links: the URLs to shorten, one per marker, in order.
    """

    text: str = Field(min_length=1)
    pushtype: PushType | None = None
    delay: str | None = None
    sender: str | None = None
    links: list[str] = Field(default_factory=list)

    @field_validator("text")
    @classmethod
    def _text_is_sendable(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("text is blank")
        return _check_xml_safe(value, "text")

    @field_validator("delay", mode="before")
    @classmethod
    def _delay_to_paris(cls, value: object) -> str | None:
        try:
            return to_api_delay(value)
        except SmsValidationError as exc:
            raise ValueError(str(exc).removeprefix("delay=")) from None

    @field_validator("sender")
    @classmethod
    def _sender_shape(cls, value: str | None) -> str | None:
        # A blank sender is refused: XML would carry it as no sender at all, JSON as spaces.
        if value is not None and (not _SENDER.fullmatch(value) or not value.strip()):
            raise ValueError(
                "sender must be 1 to 11 letters, digits or spaces (not only spaces), "
                "or a number of up to 15 digits"
            )
        return value

    @field_validator("links")
    @classmethod
    def _links_are_urls(cls, value: list[str]) -> list[str]:
        for index, link in enumerate(value):
            if not link.startswith(("http://", "https://")) or len(link) < 11 or " " in link:
                raise ValueError(f"links[{index}]={quoted(link)} is not an absolute http(s) URL")
            # Whitespace and control characters are not URL characters (percent-encode them), and
            # XML could not carry most of them: refused before any request.
            found = _URL_FORBIDDEN.search(link)
            if found:
                raise ValueError(
                    f"links[{index}]={quoted(link)} contains {found.group()!r} at position {found.start()}; "
                    "percent-encode whitespace and control characters in URLs"
                )
        return value

    @model_validator(mode="after")
    def _markers_match_links(self) -> Message:
        problem = marker_mismatch(self.text, len(self.links))
        if problem:
            raise ValueError(problem)
        return self

    def check_sendable(self) -> None:
        """Rules that apply to a real send (not to a simulation): short URLs need a pushtype."""
        if self.links and self.pushtype is None:
            message = "message.pushtype is required when sending with short URLs: use 'alert' or 'marketing'"
            raise SmsValidationError.for_field("message.pushtype", message)


class Recipient(SmsModel):
    """A telephone number, with an optional ``gsmsmsid`` linking it to its delivery report (/send only).

    :param value: international format without sign; ``+33 6 12 34 56 78`` is normalized to
        ``33612345678``, a national number such as ``0612345678`` is refused.
    :param gsmsmsid: caller's id for the delivery report, at most :data:`MESSAGE_ID_MAX_LENGTH`
        characters.
    """

    # Its errors' text shows no input (it holds a number); the number rule's own refusals mask it. An
    # instance handed in is checked again: one built with model_construct or changed since skipped the rules.
    model_config = ConfigDict(hide_input_in_errors=True, revalidate_instances="always")

    value: str
    gsmsmsid: str | None = None

    @field_validator("value", mode="before")
    @classmethod
    def _normalize(cls, value: object) -> str:
        return normalize_number(value)

    @field_validator("gsmsmsid", mode="before")
    @classmethod
    def _gsmsmsid_text(cls, value: object) -> str | None:
        if value is None:
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str):
            raise ValueError("gsmsmsid must be a string")
        if len(value) > MESSAGE_ID_MAX_LENGTH:
            raise ValueError(
                f"{len(value)} characters, more than the {MESSAGE_ID_MAX_LENGTH} allowed (the service "
                "echoes a gsmsmsid as its delivery report's message_id, which is stored in that many)"
            )
        # Sent as an XML attribute in XML format: control characters would break the body.
        return _check_xml_safe(value, "gsmsmsid")


class ListRef(SmsModel):
    """A stored recipient list, by integer id."""

    value: int

    @field_validator("value", mode="before")
    @classmethod
    def _integer_id(cls, value: object) -> int:
        # Templated fields render to strings, so "12" is accepted; "abc", 1.5 and True are not.
        if isinstance(value, bool):
            raise ValueError(f"list id must be an integer, got {quoted(value)}")
        # Negative ids are refused like "-1" is: the two forms must agree (XML carries ids as text).
        if isinstance(value, int) and value >= 0:
            return value
        if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
            return int(value.strip())
        raise ValueError(f"list id must be an integer (0 or more), got {quoted(value)}")


class CampaignResult(SmsModel):
    """Result of a send or a simulation: cost, credits left and counts; ``ticket`` on sends only."""

    status: int
    message: str
    ticket: str | None = None
    cost: int
    credits: int
    total: int
    sent: int
    blacklisted: int = 0
    duplicated: int = 0
    npai: int = 0
    invalid: int = 0
    not_allowed: int = 0
    flood: int = 0
    country_limit: int = 0

    @model_serializer(mode="wrap")
    def _no_ticket_on_simulations(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A simulation's answer has no ticket at all (not a null one): the wire shape, both ways.
        data: dict[str, Any] = handler(self)
        if self.ticket is None:
            data.pop("ticket", None)
        return data

    @field_validator("ticket", mode="before")
    @classmethod
    def _ticket_text(cls, value: object) -> object:
        return str(value) if isinstance(value, int) else value

    @property
    def filtered(self) -> int:
        """Numbers removed by the service's filters, all reasons together."""
        return (
            self.blacklisted
            + self.duplicated
            + self.npai
            + self.invalid
            + self.not_allowed
            + self.flood
            + self.country_limit
        )

    def summary(self) -> str:
        """One line a human can read in a task log."""
        reasons = ", ".join(f"{name} {getattr(self, name)}" for name in FILTER_FIELDS if getattr(self, name))
        ticket = f"ticket {self.ticket}, " if self.ticket else ""
        return (
            f"{ticket}cost {self.cost} credits, {self.credits} credits left, "
            f"{self.sent}/{self.total} numbers sent, {self.filtered} filtered"
            + (f" ({reasons})" if reasons else "")
        )


FILTER_FIELDS: tuple[str, ...] = (
    "blacklisted",
    "duplicated",
    "npai",
    "invalid",
    "not_allowed",
    "flood",
    "country_limit",
)


class Webhook(SmsModel):
    """A webhook record; ``type`` ``DLR`` is a delivery report."""

    webhook_id: str
    type: str
    url: str
    status: str
    signature: str | None = None
    last_http_code: int | None = None

    @field_validator("webhook_id", mode="before")
    @classmethod
    def _id_text(cls, value: object) -> object:
        return str(value) if isinstance(value, int) else value


class WebhookResponse(SmsModel):
    """Envelope of GET /webhook/:id."""

    status: int
    message: str
    webhook: Webhook | None = None


class NpaiEntry(SmsModel):
    """A number that no longer reaches anyone (an NPAI entry).

    ``date`` is ``Y-m-d H:i:s``; its time zone is not documented and is read as Europe/Paris.
    """

    model_config = ConfigDict(hide_input_in_errors=True)  # its input holds a number

    id: str
    destination: str
    date: str
    info1: str = ""
    info2: str = ""
    info3: str = ""
    info4: str = ""
    user_information: list[Any] = Field(default_factory=list)
    campaign_id: int | None = None
    batch_id: Any = None

    @field_validator("id", mode="before")
    @classmethod
    def _id_text(cls, value: object) -> object:
        return str(value) if isinstance(value, int) else value

    @field_validator("info1", "info2", "info3", "info4", mode="before")
    @classmethod
    def _empty_is_text(cls, value: object) -> object:
        # Free text fields: an empty XML element (no text) is the "" that JSON carries.
        return "" if value is None else value

    @field_validator("user_information", mode="before")
    @classmethod
    def _empty_is_list(cls, value: object) -> object:
        return [] if value is None or value == "" else value

    @property
    def paris_date(self) -> pendulum.DateTime:
        """``date`` as an aware datetime in Europe/Paris (DST overlap: first occurrence)."""
        parsed = pendulum.parse(self.date, exact=True)
        if not isinstance(parsed, pendulum.DateTime):  # a bare date, time or duration
            raise SmsValidationError.for_value(
                "npai.date", self.date, "not a date and time; expected 'Y-m-d H:i:s'"
            )
        return paris_wall_time(parsed.naive(), field="npai.date")


class NpaiList(SmsModel):
    """The NPAI list wrapper: ``list`` of entries and the record counts."""

    model_config = ConfigDict(hide_input_in_errors=True)  # its entries hold numbers

    status: int
    message: str
    entries: list[NpaiEntry] = Field(default_factory=list, alias="list")
    total_records: int | None = Field(default=None, alias="totalRecords")
    total_display_records: int | None = Field(default=None, alias="totalDisplayRecords")
    # The entries list last grouped by campaign, and its groups: a cache, not content.
    _by_campaign: tuple[list[NpaiEntry], dict[int | None, list[NpaiEntry]]] | None = PrivateAttr(default=None)

    def of_campaign(self, campaign_id: int) -> list[NpaiEntry]:
        """The entries of one campaign, in the service's order (grouped once per list, on first use).

        A list read once is shared by every NPAI sensor of a triggerer: each then looks at its own
        campaign's entries instead of all of them. Grouped again when ``entries`` is another list (a
        copy with other entries); changing the list in place after the first call is not seen.
        """
        grouping = self._by_campaign
        if grouping is None or grouping[0] is not self.entries:
            grouped: dict[int | None, list[NpaiEntry]] = {}
            for entry in self.entries:
                grouped.setdefault(entry.campaign_id, []).append(entry)
            grouping = self._by_campaign = (self.entries, grouped)
        return grouping[1].get(campaign_id, [])

    @property
    def grouped_by_campaign(self) -> bool:
        """Whether :meth:`of_campaign` has grouped these entries already (its next calls are quick)."""
        return self._by_campaign is not None and self._by_campaign[0] is self.entries

    def __eq__(self, other: object) -> bool:
        # Fields only: pydantic would also compare the grouping, which is a cache.
        if not isinstance(other, NpaiList):
            return NotImplemented
        return type(self) is type(other) and self.__dict__ == other.__dict__


# Statuses of a delivery report, as the service numbers them (8 and 10 are not used).
DELIVERY_STATUSES: dict[int, str] = {
    0: "not sent",
    1: "sent",
    2: "not delivered",
    3: "delivered",
    4: "not allowed",
    5: "invalid destination",
    6: "invalid sender",
    7: "route not available",
    9: "rejected",
    11: "network error",
    12: "expired",
}
# "sent" means handed to the carrier, its fate still unknown; every other status is the last word.
PENDING_DELIVERY_STATUSES = frozenset({1})
# The statuses that count as delivered; every other final status is a failure.
DELIVERED_STATUSES = frozenset({3})


class DeliveryReport(SmsModel):
    """One delivery report (DLR): the fate of one message, as the service posts it to a DLR webhook.

    Every field is bounded by what the table of delivery reports holds (the ``*_MAX*`` and
    ``REPORT_DATE_*`` constants above): a report that could not be stored is invalid.

    :param date: when the status was reached, ISO 8601 with an offset (a naive date is refused), from
        :data:`REPORT_DATE_MIN` to :data:`REPORT_DATE_MAX` once in UTC.
    :param status: the delivery status (:data:`DELIVERY_STATUSES`; an undocumented one is kept), 0 to
        :data:`STATUS_MAX`.
    :param destination: the telephone number, digits only.
    :param message_id: the ``gsmsmsid`` given for this number on POST /send, if one was; at most
        :data:`MESSAGE_ID_MAX_LENGTH` characters.
    :param campaign_id: the campaign's id (the send's ``ticket``), 1 to :data:`CAMPAIGN_ID_MAX`.
    :param country_code: the destination's country as real reports carry it, two capital letters
        (ISO 3166-1 alpha-2, e.g. ``FR``); absent or empty when the service does not say. Anything else
        is refused: the value is shown on the campaigns page and in spreadsheets (``failed.csv``).
    """

    model_config = ConfigDict(hide_input_in_errors=True)  # its input holds a number

    date: dt.datetime
    status: int = Field(ge=0, le=STATUS_MAX)
    # normalize_number returns at most 15 digits; the bound ties the model to the column all the same.
    destination: str = Field(max_length=DESTINATION_MAX_LENGTH)
    message_id: str | None = Field(default=None, max_length=MESSAGE_ID_MAX_LENGTH)
    campaign_id: int = Field(ge=1, le=CAMPAIGN_ID_MAX)
    country_code: str | None = Field(default=None, max_length=COUNTRY_CODE_MAX_LENGTH)

    @field_validator("date")
    @classmethod
    def _aware_and_storable(cls, value: dt.datetime) -> dt.datetime:
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError("the date has no offset; delivery reports carry ISO 8601 dates with one")
        try:
            utc = value.astimezone(dt.timezone.utc)
        except OverflowError:  # e.g. 0001-01-01T00:00:00+01:00: before year 1 once in UTC
            utc = None
        if utc is None or not REPORT_DATE_MIN <= utc <= REPORT_DATE_MAX:
            raise ValueError(
                f"the date must be from {REPORT_DATE_MIN:%Y-%m-%d} to {REPORT_DATE_MAX:%Y-%m-%d} in UTC "
                f"(what every database Airflow supports stores), got {value.isoformat()}"
            )
        # Kept with its own offset: the report's digest (what makes a retry a duplicate) is taken from it.
        return value

    @field_validator("destination", mode="before")
    @classmethod
    def _number(cls, value: object) -> str:
        return normalize_number(value)

    @field_validator("message_id", mode="before")
    @classmethod
    def _message_id_text(cls, value: object) -> object:
        return str(value) if isinstance(value, int) else (value or None)

    @field_validator("message_id", "country_code")
    @classmethod
    def _storable_text(cls, value: str | None) -> str | None:
        # PostgreSQL's text columns cannot hold NUL: such a report would fail its insert every time.
        position = -1 if value is None else value.find("\x00")
        if position >= 0:
            raise ValueError(
                f"contains the NUL character at position {position}, which PostgreSQL cannot store"
            )
        return value

    @field_validator("country_code")
    @classmethod
    def _two_letters(cls, value: str | None) -> str | None:
        # After _storable_text: a NUL is named as such. The value is not quoted (the input is hidden).
        if value and not _COUNTRY_CODE.fullmatch(value):
            raise ValueError(
                "must be two capital letters A-Z (an ISO 3166-1 alpha-2 code, e.g. FR), or empty"
            )
        return value

    @property
    def status_name(self) -> str:
        """The status in words, e.g. ``delivered`` (``status 8`` for one the service does not document)."""
        return DELIVERY_STATUSES.get(self.status, f"status {self.status}")

    @property
    def final(self) -> bool:
        """Whether the status is the message's last word (anything but ``sent``)."""
        return self.status not in PENDING_DELIVERY_STATUSES


class ApiEnvelope(SmsModel):
    """What every answer of the service has in common; used to read error bodies."""

    status: int | None = None
    message: str | None = None
    details: Any = None
    error: Any = None
