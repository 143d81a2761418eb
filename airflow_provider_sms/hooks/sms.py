"""The hooks of the SMS campaign service: SmsHook (requests) and SmsAsyncHook (httpx, for the triggers).

Both stand on :mod:`airflow_provider_sms.hooks._transport`, which owns the connection settings,
the headers, the paths, the size limit of each endpoint's answers (read within it by
:mod:`airflow_provider_sms._bounded_body`), the paging of GET /npai and the verdict on each
answer; the hooks only move bytes, the sync one with a requests session, the async one with an
httpx client.
"""

from __future__ import annotations

import random
import ssl
from collections.abc import Callable, Iterable, Mapping
from contextlib import nullcontext, suppress
from functools import cached_property
from importlib import import_module
from typing import TYPE_CHECKING, Any

import tenacity
from airflow.providers.common.compat.sdk import BaseHook

from airflow_provider_sms import DEFAULT_CONN_ID, codec
from airflow_provider_sms._bounded_body import BoundedBody
from airflow_provider_sms._compat import supervisor_comms_cannot_await
from airflow_provider_sms._off_loop import off_loop
from airflow_provider_sms._validation import build
from airflow_provider_sms.exceptions import (
    ResponseTooLargeError,
    SmsAuthError,
    SmsError,
    SmsTransportError,
    SmsValidationError,
)
from airflow_provider_sms.hooks._async_clients import (
    MAX_CONNECTIONS,
    Pool,
    acquire,
    release,
    shared_read,
)
from airflow_provider_sms.hooks._transport import (
    NPAI_PAGE_SIZE,
    NPAI_PATH,
    SEND_LISTS_PATH,
    SEND_PATH,
    SIMULATE_LISTS_PATH,
    SIMULATE_PATH,
    NpaiPages,
    SmsConnectionSettings,
    check_read_response,
    connection_extra,
    connection_settings,
    judge_send,
    judged_by_status,
    maybe_sent,
    naming_connection,
    request_headers,
    response_limit,
    webhook_path,
)
from airflow_provider_sms.models import CampaignResult, ListRef, Message, NpaiList, Recipient, Webhook
from airflow_provider_sms.recipients import RecipientInput, parse_lists, parse_recipients

if TYPE_CHECKING:
    from types import TracebackType

    import httpx
    import requests

# requests and httpx are imported where a call is made, not here: DAG files import this module
# through the operators' type hints only, and requests alone makes an import noticeably slower.

__all__ = [
    "MAX_CONNECTIONS",
    "SmsAsyncHook",
    "SmsConnectionSettings",
    "SmsHook",
    "connection_extra",
    "connection_settings",
]

