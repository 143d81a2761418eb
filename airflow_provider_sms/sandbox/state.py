"""The sandbox's account: seeds, filtering rules, credits, faults. Per process and thread-safe.

Like the service, it refuses a ``marketing`` campaign (send or simulation) whose send time, the delay
or now, is outside the marketing window (:mod:`airflow_provider_sms.send_window`): status -7 (HTTP
400), with a message naming the rule and the next allowed time.
"""

from __future__ import annotations

import copy
import itertools
import json
import secrets
import string
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pendulum
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from airflow_provider_sms._validation import format_errors
from airflow_provider_sms.delay import API_FORMAT, PARIS
from airflow_provider_sms.exceptions import SmsApiError
from airflow_provider_sms.models import FILTER_FIELDS, CampaignResult, Message, NpaiEntry, Webhook
from airflow_provider_sms.send_window import RULE, describe, effective_send_time, next_allowed
from airflow_provider_sms.short_urls import SHORT_MARKER
from airflow_provider_sms.sms_parts import SHORT_URL_LENGTH, count_parts, has_stop_mention

if TYPE_CHECKING:
    from collections.abc import Sequence

    from airflow_provider_sms.sandbox.wire import CampaignRequest

# Short URLs are exactly SHORT_URL_LENGTH characters, the length the operators' cost estimate assumes.
SHORT_URL_BASE = "https://sms.sb/"
_SHORT_SLUG_CHARS = string.ascii_letters + string.digits
SEND_PATHS = ("/send", "/send/lists")
CAMPAIGN_PATHS = (*SEND_PATHS, "/send/simulate", "/send/lists/simulate")
# The names a fault can be scoped to (``Faults.endpoints``): GET /webhook/:id is "/webhook".
ENDPOINTS = (*CAMPAIGN_PATHS, "/webhook", "/npai")
MAX_SLOW = 120.0

# Dialling prefixes allowed by default, and the total length (country code included) a number of
# that country must have; a prefix without a length accepts any 8-15 digit number.
DEFAULT_ALLOWED_PREFIXES = ("33", "32", "41", "352", "44", "49", "34", "39", "1")
COUNTRY_LENGTHS = {"33": 11, "32": 11, "41": 11, "352": 12, "44": 12, "34": 11, "39": 12, "1": 11}
# ISO country of each default prefix, for the ``country_code`` of delivery reports.
COUNTRY_CODES = {
    "33": "FR",
    "32": "BE",
    "41": "CH",
    "352": "LU",
    "44": "GB",
    "49": "DE",
    "34": "ES",
    "39": "IT",
    "1": "US",
}


def _list(prefix: str, count: int, start: int = 1) -> list[str]:
    return [f"{prefix}{n:0{11 - len(prefix)}d}" for n in range(start, start + count)]


@dataclass
class Seeds:
    """What a fresh (or reset) sandbox holds. Documented in docs/sandbox.md."""

    credits: int = 10_000
    lists: dict[int, list[str]] = field(
        default_factory=lambda: {
            1: _list("3361", 5),
            # blacklisted, a number also in list 1, an unreachable one, two good ones
            2: ["33600000001", "33610000001", "33700000001", "33620000001", "33620000002"],
            3: _list("3363", 1000),
        }
    )
    webhooks: dict[str, dict[str, Any]] = field(
        default_factory=lambda: {
            "1": {
                "type": "DLR",
                "url": "http://127.0.0.1:9/dlr",
                "status": "live",
                "signature": "sb-sig-1",
                "last_http_code": 200,
            },
            "2": {
                "type": "DLR",
                "url": "http://127.0.0.1:9/dlr2",
                "status": "live",
                "signature": "sb-sig-2",
                "last_http_code": 500,
            },
        }
    )
    npai: list[dict[str, Any]] = field(
        default_factory=lambda: [
            {"destination": "33699999901", "date": "2026-01-15 10:30:00", "campaign_id": 1001},
            {"destination": "33699999902", "date": "2026-10-25 02:30:00", "campaign_id": 1002},
        ]
    )
    blacklist: frozenset[str] = frozenset({"33600000001", "33600000002"})
    # Numbers that reach no one: sent to, they become NPAI entries of the campaign.
    unreachable_prefix: str = "337000"


