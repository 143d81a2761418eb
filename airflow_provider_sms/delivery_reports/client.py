"""The client of the receiver's summary and batches, for the delivery-reports sensor and trigger and
for ``reports_from_events``. Not public API.

They are served by Airflow's own API server, not by the service, so they have their own client: the
service's access token never travels there, only the key derived from it
(:func:`~airflow_provider_sms.delivery_reports.settings.read_key`). Every answer is judged by
:func:`judge_answer`: 401 and 404 cannot be cured by waiting; a 500 (the tables missing) fails the
try; connection errors, 429 and the other 5xx only mean "not yet". A 401 is asked again for as long as
the API server may still hold a connection's previous token (its connection cache): after a rotation
the worker already has the new one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from airflow_provider_sms._bounded_body import MAX_RESPONSE_BYTES, BoundedBody
from airflow_provider_sms.delivery_reports.summary import decode_batch_page, decode_delivery_summary
from airflow_provider_sms.exceptions import (
    SmsApiError,
    SmsAuthError,
    SmsNotFoundError,
    SmsTransportError,
    SmsValidationError,
)

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from airflow_provider_sms.delivery_reports.summary import DeliverySummary, StoredReport
    from airflow_provider_sms.hooks.sms import SmsHook

SUMMARY_TIMEOUT = 30.0
# Between two askings of a refused key, while the API server may still hold the previous token.
KEY_REFUSED_PAUSE = 5.0
# Who answers here, as errors name it: not the SMS service.
API_SERVER = "the Airflow API server"


@dataclass(frozen=True)
class ReceiverAccess:
    """How a worker or the triggerer reaches the receiver of one connection: its URL and the key.

    :param conn_id: the ``sms`` connection.
    :param extra: its extra (``dlr_api_url``).
    :param key: the key derived from its access token.
    """

    conn_id: str
    extra: dict[str, Any] = field(repr=False)
    key: str = field(repr=False)

    @classmethod
    def of(cls, hook: SmsHook) -> ReceiverAccess:
        """The access of ``hook``'s connection (read through the hook, as a task reads connections)."""
        from airflow_provider_sms.delivery_reports.settings import read_key
        from airflow_provider_sms.hooks.sms import connection_extra

        extra = connection_extra(hook.get_connection(hook.sms_conn_id), conn_id=hook.sms_conn_id)
        return cls(hook.sms_conn_id, extra, read_key(hook.settings.token))

    def url(self, path: str, **fields: Any) -> str:
        """The URL of the receiver's endpoint ``path`` (``[api] base_url`` unless ``dlr_api_url`` says)."""
        from airflow.configuration import conf

        from airflow_provider_sms.delivery_reports.settings import receiver_url

        default = conf.get("api", "base_url", fallback="")
        return receiver_url(self.extra, conn_id=self.conn_id, default_api_url=default, path=path, **fields)


@dataclass(frozen=True)
class SummaryRequest:
    """One request of the summary: where, with which key, for which campaigns.

    :param failed_after: where the page of failed numbers starts: a previous answer's ``failed_next``,
        an opaque position (never a number: the URL goes to the API server's access log).
    """

    url: str
    key: str = field(repr=False)
    campaign_ids: Sequence[int]
    with_failed: bool = False
    failed_after: int | None = None

    def params(self) -> list[tuple[str, str | int | float | bool | None]]:
        """The query string's parameters."""
        params: list[tuple[str, str | int | float | bool | None]] = [
            ("campaign_id", cid) for cid in self.campaign_ids
        ]
        params.append(("failed", "true" if self.with_failed else "false"))
        if self.failed_after is not None:
            params.append(("failed_after", self.failed_after))
        return params

    def headers(self) -> dict[str, str]:
        """The key, as a bearer."""
        return {"Authorization": f"Bearer {self.key}", "Accept": "application/json"}


def judge_summary(http_status: int, body: bytes, url: str) -> DeliverySummary:
    """The summary in an answer, or the error that says what to do about it."""
    judge_answer(http_status, body, url)
    return decode_delivery_summary(body)


def judge_answer(http_status: int, body: bytes, url: str) -> None:
    """Raise the error that says what to do about an answer of the receiver that is not a 2xx.

    401 and 404 cannot be cured by waiting (the task fails at once); 500 is the API server failing to
    read its tables (missing until ``airflow db migrate``: the try fails, a retry may find them);
    429 and the other 5xx only mean "not yet".
    """
    if 200 <= http_status < 300:
        return
    detail = _detail(body)
    if http_status == 401:
        raise SmsAuthError(
            None,
            f"it refused the key at {url}: the API server and this worker must read the same sms "
            "connection (same access token)",
            http_status=401,
            source=API_SERVER,
        )
    if http_status == 404:
        raise SmsNotFoundError(
            None,
            f"{detail} ({url}); is the provider installed on the API server, and does the connection's "
            "extra set dlr_webhook_id?",
            http_status=404,
            source=API_SERVER,
        )
    if http_status == 500:
        raise SmsApiError(None, f"{detail} ({url})", http_status=500, source=API_SERVER)
    if http_status == 429 or http_status > 500:
        raise SmsTransportError(f"{API_SERVER} answered HTTP {http_status} at {url}: {detail}")
    raise SmsNotFoundError(None, f"{detail} ({url})", http_status=http_status, source=API_SERVER)


def _detail(body: bytes) -> str:
    """The ``detail`` of an error answer of the API server, as text (its start when it has none)."""
    try:
        detail = json.loads(body).get("detail")
    except (ValueError, AttributeError):
        detail = None
    text = detail if isinstance(detail, str) else body[:200].decode("utf-8", errors="replace")
    return text.strip() or "no detail"


