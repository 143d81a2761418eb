"""The client of the receiver's summary, for the delivery-reports sensor and trigger. Not public API.

The summary is served by Airflow's own API server, not by the service, so it has its own client: the
service's access token never travels there, only the key derived from it
(:func:`~airflow_provider_sms.delivery_reports.settings.read_key`). Every answer is judged by
:func:`judge_summary`: 401 and 404 cannot be cured by waiting; connection errors, 429 and 5xx only
mean "not yet".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_provider_sms import codec
from airflow_provider_sms._bounded_body import MAX_RESPONSE_BYTES, BoundedBody
from airflow_provider_sms.exceptions import SmsAuthError, SmsNotFoundError, SmsTransportError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from airflow_provider_sms.delivery_reports.summary import DeliverySummary

SUMMARY_TIMEOUT = 30.0


@dataclass(frozen=True)
class SummaryRequest:
    """One request of the summary: where, with which key, for which campaigns."""

    url: str
    key: str = field(repr=False)
    campaign_ids: Sequence[int]
    with_failed: bool = False

    def params(self) -> list[tuple[str, str | int | float | bool | None]]:
        """The query string's parameters."""
        params: list[tuple[str, str | int | float | bool | None]] = [
            ("campaign_id", cid) for cid in self.campaign_ids
        ]
        return [*params, ("failed", "true" if self.with_failed else "false")]

    def headers(self) -> dict[str, str]:
        """The key, as a bearer."""
        return {"Authorization": f"Bearer {self.key}", "Accept": "application/json"}


def judge_summary(http_status: int, body: bytes, url: str) -> DeliverySummary:
    """The summary in an answer, or the error that says what to do about it."""
    if http_status == 401:
        raise SmsAuthError(
            None,
            f"the delivery-reports summary at {url} refused the key (HTTP 401): the API server and this "
            "worker must read the same sms connection (same access token)",
            http_status=401,
        )
    if http_status == 404:
        raise SmsNotFoundError(
            None,
            f"no delivery-reports summary at {url} (HTTP 404): {body[:200]!r}; is the provider installed on "
            "the API server, and does the connection's extra set dlr_webhook_id?",
            http_status=404,
        )
    if http_status == 429 or http_status >= 500:
        raise SmsTransportError(f"the delivery-reports summary at {url} answered HTTP {http_status}")
    if not 200 <= http_status < 300:
        raise SmsNotFoundError(
            None,
            f"the delivery-reports summary at {url} answered HTTP {http_status}",
            http_status=http_status,
        )
    return codec.decode_delivery_summary(body)


def _bounded(http_status: int, headers: Any, url: str) -> BoundedBody:
    # Raw bytes from httpx: BoundedBody decompresses them within the bound.
    return BoundedBody(headers, http_status, f"GET {url}", MAX_RESPONSE_BYTES)


def _unreachable(url: str, exc: Exception) -> SmsTransportError:
    return SmsTransportError(f"the delivery-reports summary at {url} is unreachable: {exc}")


def fetch_summary(request: SummaryRequest) -> DeliverySummary:
    """Read the summary (blocking: the sensor's poke and the end of a deferred wait)."""
    import httpx

    try:
        with (
            httpx.Client(timeout=SUMMARY_TIMEOUT) as http,
            http.stream("GET", request.url, params=request.params(), headers=request.headers()) as answer,
        ):
            body = _bounded(answer.status_code, answer.headers, request.url)
            for chunk in answer.iter_raw():
                body.feed(chunk)
            return judge_summary(answer.status_code, body.result(), request.url)
    except httpx.HTTPError as exc:
        raise _unreachable(request.url, exc) from None


async def afetch_summary(request: SummaryRequest) -> DeliverySummary:
    """Read the summary without blocking the event loop (the trigger)."""
    import httpx

    try:
        async with (
            httpx.AsyncClient(timeout=SUMMARY_TIMEOUT) as http,
            http.stream("GET", request.url, params=request.params(), headers=request.headers()) as answer,
        ):
            body = _bounded(answer.status_code, answer.headers, request.url)
            async for chunk in answer.aiter_raw():
                body.feed(chunk)
            return judge_summary(answer.status_code, body.result(), request.url)
    except httpx.HTTPError as exc:
        raise _unreachable(request.url, exc) from None