class Faults(BaseModel):
    """Faults to inject; counters go down as they fire. Unknown names and bad values are refused.

    Faults that answer before any work (``http_error``, ``rate_limit``) and the body faults
    (``truncated``, ``empty_body``, ``wrong_content_type``) hit every endpoint in scope. The
    ambiguous-send faults (``maybe_sent``, ``drop_after_record``, ``bad_success_shape``,
    ``unknown_error``) hit the sends, and the other endpoints only when ``endpoints`` names them:
    unscoped, they keep aiming at the send behind a cost gate's simulation.

    :param maybe_sent: on the next N sends, record the campaign, then answer status -8 (HTTP 200); a
        simulation or read named in ``endpoints`` is answered status -8 too (nothing is recorded).
    :param bad_success_shape: on the next N sends, record the campaign, then answer status 1 without
        the result's figures (``{"status": 1, "message": "OK"}``); a simulation or read named in
        ``endpoints`` is answered alike.
    :param unknown_error: on the next N sends, record the campaign, then answer status -99 (unknown
        error, HTTP 200); a simulation or read named in ``endpoints`` is answered alike.
    :param drop_after_record: on the next N sends, record the campaign, then close the connection
        without answering (a reset); a simulation or read named in ``endpoints`` is processed, then
        its connection is closed alike.
    :param truncated: the next N requests are processed (sends recorded), then answered 200 with the
        full ``Content-Length`` but only half the body before the connection is closed.
    :param empty_body: the next N requests are processed (sends recorded), then answered 200 with an
        empty body.
    :param wrong_content_type: the next N requests are processed (sends recorded), then answered 200
        with an HTML page (``text/html``), as a proxy, a captive portal or a wrong base URL would.
    :param http_error: ``(code, N)``: the next N requests get that HTTP code (400-599) with an HTML body;
        nothing is recorded.
    :param rate_limit: ``(retry_after_seconds, N)``: the next N requests get 429 with ``Retry-After``.
    :param slow: seconds every request waits before answering, once processed (a send's campaign is
        recorded first), or ``(seconds, N)``: only the next N requests wait.
    :param endpoints: restrict the faults to these endpoints (names in :data:`ENDPOINTS`).
    """

    model_config = ConfigDict(extra="forbid")

    maybe_sent: int = Field(default=0, ge=0)
    drop_after_record: int = Field(default=0, ge=0)
    bad_success_shape: int = Field(default=0, ge=0)
    unknown_error: int = Field(default=0, ge=0)
    truncated: int = Field(default=0, ge=0)
    empty_body: int = Field(default=0, ge=0)
    wrong_content_type: int = Field(default=0, ge=0)
    http_error: tuple[int, int] | None = None
    rate_limit: tuple[float, int] | None = None
    slow: float | tuple[float, int] = 0.0
    endpoints: list[str] | None = None

    @field_validator("http_error")
    @classmethod
    def _http_error_code(cls, value: tuple[int, int] | None) -> tuple[int, int] | None:
        if value is not None and not (400 <= value[0] <= 599 and value[1] >= 0):
            raise ValueError(f"http_error must be (code 400-599, count >= 0), got {value!r}")
        return value

    @field_validator("rate_limit")
    @classmethod
    def _rate_limit(cls, value: tuple[float, int] | None) -> tuple[float, int] | None:
        if value is not None and not (value[0] >= 0 and value[1] >= 0):
            raise ValueError(f"rate_limit must be (retry_after_seconds >= 0, count >= 0), got {value!r}")
        return value

    @field_validator("slow")
    @classmethod
    def _slow(cls, value: float | tuple[float, int]) -> float | tuple[float, int]:
        seconds, count = value if isinstance(value, tuple) else (value, 0)
        if not (0 <= seconds <= MAX_SLOW and count >= 0):
            raise ValueError(f"slow must be seconds (0-{MAX_SLOW:g}) or (seconds, count >= 0), got {value!r}")
        return value

    @field_validator("endpoints")
    @classmethod
    def _known_endpoints(cls, value: list[str] | None) -> list[str] | None:
        unknown = sorted(set(value or ()) - set(ENDPOINTS))
        if unknown:
            raise ValueError(f"unknown endpoint(s) {unknown}; use some of {list(ENDPOINTS)}")
        return value

    def applies(self, path: str) -> bool:
        """Whether the faults apply to the endpoint ``path`` (a name in :data:`ENDPOINTS`)."""
        return self.endpoints is None or path in self.endpoints

    def ambiguous_send_applies(self, path: str) -> bool:
        """Whether the ambiguous-send faults apply to ``path``: sends, or endpoints named."""
        return self.applies(path) and (path in SEND_PATHS or self.endpoints is not None)