# A page of GET /npai this short is decoded in the event loop: quicker there than handed to a thread.
QUICK_DECODE_BYTES = 80_000


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
        from airflow_provider_sms.connection_form import form_widgets

        return form_widgets()

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Labels and hidden fields of the connection form (Airflow < 3.2 reads this)."""
        from airflow_provider_sms.connection_form import ui_field_behaviour

        return ui_field_behaviour(hidden_key="hidden_fields")

    @cached_property
    def settings(self) -> SmsConnectionSettings:
        """The connection, read once and checked; the token is registered with the secrets masker."""
        conn = self.get_connection(self.sms_conn_id)
        return connection_settings(conn, conn_id=self.sms_conn_id, format_override=self._format_override)

    @cached_property
    def session(self) -> requests.Session:
        """One HTTP session per hook: keep-alive across calls; no retries at the transport level.

        Its adapter notes how far a send went, which decides whether "nothing was sent" (see
        :mod:`airflow_provider_sms.hooks._request_progress`).
        """
        import requests

        from airflow_provider_sms.hooks._request_progress import ProgressAdapter

        session = requests.Session()
        adapter = ProgressAdapter()
        session.mount("http://", adapter)
        session.mount("https://", adapter)
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
        return self._campaign(SIMULATE_PATH, body, sends=False, count=len(numbers))

    def send(
        self, message: Message | Mapping[str, Any], recipients: Iterable[RecipientInput]
    ) -> CampaignResult:
        """Send a campaign to numbers (POST /send), exactly once."""
        prepared = self.prepare_message(message)
        prepared.check_sendable()
        numbers = parse_recipients(recipients)
        body = codec.encode_send(prepared, numbers, self.format)
        return self._campaign(SEND_PATH, body, sends=True, count=len(numbers))

    def simulate_lists(self, message: Message | Mapping[str, Any], lists: Iterable[object]) -> CampaignResult:
        """Simulate a campaign to stored lists (POST /send/lists/simulate)."""
        prepared = self.prepare_message(message)
        refs = self._lists(lists)
        body = codec.encode_lists(prepared, refs, self.format)
        return self._campaign(SIMULATE_LISTS_PATH, body, sends=False, count=len(refs))

    def send_lists(self, message: Message | Mapping[str, Any], lists: Iterable[object]) -> CampaignResult:
        """Send a campaign to stored lists (POST /send/lists), exactly once."""
        prepared = self.prepare_message(message)
        prepared.check_sendable()
        refs = self._lists(lists)
        body = codec.encode_lists(prepared, refs, self.format)
        return self._campaign(SEND_LISTS_PATH, body, sends=True, count=len(refs))

    def get_webhook(self, webhook_id: str | int) -> Webhook:
        """Read one webhook record (GET /webhook/:id)."""
        path = webhook_path(webhook_id)
        with naming_connection(self.sms_conn_id):
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
        with naming_connection(self.sms_conn_id):
            body = self._read("GET", NPAI_PATH, params={"start": start, "length": length}, tries=tries)
            return codec.decode_npai(body, self.format, endpoint="GET /npai")

    def _campaign(self, path: str, body: bytes, *, sends: bool, count: int) -> CampaignResult:
        endpoint = f"POST {path}"
        what = "recipients" if "lists" not in path else "lists"
        self.log.info("%s: %s %s, %s bytes, %s", endpoint, count, what, len(body), self.format)
        with naming_connection(self.sms_conn_id):
            if not sends:
                answer = self._read("POST", path, body=body)
                result = codec.decode_campaign_result(answer, self.format, endpoint=endpoint)
            else:
                result = self._send_once(path, body)
        self.log.info("%s: %s", endpoint, result.summary())
        return result

    def _send_once(self, path: str, body: bytes) -> CampaignResult:
        endpoint = f"POST {path}"
        import requests

        from airflow_provider_sms.hooks._request_progress import nothing_sent, tracking

        too_large: ResponseTooLargeError | None = None
        answer = b""
        try:
            # "Nothing was sent" is decided by where the call failed, not by the exception's class:
            # an SSLError may come after the whole request was written.
            with tracking() as progress:
                response = self.session.post(
                    self._url(path), data=body, timeout=self._timeouts, stream=True, verify=self._verify
                )
                answer = self._body(response, endpoint, path)
        except requests.RequestException as exc:
            if nothing_sent(exc, progress):
                raise SmsTransportError(
                    f"{endpoint}: nothing was sent, the service could not be reached "
                    f"({_describe(exc, self.sms_conn_id)})"
                ) from None
            raise maybe_sent(endpoint, _describe(exc, self.sms_conn_id)) from None
        except ResponseTooLargeError as exc:
            too_large = exc
        return judge_send(
            response.status_code,
            response.reason,
            response.headers.get("Retry-After"),
            answer,
            too_large,
            self.format,
            endpoint,
        )

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
            retry=tenacity.retry_if_exception_type(SmsTransportError),
            before_sleep=self._log_retry(endpoint),
            reraise=True,
        )
        for attempt in retrying:
            with attempt:
                return self._call_once(method, path, body, params, endpoint)
        raise AssertionError("unreachable")  # pragma: no cover

    def _call_once(
        self, method: str, path: str, body: bytes | None, params: Mapping[str, Any] | None, endpoint: str
    ) -> bytes:
        import requests

        try:
            response = self.session.request(
                method,
                self._url(path),
                data=body,
                params=params,
                timeout=self._timeouts,
                stream=True,
                verify=self._verify,
            )
            answer = self._body(response, endpoint, path)
        except requests.RequestException as exc:
            raise SmsTransportError(f"{endpoint}: {_describe(exc, self.sms_conn_id)}") from None
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
        """Read the answer within ``path``'s size bound (:class:`BoundedBody`); a 429 or 5xx is not read.

        urllib3 decompresses (with a bound of its own); the bound on the decoded size is BoundedBody's.
        """
        with response:
            if judged_by_status(response.status_code):
                return b""
            limit = response_limit(path)
            body = BoundedBody(response.headers, response.status_code, endpoint, limit, decompress=False)
            for chunk in response.iter_content(chunk_size=min(limit + 1, 256 * 1024)):
                body.feed(chunk)
        return body.result()

    def _url(self, path: str) -> str:
        return self.settings.base_url + path

    @property
    def _verify(self) -> bool | str:
        """The connection's ``verify`` (a CA bundle's path, or whether to verify), given with each call.

        Set on the session alone, it is replaced by REQUESTS_CA_BUNDLE or CURL_CA_BUNDLE when either
        is set, even when it is ``False`` (psf/requests#3829); ``True`` still takes them.
        """
        return self.settings.verify

    @property
    def _timeouts(self) -> tuple[float, float]:
        timeout = self.settings.timeout
        return (min(timeout, 10.0), timeout)

    def _wait(self, retry_state: tenacity.RetryCallState) -> float:
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        if isinstance(exc, SmsTransportError) and exc.retry_after is not None:
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


class SmsAsyncHook(BaseHook):
    """Async reads of the SMS service (GET /webhook/:id, GET /npai) for the triggers, with httpx.

    The connection is read without blocking the event loop. The HTTP client is shared by every hook
    of the same event loop and connection (a triggerer runs all its triggers in one loop), with a
    pool of at most :data:`MAX_CONNECTIONS` connections; a hook holds its share from its first call
    until :meth:`aclose` (or the end of ``async with``), and the last hook to let go closes the client.
    Calls of :meth:`get_npai` that overlap on one loop and connection make one read, whose result
    they share: read it, do not change it.

    Each call is made once: a trigger polls again on its own schedule, so a transient failure
    (connection error, 429, 5xx) raises :class:`SmsTransportError`, with ``retry_after`` when the
    service asked for a wait. Nothing here sends: a triggerer restart runs a trigger again from the start.

    :param sms_conn_id: the Airflow connection (type ``sms``).
    :param format: ``json`` or ``xml``; overrides the connection's ``format`` extra.
    """

    conn_name_attr = "sms_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = "sms"
    hook_name = "SMS campaign service (async)"

    def __init__(
        self, sms_conn_id: str = default_conn_name, format: str | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.sms_conn_id = sms_conn_id
        self._format_override = codec.check_format(format) if format is not None else None
        self._settings: SmsConnectionSettings | None = None
        # A client of this hook alone, when one is given (tests give one with their own transport);
        # else this hook's share of the loop's pool for its connection, and the settings it is under.
        self._http: httpx.AsyncClient | None = None
        self._shared: Pool | None = None
        self._shared_under: SmsConnectionSettings | None = None

    async def get_settings(self) -> SmsConnectionSettings:
        """The connection, read once (asynchronously) and checked; the token goes to the secrets masker.

        Lookups of one connection that overlap on one event loop make one: a triggerer restarting with
        a thousand sensors on ``sms_default`` asks for it once, not a thousand times.
        """
        if self._settings is None:
            key = ("connection", self.sms_conn_id, self._format_override)
            self._settings = await shared_read(key, self._read_settings)
        return self._settings

    async def _read_settings(self) -> SmsConnectionSettings:
        from airflow.providers.common.compat.connection import get_async_connection

        if supervisor_comms_cannot_await():
            # `airflow dags test` runs the trigger in line with comms that only answer blocking requests:
            # the async lookup would skip the metadata database and find only AIRFLOW_CONN_* variables.
            from asgiref.sync import sync_to_async

            conn = await sync_to_async(SmsHook.get_connection)(self.sms_conn_id)
        else:
            conn = await get_async_connection(self.sms_conn_id, hook=SmsHook)
        return connection_settings(conn, conn_id=self.sms_conn_id, format_override=self._format_override)

    async def get_webhook(self, webhook_id: str | int) -> Webhook:
        """Read one webhook record (GET /webhook/:id)."""
        path = webhook_path(webhook_id)
        fmt = (await self.get_settings()).format
        with naming_connection(self.sms_conn_id):
            body = await self._get(await self._pool(), path)
            return codec.decode_webhook(body, fmt, endpoint=f"GET {path}")

    async def get_npai(self) -> NpaiList:
        """Read the whole NPAI list (GET /npai, every page: see :class:`NpaiPages`).

        Calls that overlap on one event loop and connection make one read and share its result.
        """
        pool = await self._pool()
        settings = await self.get_settings()
        if pool.slots is None:
            return await self._read_npai(pool, settings.format)  # a client of this hook alone

        async def leased() -> NpaiList:
            # The read holds its own share: a caller that stops waiting does not close it under the others.
            own = await acquire(settings, self._client)
            try:
                return await self._read_npai(own, settings.format)
            finally:
                await release(settings)

        return await shared_read((settings, NPAI_PATH), leased)

    async def aclose(self) -> None:
        """Let go of the HTTP client: close it if it is this hook's own or its last user's."""
        client, self._http = self._http, None
        settings, self._shared_under, self._shared = self._shared_under, None, None
        if client is not None:
            await client.aclose()
        if settings is not None:
            await release(settings)

    async def __aenter__(self) -> SmsAsyncHook:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def _client(
        self, settings: SmsConnectionSettings, transport: httpx.AsyncBaseTransport | None = None
    ) -> httpx.AsyncClient:
        """A new HTTP client, configured as SmsHook's session (headers, TLS, timeouts), pool bounded."""
        import httpx

        # The first request of any httpx client imports anyio's asyncio backend; made in the
        # event loop, that import stalls every trigger once. The shared client is built in a worker
        # thread: import it there.
        with suppress(ImportError):
            import_module("anyio._backends._asyncio")

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
            limits=httpx.Limits(max_connections=MAX_CONNECTIONS, max_keepalive_connections=MAX_CONNECTIONS),
            transport=transport,
        )

    async def _pool(self) -> Pool:
        """The client this hook uses: its own if it was given one, else its share of the loop's."""
        if self._http is not None:
            return Pool(self._http)
        if self._shared is None:
            # This hook's share keeps the client open between its calls, until aclose().
            settings = await self.get_settings()
            self._shared = await acquire(settings, self._client)
            self._shared_under = settings
        return self._shared

    async def _read_npai(self, pool: Pool, fmt: codec.WireFormat) -> NpaiList:
        """Every page of GET /npai, decoded off the event loop unless the page is short."""
        pages = NpaiPages()
        with naming_connection(self.sms_conn_id):
            while (params := pages.next_params()) is not None:
                body = await self._get(pool, NPAI_PATH, params)
                quick = len(body) <= QUICK_DECODE_BYTES
                page = await off_loop(codec.decode_npai, body, fmt, endpoint=f"GET {NPAI_PATH}", inline=quick)
                pages.add(page)
        return pages.result()

    async def _get(self, pool: Pool, path: str, params: Mapping[str, int] | None = None) -> bytes:
        """GET ``path`` once and return the body of a 2xx answer, judged as SmsHook judges its reads.

        The request is built once ``pool`` has a free slot (see :class:`Pool`).
        """
        import httpx

        settings = await self.get_settings()
        endpoint = f"GET {path}"
        answer = b""
        try:
            async with (
                pool.slots or nullcontext(),
                pool.client.stream("GET", path, params=params) as response,
            ):
                if not judged_by_status(response.status_code):
                    # Raw bytes, so that decompression is bounded too (BoundedBody).
                    body = BoundedBody(response.headers, response.status_code, endpoint, response_limit(path))
                    async for raw in response.aiter_raw():
                        body.feed(raw)
                    answer = body.result()
        except (httpx.TransportError, ssl.SSLError) as exc:
            # httpx names the URL (never the headers) in its errors: no token can leak here. A TLS
            # record broken while the answer is read reaches us as anyio's ssl.SSLError, unwrapped.
            raise SmsTransportError(f"{endpoint}: {type(exc).__name__}: {str(exc)[:300]}") from None
        check_read_response(
            response.status_code,
            response.reason_phrase,
            response.headers.get("Retry-After"),
            answer,
            settings.format,
            endpoint,
        )
        return answer


def _describe(exc: requests.RequestException, conn_id: str) -> str:
    """A short, token-free description of a transport error, naming the connection and where it points
    (urllib3 opens the text of a failed connect with its private connection class's repr: left out)."""
    from urllib3.exceptions import NewConnectionError

    reason = getattr(exc.args[0], "reason", None) if exc.args else None
    if isinstance(reason, NewConnectionError) and reason.conn is not None:
        where = f"{reason.conn.host}:{reason.conn.port}"
        text = str(reason).removeprefix(f"{reason.conn}: ")
        return f"connection {conn_id!r} could not connect to {where}: {text[:300]}"
    text = str(reason or exc)
    return f"connection {conn_id!r}: {type(exc).__name__}: {text[:300]}"
