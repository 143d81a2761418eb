"""SmsHook: the one client of the SMS service used by operators, sensors and the notifier."""

from __future__ import annotations

import logging
import random
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import quote

import tenacity
from airflow.providers.common.compat.sdk import BaseHook

from airflow_provider_sms import DEFAULT_CONN_ID, codec
from airflow_provider_sms._compat import mask_secret
from airflow_provider_sms.exceptions import (
    SmsApiError,
    SmsAuthError,
    SmsError,
    SmsMaybeSentError,
    SmsTransportError,
    SmsValidationError,
)
from airflow_provider_sms.models import (
    CampaignResult,
    ListRef,
    Message,
    NpaiEntry,
    NpaiList,
    Recipient,
    RecipientInput,
    Webhook,
    build,
    parse_lists,
    parse_recipients,
)

if TYPE_CHECKING:
    import requests
    from airflow.providers.common.compat.sdk import Connection

# requests (with urllib3 and charset_normalizer) is imported where a call is made, not here: DAG files
# import this module through the operators, and requests would add about 35 ms to every parse.

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 30.0
# Page size for GET /npai: the service's other list endpoints accept at most 1000.
NPAI_PAGE_SIZE = 1000
# Largest answer read into memory; a bigger one is refused rather than exhausting the worker.
# This one is for GET /npai, which may legitimately be long when the service ignores paging.
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
# Largest answer of every other endpoint (a campaign result, a webhook record or an error): they are
# well under 1 KB, so reading megabytes of one is pointless; 1 MiB leaves room for a proxy's HTML page.
MAX_SMALL_RESPONSE_BYTES = 1024 * 1024
# Longest wait honoured from a Retry-After header.
MAX_RETRY_AFTER = 60.0


@dataclass(frozen=True)
class SmsConnectionSettings:
    """What the hook reads from the Airflow connection. The token is kept out of ``repr``."""

    base_url: str
    token: str = field(repr=False)
    format: codec.WireFormat = "json"
    timeout: float = DEFAULT_TIMEOUT
    default_sender: str | None = None
    verify: bool | str = True


class _Retryable(SmsTransportError):
    """A read-only call failed in a way worth trying again (connection, 429, 5xx)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def _parse_retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return min(max(float(value), 0.0), MAX_RETRY_AFTER)
    except ValueError:
        return None  # an HTTP date: fall back to our own backoff


def _nothing_sent(exc: requests.RequestException) -> bool:
    """True when the request certainly never reached the service (refused, DNS, connect timeout, TLS)."""
    import requests
    from urllib3.exceptions import NewConnectionError

    if isinstance(exc, (requests.ConnectTimeout, requests.exceptions.SSLError)):
        return True
    if isinstance(exc, requests.ConnectionError):
        reason = getattr(exc.args[0], "reason", None) if exc.args else None
        return isinstance(reason, NewConnectionError)
    return False


def connection_settings(
    conn: Connection,
    extra: Mapping[str, Any],
    *,
    conn_id: str,
    format_override: codec.WireFormat | None = None,
) -> SmsConnectionSettings:
    """Check an Airflow connection of type ``sms`` and turn it into settings (shared with the triggers).

    :param conn: the connection (host = base URL, password = access token).
    :param extra: its extra as a dict; passed apart because the triggerer reads it asynchronously.
    :param conn_id: the connection id, named in errors.
    :param format_override: ``json`` or ``xml`` given to the hook, winning over the extra's ``format``.
    """
    where = f"connection {conn_id!r}"
    token = conn.password or ""
    if not token:
        raise SmsValidationError.for_field("password", f"{where}: password (the access token) is empty")
    mask_secret(token)
    host = (conn.host or "").strip().rstrip("/")
    if not host:
        raise SmsValidationError.for_field("host", f"{where}: host (the base URL) is empty")
    if "://" not in host:
        scheme = conn.schema if conn.schema in ("http", "https") else "https"
        host = f"{scheme}://{host}"
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


def request_headers(settings: SmsConnectionSettings) -> dict[str, str]:
    """Headers of every request (bearer token, format); shared by the hook and the async triggers."""
    return {
        "Authorization": f"Bearer {settings.token}",
        "Accept": codec.CONTENT_TYPES[settings.format],
        "Content-Type": codec.CONTENT_TYPES[settings.format],
        "User-Agent": "airflow-provider-sms",
        # Only the encodings BoundedBody can decompress with a bound (no br/zstd even when installed).
        "Accept-Encoding": "gzip, deflate",
    }


def webhook_path(webhook_id: str | int) -> str:
    """The path of GET /webhook/:id, or SmsValidationError for an id that cannot be one."""
    text = str(webhook_id).strip()
    if not text or "/" in text:
        raise SmsValidationError.for_field("webhook_id", f"webhook_id={text!r}: give the webhook's id")
    return f"/webhook/{quote(text, safe='')}"


class NpaiPages:
    """The paging decision of GET /npai, shared by the hook and the async NPAI trigger.

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