# The faults that answer after the request was processed (a send's campaign recorded), in the order
# they are taken when several are set.
ANSWER_FAULTS = (
    "maybe_sent",
    "drop_after_record",
    "bad_success_shape",
    "unknown_error",
    "truncated",
    "empty_body",
    "wrong_content_type",
)
# Of those, the ones that hit the sends only, unless ``Faults.endpoints`` names other endpoints.
AMBIGUOUS_SEND_FAULTS = frozenset({"maybe_sent", "drop_after_record", "bad_success_shape", "unknown_error"})


# What a fresh (or reset) sandbox holds, with the default configuration.
DEFAULT_SEEDS = Seeds()


@dataclass
class SandboxConfig:
    """Rules of the sandbox's account, set at start-up.

    :param allowed_prefixes: dialling prefixes messages may go to; others are counted ``not_allowed``.
    :param flood_limit: anti-flood: a number already sent this many messages within ``flood_window``
        seconds is counted ``flood``.
    :param flood_window: the anti-flood window, in seconds.
    :param country_limits: messages per dialling prefix per calendar month (Paris); beyond it they are
        counted ``country_limit``. A prefix not given has no limit.
    :param seeds: the account's starting content (:class:`Seeds`).
    :param dlr: after a send, POST one delivery report per number sent to DLR webhook "1" (127.0.0.1
        only), as the service does.
    :param dlr_statuses: the statuses the reports carry, taken in turn, number after number (the
        default: every message delivered).
    :param dlr_delay: seconds between two reports (of one poster).
    :param dlr_tries: tries per report: a non-2xx answer or no answer is tried again, with a backoff
        from :attr:`dlr_backoff` seconds, doubled each time (at most :attr:`dlr_max_wait`), as a real
        service retries. An answer's ``Retry-After`` is honoured, up to :attr:`dlr_max_wait` too.
    :param dlr_backoff: the first wait between two tries of a report, in seconds.
    :param dlr_max_wait: the longest wait between two tries of a report, in seconds, whatever the
        backoff or the answer's ``Retry-After`` says.
    :param dlr_concurrency: how many reports of a campaign are posted at once (the service posts
        concurrently); with 1, one after the other, in the order of the numbers.
    """

    allowed_prefixes: tuple[str, ...] = DEFAULT_ALLOWED_PREFIXES
    flood_limit: int = 5
    flood_window: float = 3600.0
    country_limits: dict[str, int] = field(default_factory=dict)
    seeds: Seeds = field(default_factory=Seeds)
    dlr: bool = False
    dlr_statuses: tuple[int, ...] = (3,)
    dlr_delay: float = 0.0
    dlr_tries: int = 5
    dlr_backoff: float = 0.2
    dlr_max_wait: float = 5.0
    dlr_concurrency: int = 1