def _bounded(http_status: int, headers: Any, url: str) -> BoundedBody:
    # Raw bytes from httpx: BoundedBody decompresses them within the bound.
    return BoundedBody(headers, http_status, f"GET {url}", MAX_RESPONSE_BYTES)


def _unreachable(url: str, exc: Exception) -> SmsTransportError:
    return SmsTransportError(f"{API_SERVER}'s delivery-report receiver at {url} is unreachable: {exc}")


def _key_retrying() -> dict[str, Any]:
    """How a read whose key was refused (401) is asked again: every :data:`KEY_REFUSED_PAUSE` seconds for
    as long as the API server keeps a connection it read (``CONNECTION_TTL``), then the 401 stands."""
    import tenacity

    from airflow_provider_sms.delivery_reports.connections import CONNECTION_TTL

    return {
        "retry": tenacity.retry_if_exception_type(SmsAuthError),
        "stop": tenacity.stop_after_delay(CONNECTION_TTL + KEY_REFUSED_PAUSE),
        "wait": tenacity.wait_fixed(KEY_REFUSED_PAUSE),
        "reraise": True,
    }


def _get(url: str, params: Any, headers: dict[str, str]) -> bytes:
    """GET one of the receiver's endpoints (blocking); its body once judged a 2xx (a refused key asked
    again while the API server may hold the previous token)."""
    import tenacity

    return tenacity.Retrying(**_key_retrying())(_get_once, url, params, headers)


def _get_once(url: str, params: Any, headers: dict[str, str]) -> bytes:
    import httpx

    try:
        with (
            httpx.Client(timeout=SUMMARY_TIMEOUT) as http,
            http.stream("GET", url, params=params, headers=headers) as answer,
        ):
            body = _bounded(answer.status_code, answer.headers, url)
            for chunk in answer.iter_raw():
                body.feed(chunk)
            content = body.result()
    except httpx.HTTPError as exc:
        raise _unreachable(url, exc) from None
    judge_answer(answer.status_code, content, url)
    return content


def check_receiver(access: ReceiverAccess, waits: str) -> str:
    """Whether a delivery-report wait on ``access``'s connection can work, before anything is sent: the
    connection receives reports, the API server's URL is known, and its receiver answers healthy (its
    tables are there). Returns the receiver's URL; raises SmsValidationError saying what to set.

    :param waits: the waiting tasks, as the error names them.
    """
    import httpx

    from airflow_provider_sms.delivery_reports.settings import HEALTH_PATH, receiver_settings

    reason = f"the delivery-report wait {waits} downstream cannot work, so nothing was sent"
    if receiver_settings(access.extra, conn_id=access.conn_id) is None:
        raise SmsValidationError.for_field(
            "dlr_webhook_id",
            f"{reason}: connection {access.conn_id!r} receives no delivery reports; set dlr_webhook_id in "
            "its extra (the DLR webhook the service posts them to; see the Delivery reports page)",
        )
    try:
        url = access.url(HEALTH_PATH)
    except SmsValidationError as exc:
        raise SmsValidationError.for_field("dlr_api_url", f"{reason}: {exc}") from None
    try:
        answer = httpx.get(url, timeout=SUMMARY_TIMEOUT)
    except httpx.HTTPError as exc:
        # Down or restarting, or a wrong dlr_api_url: Airflow's retries tell them apart.
        raise SmsTransportError(
            f"{reason} yet: {API_SERVER} does not answer at {url} ({exc}); check dlr_api_url"
        ) from None
    if answer.status_code == 200:
        return url
    detail = _detail(answer.content[:2000])
    problem = f"{API_SERVER} answered HTTP {answer.status_code} at {url}: {detail}"
    if answer.status_code == 404 or "airflow db migrate" in detail:
        # Not Airflow's API server with the provider, or its tables missing: a set-up to fix.
        raise SmsValidationError.for_field("dlr_api_url", f"{reason}: {problem}")
    raise SmsTransportError(f"{reason} yet: {problem}")


def fetch_summary(request: SummaryRequest) -> DeliverySummary:
    """Read the summary (blocking: the sensor's poke and the end of a deferred wait); with the failed
    numbers, every page of them."""
    summary = decode_delivery_summary(_get(request.url, request.params(), request.headers()))
    failed = list(summary.failed or [])
    while summary.failed_next is not None:
        request = replace(request, failed_after=summary.failed_next)
        summary = decode_delivery_summary(_get(request.url, request.params(), request.headers()))
        failed += summary.failed or []
    if request.with_failed:
        summary = summary.model_copy(update={"failed": failed})
    return summary


def fetch_batch(access: ReceiverAccess, batch: int) -> Iterator[StoredReport]:
    """Every report of ``batch`` (one asset event) of ``access``'s connection, by id, page by page."""
    from airflow_provider_sms.delivery_reports.settings import BATCH_PATH

    url = access.url(BATCH_PATH, batch=batch)
    headers = {"Authorization": f"Bearer {access.key}", "Accept": "application/json"}
    after_id: int | None = 0
    while after_id is not None:
        page = decode_batch_page(_get(url, {"after_id": after_id}, headers))
        yield from page.reports
        after_id = page.next_after_id


async def afetch_summary(request: SummaryRequest) -> DeliverySummary:
    """Read the summary without blocking the event loop (the trigger); a refused key is asked again as
    :func:`_get` does."""
    import tenacity

    summary: DeliverySummary = await tenacity.AsyncRetrying(**_key_retrying())(_afetch_summary_once, request)
    return summary


async def _afetch_summary_once(request: SummaryRequest) -> DeliverySummary:
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
