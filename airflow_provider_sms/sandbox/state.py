"""The sandbox's account: seeds, filtering rules, credits, faults. Per process and thread-safe.

Like the service, it refuses a ``marketing`` campaign (send or simulation) whose send time, the delay
or now, is outside the marketing window (:mod:`airflow_provider_sms.send_window`): status -7 (HTTP
400), with a message naming the rule and the next allowed time.
"""

from __future__ import annotations

import copy
import itertools
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pendulum
from pydantic import ValidationError

from airflow_provider_sms.codec import CampaignRequest
from airflow_provider_sms.delay import API_FORMAT, PARIS
from airflow_provider_sms.exceptions import SmsApiError
from airflow_provider_sms.models import (
    FILTER_FIELDS,
    SHORT_MARKER,
    CampaignResult,
    Message,
    NpaiEntry,
    Webhook,
    format_errors,
)
from airflow_provider_sms.segments import count_parts
from airflow_provider_sms.send_window import RULE, describe, effective_send_time, next_allowed

SHORT_URL_BASE = "https://sms.sb/"

# Dialling prefixes allowed by default, and the total length (country code included) a number of
# that country must have; a prefix without a length accepts any 8-15 digit number.
DEFAULT_ALLOWED_PREFIXES = ("33", "32", "41", "352", "44", "49", "34", "39", "1")
COUNTRY_LENGTHS = {"33": 11, "32": 11, "41": 11, "352": 12, "44": 12, "34": 11, "39": 12, "1": 11}


def _list(prefix: str, count: int, start: int = 1) -> list[str]:
    return [f"{prefix}{n:0{11 - len(prefix)}d}" for n in range(start, start + count)]


@dataclass
class Seeds:
    """What a fresh (or reset) sandbox holds. Documented in the README's sandbox section."""

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


@dataclass
class Faults:
    """Faults to inject. Counters go down as they fire; ``endpoints`` restricts where they apply."""

    maybe_sent: int = 0
    drop_after_record: int = 0
    http_error: tuple[int, int] | None = None
    rate_limit: tuple[float, int] | None = None
    slow: float = 0.0
    endpoints: list[str] | None = None

    def applies(self, path: str) -> bool:
        return self.endpoints is None or path in self.endpoints


@dataclass
class SandboxConfig:
    """Rules of the sandbox's account, set at start-up."""

    allowed_prefixes: tuple[str, ...] = DEFAULT_ALLOWED_PREFIXES
    # Anti-flood: at most this many messages to one number within the window.
    flood_limit: int = 5
    flood_window: float = 3600.0
    # Monthly messages per country prefix; absent means no limit.
    country_limits: dict[str, int] = field(default_factory=dict)
    seeds: Seeds = field(default_factory=Seeds)
    # POST delivery reports to the DLR webhook (127.0.0.1 only) for recipients with a gsmsmsid.
    dlr: bool = False


class SandboxState:
    """The account and everything recorded, guarded by one lock."""

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config or SandboxConfig()
        self._lock = threading.RLock()
        self.reset()

    def reset(self) -> None:
        """Back to the seeds: campaigns, credits, NPAI, webhooks, counters and faults."""
        seeds = self.config.seeds
        with self._lock:
            self.credits = seeds.credits
            self.lists = copy.deepcopy(seeds.lists)
            self.webhooks = {
                key: {"webhook_id": key, **value} for key, value in copy.deepcopy(seeds.webhooks).items()
            }
            self.npai: list[NpaiEntry] = []
            self._npai_ids = itertools.count(1)
            for entry in seeds.npai:
                self.add_npai(**entry)
            self.campaigns: list[dict[str, Any]] = []
            self._tickets = itertools.count(5_000_001)
            self._sent_times: dict[str, list[float]] = {}
            self._country_sent: dict[str, int] = {}
            self.faults = Faults()

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
        with self._lock:
            counts, sent = self._filter(recipients)
            text = self._shorten(message)
            parts = count_parts(text).parts
            cost = parts * len(sent)
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
            ticket = str(next(self._tickets))
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
            self._after_send(ticket, sent)
        return result.model_copy(update={"ticket": ticket}), record

    def _message(self, data: dict[str, Any], sends: bool) -> Message:
        try:
            message = Message.model_validate(data)
        except ValidationError as exc:
            errors = format_errors(exc, "message")
            status = -4 if any(name.endswith("delay") for name, _ in errors) else -7
            raise SmsApiError(status, "; ".join(f"{name}: {text}" for name, text in errors)) from None
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

    def _filter(self, recipients: list[dict[str, Any]]) -> tuple[dict[str, int], list[dict[str, Any]]]:
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
            elif self._over_country_limit(prefix, country_planned):
                reason = "country_limit"
            seen.add(value)
            if reason:
                counts[reason] += 1
                continue
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

    def _over_country_limit(self, prefix: str, planned: dict[str, int]) -> bool:
        limit = self.config.country_limits.get(prefix)
        return limit is not None and self._country_sent.get(prefix, 0) + planned.get(prefix, 0) >= limit

    def _shorten(self, message: Message) -> str:
        text = message.text
        for _ in message.links:
            text = text.replace(SHORT_MARKER, SHORT_URL_BASE + secrets.token_urlsafe(4)[:6], 1)
        return text

    def _after_send(self, ticket: str, sent: list[dict[str, Any]]) -> None:
        now = time.monotonic()
        for recipient in sent:
            value = recipient["value"]
            self._sent_times.setdefault(value, []).append(now)
            prefix = self._prefix(value) or ""
            self._country_sent[prefix] = self._country_sent.get(prefix, 0) + 1
            if value.startswith(self.config.seeds.unreachable_prefix):
                self.add_npai(destination=value, campaign_id=int(ticket))

    # ------------------------------------------------------------------------------ other records

    def add_npai(
        self, destination: str, campaign_id: int | None = None, date: str | None = None
    ) -> NpaiEntry:
        """Add an NPAI entry (date defaults to now, Paris time)."""
        with self._lock:
            entry = NpaiEntry(
                id=str(next(self._npai_ids)),
                destination=destination,
                date=date or pendulum.now(PARIS).strftime(API_FORMAT),
                campaign_id=campaign_id,
            )
            self.npai.append(entry)
            return entry

    def webhook(self, webhook_id: str) -> Webhook:
        with self._lock:
            if webhook_id not in self.webhooks:
                raise SmsApiError(-5, f"webhook {webhook_id} not found")
            return Webhook.model_validate(self.webhooks[webhook_id])

    def set_webhook(self, webhook_id: str, fields: dict[str, Any]) -> Webhook:
        with self._lock:
            record = {
                "webhook_id": webhook_id,
                "type": "DLR",
                "url": "",
                "status": "live",
                **self.webhooks.get(webhook_id, {}),
            }
            record.update(fields)
            self.webhooks[webhook_id] = record
            return Webhook.model_validate(record)

    # ------------------------------------------------------------------------------------ faults

    def take_fault(self, path: str, sends: bool) -> tuple[str, Any] | None:
        """The fault to apply to this request, if any, consuming one use of it."""
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
            if sends and faults.maybe_sent > 0:
                faults.maybe_sent -= 1
                return ("maybe_sent", None)
            if sends and faults.drop_after_record > 0:
                faults.drop_after_record -= 1
                return ("drop_after_record", None)
            return None