@dataclass(slots=True, eq=False)
class PostedReport:
    """One delivery report the sandbox posts, and how its tries went (small: a run may post 100,000s).

    :param body: the report as posted (JSON).
    :param campaign_id: its campaign.
    :param destination: its number.
    :param status: its status.
    :param tries: the calls made so far.
    :param code: the HTTP code of the latest call (0: no answer), None before the first.
    :param done: no more calls will be made: acknowledged, or given up after the last try.
    """

    body: bytes
    campaign_id: int
    destination: str
    status: int
    tries: int = 0
    code: int | None = None
    done: bool = False

    @property
    def acknowledged(self) -> bool:
        """Whether the receiver answered it with a 2xx (it will not be posted again)."""
        return self.code is not None and 200 <= self.code < 300


# The columns of DeliveryLedger.rows(), in order.
LEDGER_COLUMNS = ("campaign_id", "destination", "status", "tries", "code", "acknowledged", "done")


class DeliveryLedger:
    """The delivery reports posted since the last reset: the ground truth tests compare a receiver with.

    Per report its tries and outcome (:class:`PostedReport`), and every answer counted by HTTP code,
    with how many of them carried a ``Retry-After``. Thread-safe. A reset closes the ledger and starts
    another: the posters of the closed one stop, and cannot count into the new one.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reports: list[PostedReport] = []
        self._answers: Counter[int] = Counter()
        self._retry_after: Counter[int] = Counter()
        self.closed = False

    def add(self, reports: Sequence[PostedReport]) -> None:
        """Register the reports of a campaign about to be posted."""
        with self._lock:
            self._reports.extend(reports)

    def record_try(self, report: PostedReport, code: int, retry_after: bool) -> None:
        """Count one call of ``report``: answered ``code`` (0: no answer), with a Retry-After or not."""
        with self._lock:
            report.tries += 1
            report.code = code
            self._answers[code] += 1
            if retry_after and not 200 <= code < 300:
                self._retry_after[code] += 1

    def finish(self, report: PostedReport) -> None:
        """Mark ``report`` done: acknowledged, or given up."""
        with self._lock:
            report.done = True

    def counts(self) -> dict[str, Any]:
        """How far the posting is: reports, acknowledged, given up, still being tried, answers by code."""
        with self._lock:
            acknowledged = sum(report.acknowledged for report in self._reports)
            done = sum(report.done for report in self._reports)
            return {
                "reports": len(self._reports),
                "acknowledged": acknowledged,
                "given_up": done - acknowledged,
                "in_progress": len(self._reports) - done,
                "tries": sum(self._answers.values()),
                "answers": {str(code): count for code, count in sorted(self._answers.items())},
                "retry_after": {str(code): count for code, count in sorted(self._retry_after.items())},
            }

    def rows(self) -> list[list[Any]]:
        """One row per report (:data:`LEDGER_COLUMNS`), in the order they were registered."""
        with self._lock:
            return [
                [r.campaign_id, r.destination, r.status, r.tries, r.code, r.acknowledged, r.done]
                for r in self._reports
            ]

    def attempts(self) -> int:
        """Every call made."""
        with self._lock:
            return sum(self._answers.values())

    def acknowledged(self) -> list[dict[str, Any]]:
        """The reports answered with a 2xx, whole (every field), in the order they were registered."""
        with self._lock:
            return [json.loads(report.body) for report in self._reports if report.acknowledged]


def data_error(exc: ValidationError, prefix: str) -> SmsApiError:
    """The service's answer to invalid fields: status -4 when the delay is wrong, else -7, naming each field.

    :param exc: the validation error of the shared model.
    :param prefix: the name of the validated object (``message``), prefixed to field names.
    """
    errors = format_errors(exc, prefix)
    status = -4 if any(name.endswith("delay") for name, _ in errors) else -7
    return SmsApiError(status, "; ".join(f"{name}: {text}" for name, text in errors))


class SandboxState:
    """The account and everything recorded, guarded by one lock."""

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config or SandboxConfig()
        self._lock = threading.RLock()
        self.dlr_ledger = DeliveryLedger()
        # The highest campaign id handed out: kept across resets, so that none is handed out twice.
        self._highest_ticket = 0
        self.reset()

    def reset(self) -> None:
        """Back to the seeds: campaigns, credits, NPAI, webhooks, counters and faults.

        Delivery reports still being posted for earlier sends stop (their ledger is closed).
        """
        seeds = self.config.seeds
        with self._lock:
            self.dlr_ledger.closed = True
            self.credits = seeds.credits
            self.price = 1
            self.lists = copy.deepcopy(seeds.lists)
            self.webhooks = {
                key: {"webhook_id": key, **value} for key, value in copy.deepcopy(seeds.webhooks).items()
            }
            self.npai: list[NpaiEntry] = []
            self._npai_ids = itertools.count(1)
            for entry in seeds.npai:
                self.add_npai(**entry)
            self.campaigns: list[dict[str, Any]] = []
            # The next campaign id when a test chose it (set_next_ticket); None: from the clock.
            self._chosen_ticket: int | None = None
            self._sent_times: dict[str, list[float]] = {}
            # Messages sent per (month "YYYY-MM" in Paris, dialling prefix).
            self._country_sent: dict[tuple[str, str], int] = {}
            self.faults = Faults()
            # Delivery reports posted to the DLR webhook: each one's tries and outcome.
            self.dlr_ledger = DeliveryLedger()
            # Whether sends post reports, their statuses, tries and posters: the start-up's until the
            # inspection API changes them (set_delivery_reports).
            self.dlr_enabled = self.config.dlr
            self.dlr_statuses = tuple(self.config.dlr_statuses)
            self.dlr_tries = self.config.dlr_tries
            self.dlr_concurrency = self.config.dlr_concurrency
            # Requests received per endpoint name (ENDPOINTS), faulty ones included: how tests see
            # that a send was made exactly once and a read retried.
            self.requests: dict[str, int] = dict.fromkeys(ENDPOINTS, 0)

    def set_delivery_reports(
        self,
        enabled: bool,
        statuses: Sequence[int] | None = None,
        tries: int | None = None,
        concurrency: int | None = None,
    ) -> None:
        """Turn the posting of delivery reports on or off, and choose how they go (until a reset).

        :param enabled: post one report per number sent after each send.
        :param statuses: the statuses, taken in turn (the start-up's when None).
        :param tries: tries per report (the start-up's when None); the backoff doubles up to
            ``SandboxConfig.dlr_max_wait``.
        :param concurrency: reports posted at once (the start-up's when None).
        """
        if statuses is not None and (not statuses or not all(isinstance(s, int) for s in statuses)):
            raise ValueError(f"statuses must be a non-empty list of integers, got {statuses!r}")
        for name, value in (("tries", tries), ("concurrency", concurrency)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"{name} must be an integer of at least 1, got {value!r}")
        with self._lock:
            self.dlr_enabled = enabled
            if statuses is not None:
                self.dlr_statuses = tuple(statuses)
            if tries is not None:
                self.dlr_tries = tries
            if concurrency is not None:
                self.dlr_concurrency = concurrency

    def set_next_ticket(self, ticket: int) -> None:
        """Number the next campaign ``ticket`` (then on from there), until a reset (then from the clock
        again, past every id handed out). The caller keeps ``ticket`` clear of the ids handed out before.

        :param ticket: the next campaign's ticket, 1 or more.
        """
        if not isinstance(ticket, int) or isinstance(ticket, bool) or ticket < 1:
            raise ValueError(f"ticket must be an integer of at least 1, got {ticket!r}")
        with self._lock:
            self._chosen_ticket = ticket

    def _next_ticket(self) -> int:
        """A campaign id never handed out before, not before a reset nor a restart (the service's campaign
        id is unique for ever): the clock in microseconds, or one more than the last when that is later.
        Until a reset, the ids after :meth:`set_next_ticket` follow on from it."""
        if self._chosen_ticket is None:
            ticket = max(self._highest_ticket + 1, time.time_ns() // 1_000)
        else:
            ticket = self._chosen_ticket
            self._chosen_ticket += 1
        self._highest_ticket = max(self._highest_ticket, ticket)
        return ticket

    def set_credits(self, credits: int) -> int:
        """Set the account's credit balance.

        :param credits: the new balance (0 or more).
        """
        if credits < 0:
            raise ValueError(f"credits must be 0 or more, got {credits}")
        with self._lock:
            self.credits = credits
            return credits

    def set_price(self, price: int) -> int:
        """Set the credits one SMS part costs (1 after a reset): a tariff change between a simulation
        and the send.

        :param price: credits per SMS part, 1 or more.
        """
        if not isinstance(price, int) or isinstance(price, bool) or price < 1:
            raise ValueError(f"price must be an integer of at least 1, got {price!r}")
        with self._lock:
            self.price = price
            return price

    # ---------------------------------------------------------------------------------- campaigns

    def campaign(self, path: str, request: CampaignRequest) -> tuple[CampaignResult, dict[str, Any] | None]:
        """Evaluate (and on a send, create) a campaign; raises SmsApiError with the service's status."""
        sends = not path.endswith("/simulate")
        message = self._message(request.message, sends)
        if path.startswith("/send/lists"):
            recipients = [{"value": number} for number in self._list_numbers(request.lists)]
        else:
            recipients = request.recipients
        if not recipients:
            raise SmsApiError(-7, "recipients: at least one number is required")
        # The monthly limit counts in the month the campaign goes out: its delay's, or now's.
        month = (message.delay or pendulum.now(PARIS).strftime(API_FORMAT))[:7]
        with self._lock:
            counts, sent = self._filter(recipients, month)
            text = self._shorten(message)
            parts = count_parts(text, stop_mention=has_stop_mention(message.pushtype, message.sender)).parts
            cost = parts * len(sent) * self.price
            if sends and cost > self.credits:
                raise SmsApiError(-3, f"not enough credits: the campaign costs {cost}, {self.credits} left")
            credits = self.credits - cost
            result = CampaignResult(
                status=1,
                message="OK",
                cost=cost,
                credits=credits,
                total=len(recipients),
                sent=len(sent),
                **counts,
            )
            if not sends:
                return result, None
            self.credits = credits
            ticket = str(self._next_ticket())
            record = {
                "ticket": ticket,
                "endpoint": path,
                "text": text,
                "pushtype": message.pushtype,
                "sender": message.sender,
                "delay": message.delay,
                "links": message.links,
                "recipients": recipients,
                "lists": [int(v) for v in request.lists],
                "sent_to": [r["value"] for r in sent],
                "parts": parts,
                "cost": cost,
                "created_at": pendulum.now(PARIS).strftime(API_FORMAT),
            }
            self.campaigns.append(record)
            self._after_send(ticket, sent, month)
        return result.model_copy(update={"ticket": ticket}), record

    def _message(self, data: dict[str, Any], sends: bool) -> Message:
        try:
            message = Message.model_validate(data)
        except ValidationError as exc:
            raise data_error(exc, "message") from None
        if sends and message.links and message.pushtype is None:
            raise SmsApiError(-7, "message.pushtype is required with short URLs")
        if message.pushtype == "marketing":
            self._check_send_window(message)
        return message

    @staticmethod
    def _check_send_window(message: Message) -> None:
        """Refuse (status -7, HTTP 400) a marketing campaign sent outside the marketing window.

        The effective send time is the delay, or now. Simulations are refused alike, so that a
        simulation never promises a campaign the send would refuse.
        """
        when = effective_send_time(message)
        allowed = next_allowed(when)
        if allowed != when:
            field = f"message.delay {message.delay}" if message.delay else "sending now"
            raise SmsApiError(
                -7,
                f"{field}: outside the marketing send window ({RULE}); "
                f"next allowed time: {describe(allowed)}",
            )

    def _list_numbers(self, ids: list[Any]) -> list[str]:
        if not ids:
            raise SmsApiError(-7, "lists: at least one list id is required")
        numbers = []
        for raw in ids:
            try:
                list_id = int(raw)
            except (TypeError, ValueError):
                raise SmsApiError(-7, f"lists: {raw!r} is not a list id") from None
            if list_id not in self.lists:
                raise SmsApiError(-5, f"list {list_id} not found")
            numbers.extend(self.lists[list_id])
        return numbers

    def _filter(
        self, recipients: list[dict[str, Any]], month: str
    ) -> tuple[dict[str, int], list[dict[str, Any]]]:
        counts = dict.fromkeys(FILTER_FIELDS, 0)
        npai = {entry.destination for entry in self.npai}
        seen: set[str] = set()
        sent = []
        now = time.monotonic()
        country_planned: dict[str, int] = {}
        for recipient in recipients:
            value = str(recipient.get("value") or "").strip()
            prefix = self._prefix(value)
            reason = None
            if not self._valid(value):
                reason = "invalid"
            elif value in seen:
                reason = "duplicated"
            elif value in self.config.seeds.blacklist:
                reason = "blacklisted"
            elif value in npai:
                reason = "npai"
            elif prefix is None:
                reason = "not_allowed"
            elif self._flooded(value, now):
                reason = "flood"
            elif self._over_country_limit(month, prefix, country_planned):
                reason = "country_limit"
            seen.add(value)
            if reason:
                counts[reason] += 1
                continue
            if prefix is None:  # a number with no allowed prefix is "not_allowed" above
                raise RuntimeError(f"{value}: sent with no country prefix")
            country_planned[prefix] = country_planned.get(prefix, 0) + 1
            sent.append({**recipient, "value": value})
        return counts, sent

    @staticmethod
    def _valid(value: str) -> bool:
        if not value.isdigit() or not value.isascii() or value.startswith("0") or not 8 <= len(value) <= 15:
            return False
        for prefix, length in COUNTRY_LENGTHS.items():
            if value.startswith(prefix):
                return len(value) == length
        return True

    def _prefix(self, value: str) -> str | None:
        return next(
            (p for p in sorted(self.config.allowed_prefixes, key=len, reverse=True) if value.startswith(p)),
            None,
        )

    def _flooded(self, value: str, now: float) -> bool:
        recent = [t for t in self._sent_times.get(value, []) if now - t < self.config.flood_window]
        return len(recent) >= self.config.flood_limit

    def _over_country_limit(self, month: str, prefix: str, planned: dict[str, int]) -> bool:
        limit = self.config.country_limits.get(prefix)
        already = self._country_sent.get((month, prefix), 0)
        return limit is not None and already + planned.get(prefix, 0) >= limit

    @staticmethod
    def _shorten(message: Message) -> str:
        """The text with each marker replaced by its own short URL of ``SHORT_URL_LENGTH`` characters."""
        text = message.text
        slug_length = SHORT_URL_LENGTH - len(SHORT_URL_BASE)
        for _ in message.links:
            slug = "".join(secrets.choice(_SHORT_SLUG_CHARS) for _ in range(slug_length))
            text = text.replace(SHORT_MARKER, SHORT_URL_BASE + slug, 1)
        return text

    def _after_send(self, ticket: str, sent: list[dict[str, Any]], month: str) -> None:
        now = time.monotonic()
        window = self.config.flood_window
        for recipient in sent:
            value = recipient["value"]
            # Only sends within the anti-flood window matter: forget older ones as we go.
            recent = [t for t in self._sent_times.get(value, ()) if now - t < window]
            self._sent_times[value] = [*recent, now]
            key = (month, self._prefix(value) or "")
            self._country_sent[key] = self._country_sent.get(key, 0) + 1
            if value.startswith(self.config.seeds.unreachable_prefix):
                self.add_npai(destination=value, campaign_id=int(ticket))

    # ------------------------------------------------------------------------------ other records

    def add_npai(
        self, destination: str, campaign_id: int | None = None, date: str | None = None
    ) -> NpaiEntry:
        """Add an NPAI entry.

        :param destination: the number, digits only.
        :param campaign_id: the campaign that produced it.
        :param date: ``Y-m-d H:i:s`` (Paris); defaults to now.
        """
        with self._lock:
            try:
                entry = NpaiEntry(
                    id=str(next(self._npai_ids)),
                    destination=destination,
                    date=date or pendulum.now(PARIS).strftime(API_FORMAT),
                    campaign_id=campaign_id,
                )
            except ValidationError as exc:
                raise data_error(exc, "npai") from None
            self.npai.append(entry)
            return entry

    def webhook(self, webhook_id: str) -> Webhook:
        """The webhook record ``webhook_id``; unknown ids are status -5."""
        with self._lock:
            if webhook_id not in self.webhooks:
                raise SmsApiError(-5, f"webhook {webhook_id} not found")
            return Webhook.model_validate(self.webhooks[webhook_id])

    def set_webhook(self, webhook_id: str, fields: dict[str, Any]) -> Webhook:
        """Create or update webhook ``webhook_id`` with ``fields`` (fields of :class:`Webhook`)."""
        with self._lock:
            record = {
                "webhook_id": webhook_id,
                "type": "DLR",
                "url": "",
                "status": "live",
                **self.webhooks.get(webhook_id, {}),
            }
            record.update(fields)
            try:
                webhook = Webhook.model_validate(record)  # refuse a record GET /webhook could not serve
            except ValidationError as exc:
                raise data_error(exc, "webhook") from None
            self.webhooks[webhook_id] = record
            return webhook

    def record_webhook_call(self, webhook_id: str, http_code: int) -> None:
        """Keep the HTTP code of the latest call to a webhook, as its ``last_http_code``.

        (What each delivery report's calls got is counted in its :class:`DeliveryLedger`.)
        """
        with self._lock:
            if webhook_id in self.webhooks:
                self.webhooks[webhook_id]["last_http_code"] = http_code

    # ------------------------------------------------------------------------------------ faults

    def take_fault(self, path: str) -> tuple[str, float] | None:
        """The fault answering this request before anything is done (429 or HTTP error), consuming one use.

        :param path: the endpoint's name in :data:`ENDPOINTS`.
        """
        with self._lock:
            faults = self.faults
            if not faults.applies(path):
                return None
            if faults.rate_limit and faults.rate_limit[1] > 0:
                seconds, left = faults.rate_limit
                faults.rate_limit = (seconds, left - 1)
                return ("rate_limit", seconds)
            if faults.http_error and faults.http_error[1] > 0:
                code, left = faults.http_error
                faults.http_error = (code, left - 1)
                return ("http_error", code)
            return None

    def take_answer_fault(self, path: str) -> str | None:
        """The fault answering this request once processed (one of :data:`ANSWER_FAULTS`), consuming a use.

        :param path: the endpoint's name in :data:`ENDPOINTS`.
        """
        with self._lock:
            faults = self.faults
            if not faults.applies(path):
                return None
            for name in ANSWER_FAULTS:
                if name in AMBIGUOUS_SEND_FAULTS and not faults.ambiguous_send_applies(path):
                    continue
                left = getattr(faults, name)
                if left > 0:
                    setattr(faults, name, left - 1)
                    return name
            return None

    def count_request(self, path: str) -> None:
        """Count one request received on the endpoint ``path`` (a name in :data:`ENDPOINTS`)."""
        with self._lock:
            self.requests[path] = self.requests.get(path, 0) + 1

    def slowness(self, path: str) -> float:
        """Seconds a request to ``path`` waits before answering (the ``slow`` fault), consuming one use."""
        with self._lock:
            faults = self.faults
            if not faults.applies(path):
                return 0.0
            if not isinstance(faults.slow, tuple):
                return faults.slow
            seconds, left = faults.slow
            if left <= 0:
                return 0.0
            faults.slow = (seconds, left - 1)
            return seconds
