"""The HTTP layer under both hooks: connection settings, headers, endpoint paths and how answers are judged.

:class:`~airflow_provider_sms.hooks.sms.SmsHook` (requests) and
:class:`~airflow_provider_sms.hooks.sms.SmsAsyncHook` (httpx) differ only in how bytes travel; what
they send and how they read what comes back is decided here, once: the settings read from the Airflow
connection, the headers, the paths, the size limit of each endpoint's answers (read within it by
:mod:`airflow_provider_sms._bounded_body`), the paging of GET /npai, and the verdict on an answer
(retry, the service's error, "maybe sent", or the decoded result).

Not public API: import the hooks instead.
"""

from __future__ import annotations

import json
import logging
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from airflow_provider_sms import _bounded_body, codec
from airflow_provider_sms._compat import mask_secret
from airflow_provider_sms._task_arguments import check_webhook_id
from airflow_provider_sms.exceptions import (
    ResponseTooLargeError,
    SmsApiError,
    SmsAuthError,
    SmsMaybeSentError,
    SmsTransportError,
    SmsValidationError,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from airflow_provider_sms.models import CampaignResult, NpaiEntry, NpaiList

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 30.0
# Page size for GET /npai: the service's other list endpoints accept at most 1000.
NPAI_PAGE_SIZE = 1000
# Longest wait honoured from a Retry-After header.
MAX_RETRY_AFTER = 60.0

SEND_PATH = "/send"
SEND_LISTS_PATH = "/send/lists"
SIMULATE_PATH = "/send/simulate"
SIMULATE_LISTS_PATH = "/send/lists/simulate"
NPAI_PATH = "/npai"


def webhook_path(webhook_id: str | int) -> str:
    """The path of GET /webhook/:id, or SmsValidationError for an id that cannot be one."""
    return f"/webhook/{quote(check_webhook_id(webhook_id), safe='')}"


# ------------------------------------------------------------------------------------ connection


@dataclass(frozen=True)
class SmsConnectionSettings:
    """What the hooks read from the Airflow connection. The token is kept out of ``repr``."""

    base_url: str
    token: str = field(repr=False)
    format: codec.WireFormat = "json"
    timeout: float = DEFAULT_TIMEOUT
    default_sender: str | None = None
    verify: bool | str = True


def connection_extra(conn: Any, *, conn_id: str) -> dict[str, Any]:
    """The connection's extra as a dict, decoded from its JSON text.

    Not ``extra_dejson``: that hands every value of the extra to Airflow's secrets masker, which warns
    "Skipping masking for a secret as it's too short" for ``"json"`` (the format) in every task, and
    in the triggerer it is a blocking call to the supervisor. None of this connection's extras is a
    secret (the token is its password, masked apart by :func:`connection_settings`).

    :param conn: the connection.
    :param conn_id: its id, named in errors.
    """
    text = conn.extra or ""
    if not text.strip():
        return {}
    try:
        extra = json.loads(text)
    except ValueError:
        extra = None
    if not isinstance(extra, dict):
        raise SmsValidationError.for_field("extra", f"connection {conn_id!r}: extra is not a JSON object")
    return extra


def connection_settings(
    conn: Any,
    *,
    conn_id: str,
    format_override: codec.WireFormat | None = None,
) -> SmsConnectionSettings:
    """Check an Airflow connection of type ``sms`` and turn it into settings.

    :param conn: the connection (host = base URL, password = access token, extra as JSON text).
    :param conn_id: the connection id, named in errors.
    :param format_override: ``json`` or ``xml`` given to the hook, winning over the extra's ``format``.
    """
    where = f"connection {conn_id!r}"
    extra = connection_extra(conn, conn_id=conn_id)
    token = conn.password or ""
    if not token:
        raise SmsValidationError.for_field("password", f"{where}: password (the access token) is empty")
    mask_secret(token)
    host = (conn.host or "").strip().rstrip("/")
    if not host:
        raise SmsValidationError.for_field("host", f"{where}: host (the base URL) is empty")
    if "://" not in host:
        if conn.schema not in ("http", "https"):
            # Guessing would be wrong one way or the other: https to a plain-HTTP server fails with
            # an obscure TLS error after retries, http to the real service sends the token in clear.
            # The hint keeps the port the connection gives apart (the URI form's host:port).
            shown = f"{host}:{conn.port}" if conn.port and ":" not in host else host
            raise SmsValidationError.for_field(
                "host",
                f"{where}: the Base URL (host) {host!r} has no scheme; write it with one, e.g. "
                f"'https://{shown}' for the service or 'http://{shown}' for a local sandbox",
            )
        host = f"{conn.schema}://{host}"
    if conn.port and host.count(":") < 2:
        scheme, rest = host.split("://", 1)
        hostname, _, path = rest.partition("/")
        host = f"{scheme}://{hostname}:{conn.port}" + (f"/{path}" if path else "")
    try:
        fmt = format_override or codec.check_format(extra.get("format") or "json")
        timeout = float(extra.get("timeout") or DEFAULT_TIMEOUT)
    except (TypeError, ValueError) as exc:
        raise SmsValidationError.for_field("extra", f"{where}: extra {exc}") from None
    if timeout <= 0:
        raise SmsValidationError.for_field("timeout", f"{where}: extra timeout must be > 0, got {timeout}")
    verify = extra.get("verify", True)
    if isinstance(verify, str) and verify.lower() in ("true", "false"):
        verify = verify.lower() == "true"
    return SmsConnectionSettings(
        base_url=host,
        token=token,
        format=fmt,
        timeout=timeout,
        default_sender=extra.get("default_sender") or None,
        verify=verify,
    )


@contextmanager
def naming_connection(conn_id: str) -> Iterator[None]:
    """A refused access token (status -1) raised in the block names the Airflow connection to fix.

    :param conn_id: the id of the connection whose password was sent.
    """
    try:
        yield
    except SmsAuthError as exc:
        exc.name_connection(conn_id)
        raise


def request_headers(settings: SmsConnectionSettings) -> dict[str, str]:
    """Headers of every request: bearer token, wire format, and the encodings that the size bound decodes."""
    return {
        "Authorization": f"Bearer {settings.token}",
        "Accept": codec.CONTENT_TYPES[settings.format],
        "Content-Type": codec.CONTENT_TYPES[settings.format],
        "User-Agent": "airflow-provider-sms",
        # Only encodings whose decompression is bounded (no br/zstd even when installed).
        "Accept-Encoding": "gzip, deflate",
    }


# ---------------------------------------------------------------------------------------- paging


class NpaiPages:
    """How GET /npai is read page by page, for both hooks.

    Paging is not documented for /npai: pages of ``length`` (1000, what the service's other list
    endpoints take at most) are asked with ``start``, and reading goes on while ``totalRecords`` says
    entries are missing. A service that ignores the parameters answers everything at once; a page
    that brings nothing new ends the reading with a warning rather than looping.

    :param length: page size asked for.
    """

    def __init__(self, length: int = NPAI_PAGE_SIZE) -> None:
        self.length = length
        self._first: NpaiList | None = None
        self._entries: list[NpaiEntry] = []
        self._seen: set[str] = set()
        self._stalled = False

    def next_params(self) -> dict[str, int] | None:
        """The query of the next page to read, or ``None`` when the list is complete."""
        if self._first is None:
            return {"start": 0, "length": self.length}
        total = self._first.total_records
        if self._stalled or total is None or len(self._entries) >= total:
            return None
        return {"start": len(self._entries), "length": self.length}

    def add(self, page: NpaiList) -> None:
        """Take in the page just read (duplicates of entries already read are dropped)."""
        new = [entry for entry in page.entries if entry.id not in self._seen]
        if self._first is None:
            self._first = page
        elif not new:
            log.warning(
                "GET /npai: totalRecords is %s but only %s entries could be read; keeping those",
                self._first.total_records,
                len(self._entries),
            )
            self._stalled = True
        self._seen.update(entry.id for entry in new)
        self._entries.extend(new)

    def result(self) -> NpaiList:
        """Every entry read, in the first page's envelope."""
        if self._first is None:
            raise RuntimeError("no page of GET /npai was read")
        return self._first.model_copy(
            update={"entries": self._entries, "total_display_records": len(self._entries)}
        )


# ------------------------------------------------------------------------------- reading answers


def response_limit(path: str) -> int:
    """The most bytes read of an answer from ``path``.

    GET /npai gets :data:`~airflow_provider_sms._bounded_body.MAX_RESPONSE_BYTES`; every other
    endpoint :data:`~airflow_provider_sms._bounded_body.MAX_SMALL_RESPONSE_BYTES`. Read at call time,
    so that tests can lower them.
    """
    if path == NPAI_PATH:
        return _bounded_body.MAX_RESPONSE_BYTES
    return _bounded_body.MAX_SMALL_RESPONSE_BYTES


def judged_by_status(http_status: int) -> bool:
    """True for 408, 429 and 5xx: judged by their status alone, their body (maybe an HTML page) never read.

    On a read they are retried; on a send, 429 is a refusal and the others leave it "maybe sent".
    """
    return http_status in (408, 429) or http_status >= 500


def parse_retry_after(value: str | None) -> float | None:
    """A Retry-After header in seconds, capped at :data:`MAX_RETRY_AFTER` (``None`` for an HTTP date)."""
    if not value:
        return None
    try:
        return min(max(float(value), 0.0), MAX_RETRY_AFTER)
    except ValueError:
        return None  # an HTTP date: fall back to our own backoff


# --------------------------------------------------------------------------------------- verdicts


# How an HTML page starts (a web site's, a proxy's, a captive portal's): never an answer of the service.
_HTML_STARTS = (b"<!doctype html", b"<html")


def not_an_answer(
    http_status: int, answer: bytes, fmt: codec.WireFormat, endpoint: str
) -> SmsApiError | None:
    """The error for a 2xx answer that is certainly not the service's (empty, or an HTML page), else None.

    A server answered in full, so repeating the call would get the same: the usual cause is a base
    URL that points at a web site, or a proxy answering in the service's place. The error says so,
    rather than "not valid JSON" or, in XML, "DOCTYPE refused as unsafe".
    """
    head = answer.lstrip()[:64]
    if not head:
        what = "an empty body"
    elif head.lower().startswith(_HTML_STARTS):
        what = f"an HTML page (it starts with {answer[:60]!r})"
    else:
        return None
    return SmsApiError(
        None,
        f"HTTP {http_status} with {what} instead of a {fmt.upper()} answer of the service: check that the "
        "connection's host is the service's API base URL and that no proxy answers in its place",
        body=answer[:200],
        http_status=http_status,
        endpoint=endpoint,
    )


def check_read_response(
    http_status: int,
    reason: str,
    retry_after: str | None,
    answer: bytes,
    fmt: codec.WireFormat,
    endpoint: str,
) -> None:
    """Judge the HTTP status of a call safe to repeat (a read or a simulation).

    408, 429 and 5xx raise :class:`SmsTransportError` with the Retry-After to honour (the caller retries);
    any other non-2xx raises the service's error from the body (e.g. :class:`SmsNotFoundError` for
    status -5); a 2xx that is empty or an HTML page raises :func:`not_an_answer`'s error, not retried.
    """
    if judged_by_status(http_status):
        raise SmsTransportError(f"{endpoint}: HTTP {http_status}", retry_after=parse_retry_after(retry_after))
    if http_status >= 400:
        _raise_client_error(http_status, reason, answer, fmt, endpoint)
    unreadable = not_an_answer(http_status, answer, fmt, endpoint)
    if unreadable is not None:
        raise unreadable


def _raise_client_error(
    http_status: int, reason: str, answer: bytes, fmt: codec.WireFormat, endpoint: str
) -> None:
    try:
        envelope = codec.decode_envelope(answer, fmt)
    except SmsApiError:
        raise SmsApiError(
            None,
            f"HTTP {http_status} {reason}",
            body=answer[:200],
            http_status=http_status,
            endpoint=endpoint,
        ) from None
    codec.raise_for_status(envelope.model_dump(), body=answer, endpoint=endpoint, http_status=http_status)
    raise SmsApiError(1, f"HTTP {http_status} with status 1", http_status=http_status, endpoint=endpoint)


# Statuses by which the service refuses a request, documented as such: nothing was created.
REFUSAL_STATUSES = frozenset({-1, -2, -3, -4, -5, -6, -7})


def maybe_sent(endpoint: str, why: str) -> SmsMaybeSentError:
    """The error of a send whose outcome is unknown, saying why and what to check."""
    return SmsMaybeSentError(
        f"{endpoint}: the campaign may have been created and must not be sent again automatically; "
        f"check the service's campaign history before sending it again ({why})"
    )


def judge_send(
    http_status: int,
    reason: str,
    retry_after: str | None,
    answer: bytes,
    too_large: ResponseTooLargeError | None,
    fmt: codec.WireFormat,
    endpoint: str,
) -> CampaignResult:
    """The verdict on the answer to POST /send or /send/lists: the result, a refusal, or "maybe sent".

    A send is never repeated, so only a definite refusal may say that nothing was sent: a refusal
    status in the body (-1 to -7, :data:`REFUSAL_STATUSES`), or an HTTP 4xx other than 408 whose body
    does not claim success (429 included: SmsTransportError). Every other answer is
    SmsMaybeSentError: 408, 5xx, status -8 or -99 or one the service does not document, a success
    whose body does not have the documented shape, a 2xx that cannot be read, a 4xx saying status 1.

    :param too_large: set when the body was refused for its size (``answer`` is then empty).
    """
    if http_status == 429:
        raise SmsTransportError(
            f"{endpoint}: rate limited (HTTP 429, Retry-After {retry_after}); "
            "the service refused the request, nothing was sent",
            retry_after=parse_retry_after(retry_after),
        )
    if 400 <= http_status < 500 and http_status != 408:
        if too_large is not None:
            raise too_large
        try:
            _raise_client_error(http_status, reason, answer, fmt, endpoint)
        except SmsApiError as exc:
            if exc.status in (1, -8):
                raise maybe_sent(
                    endpoint, f"HTTP {http_status} with a body saying status {exc.status}"
                ) from None
            raise
    if not 200 <= http_status < 300:
        raise maybe_sent(endpoint, f"HTTP {http_status}")
    if too_large is not None:
        # The service took the request and answered something we will not read.
        raise maybe_sent(endpoint, f"HTTP {http_status}, {too_large.message}")
    unreadable = not_an_answer(http_status, answer, fmt, endpoint)
    if unreadable is not None:
        # Not an answer: the request was taken by something, we cannot tell what it did.
        raise maybe_sent(endpoint, unreadable.message)
    try:
        return codec.decode_campaign_result(answer, fmt, endpoint=endpoint)
    except SmsApiError as exc:
        exc.http_status = http_status
        if exc.status in REFUSAL_STATUSES:
            raise
        status = "no status" if exc.status is None else f"status {exc.status}"
        raise maybe_sent(endpoint, f"HTTP {http_status}, {status}: {exc.message}") from None