def judged_by_status(http_status: int) -> bool:
    """True for 429 and 5xx: judged by their status alone, their body (maybe a huge HTML page) never read."""
    return http_status == 429 or http_status >= 500


def check_read_response(
    http_status: int,
    reason: str,
    retry_after: str | None,
    answer: bytes,
    fmt: codec.WireFormat,
    endpoint: str,
) -> None:
    """Judge the HTTP status of a read-only call (shared by the hook and the async triggers).

    429 and 5xx raise :class:`_Retryable` (with the Retry-After to honour); any other non-2xx raises
    the service's error from the body (e.g. :class:`SmsNotFoundError` for status -5); a 2xx that is
    empty or an HTML page raises :func:`not_an_answer`'s error, not retried.
    """
    if judged_by_status(http_status):
        raise _Retryable(f"{endpoint}: HTTP {http_status}", retry_after=_parse_retry_after(retry_after))
    if http_status >= 400:
        _raise_client_error(http_status, reason, answer, fmt, endpoint)
    unreadable = not_an_answer(http_status, answer, fmt, endpoint)
    if unreadable is not None:
        raise unreadable


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


def response_limit(path: str) -> int:
    """The most bytes read of an answer from ``path`` (shared by the hook and the async triggers).

    GET /npai gets :data:`MAX_RESPONSE_BYTES`; every other endpoint :data:`MAX_SMALL_RESPONSE_BYTES`.
    Read at call time, so that tests can lower them.
    """
    return MAX_RESPONSE_BYTES if path == "/npai" else MAX_SMALL_RESPONSE_BYTES


def declared_too_large(headers: Mapping[str, str], limit: int) -> bool:
    """True when the answer's ``Content-Length`` already says it is longer than ``limit`` bytes."""
    try:
        return int(headers.get("Content-Length") or 0) > limit
    except ValueError:
        return False  # a malformed length: the streamed count still bounds the read


class ResponseTooLargeError(SmsApiError):
    """An answer longer than its endpoint's limit (:func:`response_limit`), refused unread."""


def response_too_large(http_status: int, endpoint: str, limit: int | None = None) -> ResponseTooLargeError:
    """The error for an answer larger than ``limit`` bytes (refused instead of exhausting memory).

    :param limit: the limit that was exceeded; by default the endpoint's (:func:`response_limit`).
    """
    if limit is None:
        limit = response_limit(endpoint.split(" ", 1)[-1])
    size = f"{limit // (1024 * 1024)} MiB" if limit % (1024 * 1024) == 0 else f"{limit} bytes"
    return ResponseTooLargeError(
        None,
        f"the answer is too large: larger than {size}, the most an answer of this endpoint may be; "
        "refused without reading the rest",
        http_status=http_status,
        endpoint=endpoint,
    )


