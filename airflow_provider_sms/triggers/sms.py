"""Async triggers behind the sensors' ``deferrable=True``: they poll the service from the triggerer.

A triggerer restart runs ``run()`` again from the start, so triggers only ever read (GET /webhook/:id,
GET /npai); nothing that sends can run here. Transient read errors (connection, 429, 5xx) are retried
inside the poll loop; an unknown id, a rejected token or bad input end the wait with an error event.

The conditions the sensors wait for (:func:`webhook_ready`, :class:`NpaiFilter`) live here and are
shared by the sensors' ``poke`` and the triggers, so both modes decide the same way.
"""

from __future__ import annotations

import abc
import asyncio
import ssl
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

import httpx
import pendulum
from airflow.providers.common.compat.connection import get_async_connection, get_async_extra_dejson
from airflow.providers.common.compat.sdk import AirflowNotFoundException
from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_sms import codec
from airflow_provider_sms.delay import parse_instant
from airflow_provider_sms.exceptions import (
    SmsApiError,
    SmsAuthError,
    SmsError,
    SmsNotFoundError,
    SmsTransportError,
    SmsValidationError,
)
from airflow_provider_sms.hooks.sms import (
    MAX_RESPONSE_BYTES,
    NpaiPages,
    SmsConnectionSettings,
    SmsHook,
    check_read_response,
    connection_settings,
    request_headers,
    response_too_large,
    webhook_path,
)
from airflow_provider_sms.models import NpaiEntry, NpaiList, Webhook, normalize_number

# Kinds of error event that waiting cannot cure: the sensor fails at once, without retries.
FATAL_ERRORS: frozenset[str] = frozenset({"not_found", "auth", "validation", "connection"})


# ------------------------------------------------------------------------------------- conditions


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
            min_entries=_min_entries(min_entries),
        )

    def matching(self, npai: NpaiList) -> list[NpaiEntry]:
        """The entries of ``npai`` that pass every filter, in the service's order.

        Dates are compared as instants, so ``since`` is right across the DST changes; an entry
        whose date cannot be read as a Paris time does not match a ``since`` filter.
        """
        matches = []
        for entry in npai.entries:
            if self.campaign_id is not None and entry.campaign_id != self.campaign_id:
                continue
            if self.destinations is not None and entry.destination not in self.destinations:
                continue
            # The date is only parsed for entries that passed the cheap filters.
            if self.since is not None and not _dated_from(entry, self.since):
                continue
            matches.append(entry)
        return matches

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


def npai_result(entries: list[NpaiEntry]) -> dict[str, Any]:
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
    message = f"campaign_id={value!r}: must be a campaign's id, an integer (the ticket of a send)"
    raise SmsValidationError(message, [("campaign_id", message)])


def _destinations(value: object) -> frozenset[str] | None:
    if value is None:
        return None
    items = [value] if isinstance(value, (str, int)) else value
    if not isinstance(items, Iterable):
        message = f"destinations={value!r}: must be a telephone number or a list of them"
        raise SmsValidationError(message, [("destinations", message)])
    numbers = set()
    for index, item in enumerate(items):
        try:
            numbers.add(normalize_number(item))
        except ValueError as exc:
            message = f"destinations[{index}]: {exc}"
            raise SmsValidationError(message, [(f"destinations[{index}]", message)]) from None
    if not numbers:
        message = "destinations: an empty list matches nothing; give numbers, or None for any number"
        raise SmsValidationError(message, [("destinations", message)])
    return frozenset(numbers)


