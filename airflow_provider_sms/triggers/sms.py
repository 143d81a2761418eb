"""Async triggers behind the sensors' ``deferrable=True``: they poll the service from the triggerer.

A triggerer restart runs ``run()`` again from the start, so triggers only ever read (GET /webhook/:id,
GET /npai); nothing that sends can run here. Transient read errors (connection, 429, 5xx) are retried
inside the poll loop; an unknown id, a rejected token or bad input end the wait with an error event.

The conditions they wait for are those of the sensors' ``poke``
(:mod:`airflow_provider_sms.sensors._wait_conditions`), so every mode decides the same way.
"""

from __future__ import annotations

import abc
import asyncio
import ssl
from collections.abc import AsyncIterator, Iterable
from typing import Any

import httpx
from airflow.providers.common.compat.connection import get_async_connection
from airflow.providers.common.compat.sdk import AirflowNotFoundException
from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_sms import codec
from airflow_provider_sms._compat import get_async_extra_dejson
from airflow_provider_sms.exceptions import SmsApiError, SmsError, SmsTransportError
from airflow_provider_sms.hooks.sms import (
    BoundedBody,
    NpaiPages,
    SmsConnectionSettings,
    SmsHook,
    check_read_response,
    connection_settings,
    judged_by_status,
    request_headers,
    response_limit,
    webhook_path,
)
from airflow_provider_sms.sensors._wait_conditions import NpaiFilter, error_kind, npai_result, webhook_ready

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
        # BaseTrigger.__init__ has no annotations; untyped_calls_exclude does not reach calls via super().
        super().__init__()  # type: ignore[no-untyped-call]
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
        answer = b""
        try:
            async with client.stream("GET", path, params=params) as response:
                if not judged_by_status(response.status_code):
                    # Bounded as the hook's reads are: small for a webhook, large for /npai; raw
                    # bytes, so that decompression is bounded too (BoundedBody).
                    limit = response_limit(path)
                    if response.is_stream_consumed:
                        # Already read and decoded (an in-memory answer, e.g. httpx.MockTransport).
                        body = BoundedBody({}, response.status_code, endpoint, limit)
                        body.feed(response.content)
                    else:
                        body = BoundedBody(response.headers, response.status_code, endpoint, limit)
                        async for raw in response.aiter_raw():
                            body.feed(raw)
                    answer = body.result()
        except httpx.TransportError as exc:
            # httpx names the URL (never the headers) in its errors: no token can leak here.
            raise SmsTransportError(f"{endpoint}: {type(exc).__name__}: {str(exc)[:300]}") from None
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