class BoundedBody:
    """Decode an answer's raw bytes as they arrive, refusing it once it exceeds ``limit`` bytes.

    For clients that decompress whole network chunks at once (httpx: a 50 KB gzip chunk becomes
    50 MB in one piece), the decompression itself is bounded here, so a compression bomb costs at
    most ``limit`` bytes. Used by the async triggers; the hook's urllib3 already decompresses with
    a bound.

    :param headers: the answer's headers (``Content-Encoding``, ``Content-Length``).
    :param http_status: the answer's HTTP status, for the error.
    :param endpoint: ``METHOD /path``, for the error.
    :param limit: the most decoded bytes accepted (:func:`response_limit`).
    """

    def __init__(self, headers: Mapping[str, str], http_status: int, endpoint: str, limit: int) -> None:
        self.http_status = http_status
        self.endpoint = endpoint
        self.limit = limit
        self.size = 0
        self._chunks: list[bytes] = []
        if declared_too_large(headers, limit):
            raise response_too_large(http_status, endpoint, limit)
        encoding = (headers.get("Content-Encoding") or "identity").strip().lower()
        if encoding in ("gzip", "x-gzip", "deflate"):
            # 32 + MAX_WBITS: zlib or gzip header, detected; "deflate" is zlib-wrapped (RFC 9110).
            self._decoder: zlib._Decompress | None = zlib.decompressobj(32 + zlib.MAX_WBITS)
        elif encoding == "identity":
            self._decoder = None
        else:
            raise SmsApiError(
                None,
                f"the answer uses Content-Encoding {encoding!r}, which was not asked for "
                "(only gzip and deflate are accepted)",
                http_status=http_status,
                endpoint=endpoint,
            )

    def feed(self, raw: bytes) -> None:
        """Take the next raw bytes of the answer (as received, still compressed)."""
        if self._decoder is None:
            self._add(raw)
            return
        try:
            data = raw
            while data:
                # Never more than one byte beyond the limit per call: the bomb is not expanded.
                self._add(self._decoder.decompress(data, self.limit - self.size + 1))
                data = self._decoder.unconsumed_tail
        except zlib.error as exc:
            raise SmsApiError(
                None,
                f"the compressed answer could not be decoded ({exc})",
                http_status=self.http_status,
                endpoint=self.endpoint,
            ) from None

    def result(self) -> bytes:
        """The whole decoded answer."""
        if self._decoder is not None:
            self._add(self._decoder.flush())
        return b"".join(self._chunks)

    def _add(self, data: bytes) -> None:
        self.size += len(data)
        if self.size > self.limit:
            raise response_too_large(self.http_status, self.endpoint, self.limit)
        self._chunks.append(data)