def _min_entries(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        message = f"min_entries={value!r}: must be an integer of at least 1"
        raise SmsValidationError(message, [("min_entries", message)])
    return value


def error_kind(exc: Exception) -> str:
    """Name a failure for an error event: not_found, auth, validation, connection or api."""
    if isinstance(exc, AirflowNotFoundException):
        return "connection"
    if isinstance(exc, SmsNotFoundError):
        return "not_found"
    if isinstance(exc, SmsAuthError):
        return "auth"
    if isinstance(exc, SmsValidationError):
        return "validation"
    return "api"


# --------------------------------------------------------------------------------------- triggers


class SmsPollingTrigger(BaseTrigger):
    """Base of the SMS triggers: reads the connection, then polls until :meth:`poll` has an answer.

    :param sms_conn_id: the Airflow connection of type ``sms``.
    :param poke_interval: seconds between polls.
    :param exponential_backoff: double the wait after each poll that did not succeed.
    :param max_wait: longest wait between polls when backing off (seconds; no cap when ``None``).
    """

    def __init__(
        self,
        *,
        sms_conn_id: str = SmsHook.default_conn_name,
        poke_interval: float = 60.0,
        exponential_backoff: bool = False,
        max_wait: float | None = None,
    ) -> None:
        super().__init__()
        self.sms_conn_id = sms_conn_id
        self.poke_interval = float(poke_interval)
        self.exponential_backoff = exponential_backoff
        self.max_wait = max_wait

    def _base_kwargs(self) -> dict[str, Any]:
        return {
            "sms_conn_id": self.sms_conn_id,
            "poke_interval": self.poke_interval,
            "exponential_backoff": self.exponential_backoff,
            "max_wait": self.max_wait,
        }

    @abc.abstractmethod
    async def poll(self, client: httpx.AsyncClient, fmt: codec.WireFormat) -> dict[str, Any] | None:
        """One look at the service: the success payload when the wait is over, else ``None``."""

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Poll until success or a failure that waiting cannot cure; yield exactly one event."""
        try:
            settings = await self._settings()
        except (SmsError, AirflowNotFoundException) as exc:
            self.log.error("%s", exc)
            yield _error_event(exc)
            return
        interval = self.poke_interval
        async with self._client(settings) as client:
            while True:
                try:
                    payload = await self.poll(client, settings.format)
                except SmsTransportError as exc:
                    # Connection errors, 429 and 5xx: the next poll retries; the sensor's timeout bounds it.
                    retry_after = getattr(exc, "retry_after", None) or 0.0
                    wait = max(interval, retry_after)
                    self.log.warning("%s; polling again in %.1fs", exc, wait)
                except SmsError as exc:
                    self.log.error("%s", exc)
                    yield _error_event(exc)
                    return
                else:
                    if payload is not None:
                        yield TriggerEvent({"status": "success", **payload})
                        return
                    wait = interval
                await asyncio.sleep(wait)
                if self.exponential_backoff:
                    interval = min(interval * 2, self.max_wait or float("inf"))

    async def _settings(self) -> SmsConnectionSettings:
        # The triggerer's event loop must not block on the connection: read it the async way.
        conn = await get_async_connection(self.sms_conn_id, hook=SmsHook)
        extra = await get_async_extra_dejson(conn)
        return connection_settings(conn, extra or {}, conn_id=self.sms_conn_id)

    def _client(
        self, settings: SmsConnectionSettings, transport: httpx.AsyncBaseTransport | None = None
    ) -> httpx.AsyncClient:
        """The async HTTP client, configured as the hook's session (headers, TLS, timeouts)."""
        # requests takes a CA bundle path as `verify`; httpx wants an SSL context for it.
        verify = (
            ssl.create_default_context(cafile=settings.verify)
            if isinstance(settings.verify, str)
            else settings.verify
        )
        return httpx.AsyncClient(
            base_url=settings.base_url,
            headers=request_headers(settings),
            verify=verify,
            timeout=httpx.Timeout(settings.timeout, connect=min(settings.timeout, 10.0)),
            transport=transport,
        )

    async def get(
        self,
        client: httpx.AsyncClient,
        path: str,
        fmt: codec.WireFormat,
        params: dict[str, int] | None = None,
    ) -> bytes:
        """GET ``path`` once and return the body of a 2xx answer.

        Raises SmsTransportError for connection errors, 429 and 5xx (``retry_after`` set when the
        service gave one) and the service's own error otherwise, as the hook does.
        """
        endpoint = f"GET {path}"
        chunks: list[bytes] = []
        size = 0
        try:
            async with client.stream("GET", path, params=params) as response:
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    if size > MAX_RESPONSE_BYTES:
                        raise response_too_large(response.status_code, endpoint)
                    chunks.append(chunk)
        except httpx.TransportError as exc:
            # httpx names the URL (never the headers) in its errors: no token can leak here.
            raise SmsTransportError(f"{endpoint}: {type(exc).__name__}: {str(exc)[:300]}") from None
        answer = b"".join(chunks)
        check_read_response(
            response.status_code,
            response.reason_phrase,
            response.headers.get("Retry-After"),
            answer,
            fmt,
            endpoint,
        )
        return answer


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

    async def poll(self, client: httpx.AsyncClient, fmt: codec.WireFormat) -> dict[str, Any] | None:
        """Read the webhook; success when it is in the expected state."""
        path = webhook_path(self.webhook_id)
        webhook = codec.decode_webhook(await self.get(client, path, fmt), fmt, endpoint=f"GET {path}")
        if webhook_ready(webhook, self.expected_status, self.require_healthy):
            self.log.info(
                "webhook %s is %s (last HTTP code %s)",
                self.webhook_id,
                webhook.status,
                webhook.last_http_code,
            )
            return {"webhook": webhook.model_dump(mode="json")}
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

    async def poll(self, client: httpx.AsyncClient, fmt: codec.WireFormat) -> dict[str, Any] | None:
        """Read every page of the list; success when enough entries match."""
        pages = NpaiPages()
        while (params := pages.next_params()) is not None:
            body = await self.get(client, "/npai", fmt, params)
            # Decoding and filtering a long list takes CPU time: keep it off the triggerer's event loop.
            pages.add(await asyncio.to_thread(codec.decode_npai, body, fmt, endpoint="GET /npai"))
        matches = await asyncio.to_thread(self.npai_filter.matching, pages.result())
        if len(matches) >= self.npai_filter.min_entries:
            self.log.info("%s matching NPAI entries found", len(matches))
            return {"npai": npai_result(matches)}
        self.log.info("%s of %s found; waiting", len(matches), self.npai_filter.describe())
        return None


def _error_event(exc: Exception) -> TriggerEvent:
    """An error event: the kind (for the sensor to decide) and a message naming what to fix."""
    status = exc.status if isinstance(exc, SmsApiError) else None
    return TriggerEvent(
        {"status": "error", "error": error_kind(exc), "api_status": status, "message": str(exc)}
    )