class SmsHook(BaseHook):
    """Client of the SMS campaign service.

    Sends are made exactly once: POST /send and /send/lists are never retried, and any failure after
    the request may have reached the service raises :class:`SmsMaybeSentError`. Simulations and reads
    are retried on connection errors, 429 (honouring Retry-After) and 5xx, with exponential backoff.

    :param sms_conn_id: the Airflow connection (type ``sms``): host = base URL, password = token.
    :param format: ``json`` or ``xml``; overrides the connection's ``format`` extra.
    :param max_tries: attempts for read-only and simulate calls (1 = no retry).
    :param backoff: first backoff in seconds (doubled each try, with jitter).
    """

    conn_name_attr = "sms_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = "sms"
    hook_name = "SMS campaign service"

    SEND_PATH: ClassVar[str] = "/send"
    SEND_LISTS_PATH: ClassVar[str] = "/send/lists"
    SIMULATE_PATH: ClassVar[str] = "/send/simulate"
    SIMULATE_LISTS_PATH: ClassVar[str] = "/send/lists/simulate"

    def __init__(
        self,
        sms_conn_id: str = default_conn_name,
        format: str | None = None,
        *,
        max_tries: int = 3,
        backoff: float = 0.5,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.sms_conn_id = sms_conn_id
        self._format_override = codec.check_format(format) if format is not None else None
        self.max_tries = max(1, max_tries)
        self.backoff = backoff

    # ------------------------------------------------------------------------------ connection

    @classmethod
    def get_connection_form_widgets(cls) -> dict[str, Any]:
        """Extra fields of the connection form for Airflow 3.0/3.1 (3.2+ reads ``conn-fields``)."""
        from flask_appbuilder.fieldwidgets import BS3TextFieldWidget
        from flask_babel import lazy_gettext
        from wtforms import BooleanField, StringField
        from wtforms.validators import AnyOf, Optional

        return {
            "format": StringField(
                lazy_gettext("Wire format"),
                widget=BS3TextFieldWidget(),
                validators=[Optional(), AnyOf(["json", "xml"])],
                default="json",
                description="json (default) or xml",
            ),
            "timeout": StringField(
                lazy_gettext("Timeout (seconds)"),
                widget=BS3TextFieldWidget(),
                validators=[Optional()],
                default="30",
            ),
            "default_sender": StringField(
                lazy_gettext("Default sender"), widget=BS3TextFieldWidget(), validators=[Optional()]
            ),
            "verify": BooleanField(lazy_gettext("Verify TLS certificate"), default=True),
        }

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Labels and hidden fields of the connection form (Airflow < 3.2 reads this)."""
        return {
            "hidden_fields": ["login", "schema", "port"],
            "relabeling": {"host": "Base URL", "password": "Access token"},
            "placeholders": {
                "host": "https://api.example-sms.com",
                "password": "access token (sent as Authorization: Bearer)",
            },
        }

    @cached_property
    def settings(self) -> SmsConnectionSettings:
        """The connection, read once and checked; the token is registered with the secrets masker."""
        conn = self.get_connection(self.sms_conn_id)
        return connection_settings(
            conn, conn.extra_dejson or {}, conn_id=self.sms_conn_id, format_override=self._format_override
        )

    @cached_property
    def session(self) -> requests.Session:
        """One HTTP session per hook: keep-alive across calls; no retries at the transport level."""
        import requests

        session = requests.Session()
        settings = self.settings
        session.headers.update(request_headers(settings))
        session.verify = settings.verify
        return session

    def get_conn(self) -> requests.Session:
        """The configured :class:`requests.Session` (Airflow's hook convention)."""
        return self.session

    @property
    def format(self) -> codec.WireFormat:
        """The wire format in use (``json`` or ``xml``)."""
        return self.settings.format

    # ---------------------------------------------------------------------------- public calls

    def prepare_message(self, message: Message | Mapping[str, Any]) -> Message:
        """Validate ``message``, filling ``sender`` from the connection's ``default_sender``."""
        if isinstance(message, Mapping) and not message.get("sender") and self.settings.default_sender:
            message = {**message, "sender": self.settings.default_sender}
        prepared = build(Message, message, "message")
        if prepared.sender is None and self.settings.default_sender:
            prepared = prepared.model_copy(update={"sender": self.settings.default_sender})
        return prepared

    def simulate(
        self, message: Message | Mapping[str, Any], recipients: Iterable[RecipientInput]
    ) -> CampaignResult:
        """Simulate a campaign to numbers (POST /send/simulate): cost and counts, nothing created.

        ``gsmsmsid`` values are dropped: they only matter on a real send.
        """
        prepared = self.prepare_message(message)
        numbers = [
            item.value if isinstance(item, Recipient) else item for item in parse_recipients(recipients)
        ]
        body = codec.encode_send(prepared, numbers, self.format)
        return self._campaign(self.SIMULATE_PATH, body, sends=False, count=len(numbers))

    def send(
        self, message: Message | Mapping[str, Any], recipients: Iterable[RecipientInput]
    ) -> CampaignResult:
        """Send a campaign to numbers (POST /send), exactly once."""
        prepared = self.prepare_message(message)
        prepared.check_sendable()
        numbers = parse_recipients(recipients)
        body = codec.encode_send(prepared, numbers, self.format)
        return self._campaign(self.SEND_PATH, body, sends=True, count=len(numbers))

    def simulate_lists(self, message: Message | Mapping[str, Any], lists: Iterable[object]) -> CampaignResult:
        """Simulate a campaign to stored lists (POST /send/lists/simulate)."""
        prepared = self.prepare_message(message)
        refs = self._lists(lists)
        body = codec.encode_lists(prepared, refs, self.format)
        return self._campaign(self.SIMULATE_LISTS_PATH, body, sends=False, count=len(refs))

    def send_lists(self, message: Message | Mapping[str, Any], lists: Iterable[object]) -> CampaignResult:
        """Send a campaign to stored lists (POST /send/lists), exactly once."""
        prepared = self.prepare_message(message)
        prepared.check_sendable()
        refs = self._lists(lists)
        body = codec.encode_lists(prepared, refs, self.format)
        return self._campaign(self.SEND_LISTS_PATH, body, sends=True, count=len(refs))

    def get_webhook(self, webhook_id: str | int) -> Webhook:
        """Read one webhook record (GET /webhook/:id)."""
        path = webhook_path(webhook_id)
        body = self._read("GET", path)
        return codec.decode_webhook(body, self.format, endpoint=f"GET {path}")

    def get_npai(self) -> NpaiList:
        """Read the whole NPAI list (GET /npai), following ``start``/``length`` pages if the service pages.

        Paging is not documented for /npai; :class:`NpaiPages` says how it is read. A service that
        ignores the parameters answers everything at once and one call is made.
        """
        pages = NpaiPages()
        while (params := pages.next_params()) is not None:
            pages.add(self._npai_page(params["start"], params["length"]))
        return pages.result()

    def test_connection(self) -> tuple[bool, str]:
        """Make one read-only call (GET /npai, first entry only) and say what happened."""
        try:
            settings = self.settings
            page = self._npai_page(0, length=1, tries=1)
        except SmsAuthError as exc:
            return False, f"The service rejected the access token (status {exc.status}): {exc.message}"
        except SmsTransportError as exc:
            return False, f"Could not reach the service: {exc}"
        except SmsError as exc:
            return False, str(exc)
        total = page.total_records if page.total_records is not None else len(page.entries)
        return (
            True,
            f"Connected to {settings.base_url} ({settings.format}): "
            f"access token accepted, {total} NPAI entries.",
        )

    # ------------------------------------------------------------------------------- internals

    def _lists(self, lists: Iterable[object]) -> list[ListRef]:
        if isinstance(lists, Mapping):
            lists = [lists]
        items = list(lists) if not isinstance(lists, (int, str)) else [lists]
        for index, item in enumerate(items):
            if isinstance(item, Mapping) and "gsmsmsid" in item:
                message = f"lists[{index}]: gsmsmsid is only valid on /send, not on list campaigns"
                raise SmsValidationError.for_field(f"lists[{index}]", message)
        return parse_lists(items)

    def _npai_page(self, start: int, length: int = NPAI_PAGE_SIZE, tries: int | None = None) -> NpaiList:
        body = self._read("GET", "/npai", params={"start": start, "length": length}, tries=tries)
        return codec.decode_npai(body, self.format, endpoint="GET /npai")

    def _campaign(self, path: str, body: bytes, *, sends: bool, count: int) -> CampaignResult:
        endpoint = f"POST {path}"
        what = "recipients" if "lists" not in path else "lists"
        self.log.info("%s: %s %s, %s bytes, %s", endpoint, count, what, len(body), self.format)
        if not sends:
            answer = self._read("POST", path, body=body)
            result = codec.decode_campaign_result(answer, self.format, endpoint=endpoint)
        else:
            result = self._send_once(path, body)
        self.log.info("%s: %s", endpoint, result.summary())
        return result

    def _send_once(self, path: str, body: bytes) -> CampaignResult:
        endpoint = f"POST {path}"
        maybe = (
            f"{endpoint}: the campaign may have been created and must not be sent again automatically; "
            "check the service's campaign history before sending it again"
        )
        import requests

        too_large: SmsApiError | None = None
        try:
            response = self.session.post(self._url(path), data=body, timeout=self._timeouts, stream=True)
            answer = self._body(response, endpoint, path)
        except requests.RequestException as exc:
            if _nothing_sent(exc):
                raise SmsTransportError(
                    f"{endpoint}: nothing was sent, the service could not be reached ({_describe(exc)})"
                ) from None
            raise SmsMaybeSentError(f"{maybe} ({_describe(exc)})") from None
        except ResponseTooLargeError as exc:
            too_large = exc
        if response.status_code == 429:
            raise SmsTransportError(
                f"{endpoint}: rate limited (HTTP 429, Retry-After {response.headers.get('Retry-After')}); "
                "the service refused the request, nothing was sent"
            )
        if response.status_code >= 500:
            raise SmsMaybeSentError(f"{maybe} (HTTP {response.status_code})")
        if too_large is not None:
            if response.ok:
                # The service took the request and answered something we will not read.
                raise SmsMaybeSentError(f"{maybe} (HTTP {response.status_code}, {too_large.message})")
            raise too_large
        unreadable = (
            not_an_answer(response.status_code, answer, self.format, endpoint) if response.ok else None
        )
        if unreadable is not None:
            # 2xx but not an answer: the request was taken by something, we cannot tell what it did.
            raise SmsMaybeSentError(f"{maybe} ({unreadable.message})")
        try:
            return codec.decode_campaign_result(answer, self.format, endpoint=endpoint)
        except SmsApiError as exc:
            if exc.status == -8:
                raise SmsMaybeSentError(f"{maybe} (status -8: {exc.message})") from None
            if exc.status is None and response.ok:
                # 2xx but unreadable: the service took the request, we cannot tell what it did.
                raise SmsMaybeSentError(f"{maybe} (HTTP {response.status_code}, {exc.message})") from None
            exc.http_status = response.status_code
            raise

    def _read(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        params: Mapping[str, Any] | None = None,
        tries: int | None = None,
    ) -> bytes:
        """A call safe to repeat (GET, simulate): retried on connection errors, 429 and 5xx."""
        endpoint = f"{method} {path}"
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(tries or self.max_tries),
            wait=self._wait,
            retry=tenacity.retry_if_exception_type(_Retryable),
            before_sleep=self._log_retry(endpoint),
            reraise=True,
        )
        try:
            for attempt in retrying:
                with attempt:
                    return self._call_once(method, path, body, params, endpoint)
        except _Retryable as exc:
            raise SmsTransportError(str(exc)) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _call_once(
        self, method: str, path: str, body: bytes | None, params: Mapping[str, Any] | None, endpoint: str
    ) -> bytes:
        import requests

        try:
            response = self.session.request(
                method, self._url(path), data=body, params=params, timeout=self._timeouts, stream=True
            )
            answer = self._body(response, endpoint, path)
        except requests.RequestException as exc:
            raise _Retryable(f"{endpoint}: {_describe(exc)}") from None
        check_read_response(
            response.status_code,
            response.reason,
            response.headers.get("Retry-After"),
            answer,
            self.format,
            endpoint,
        )
        return answer

    def _body(self, response: requests.Response, endpoint: str, path: str) -> bytes:
        """Read the answer, refusing one larger than ``path``'s limit instead of exhausting memory.

        The one place the hook reads bodies: a 429 or 5xx is not read (:func:`judged_by_status`), a
        ``Content-Length`` over the limit is refused before reading; otherwise the (decompressed)
        bytes are counted as they stream in.
        """
        with response:
            if judged_by_status(response.status_code):
                return b""
            limit = response_limit(path)
            if declared_too_large(response.headers, limit):
                raise response_too_large(response.status_code, endpoint, limit)
            chunks = []
            size = 0
            for chunk in response.iter_content(chunk_size=min(limit + 1, 256 * 1024)):
                size += len(chunk)
                if size > limit:
                    raise response_too_large(response.status_code, endpoint, limit)
                chunks.append(chunk)
        return b"".join(chunks)

    def _url(self, path: str) -> str:
        return self.settings.base_url + path

    @property
    def _timeouts(self) -> tuple[float, float]:
        timeout = self.settings.timeout
        return (min(timeout, 10.0), timeout)

    def _wait(self, retry_state: tenacity.RetryCallState) -> float:
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        if isinstance(exc, _Retryable) and exc.retry_after is not None:
            return exc.retry_after
        exponential = self.backoff * 2.0 ** (retry_state.attempt_number - 1)
        return exponential + random.uniform(0, self.backoff)

    def _log_retry(self, endpoint: str) -> Callable[[tenacity.RetryCallState], None]:
        def before_sleep(retry_state: tenacity.RetryCallState) -> None:
            exc = retry_state.outcome.exception() if retry_state.outcome else None
            wait = retry_state.next_action.sleep if retry_state.next_action else 0
            self.log.warning(
                "%s failed (%s); try %s of %s in %.1fs",
                endpoint,
                exc,
                retry_state.attempt_number + 1,
                self.max_tries,
                wait,
            )

        return before_sleep


def _describe(exc: requests.RequestException) -> str:
    """A short, token-free description of a transport error."""
    reason = getattr(exc.args[0], "reason", None) if exc.args else None
    text = str(reason or exc)
    return f"{type(exc).__name__}: {text[:300]}"
