"""Hostile and odd input (issue 9, item 2), through the real code paths.

- XML bombs and external entities in every answer that is decoded from XML (hook, triggers) and in
  request bodies (the sandbox): refused with an SmsError naming the endpoint, nothing expanded,
  nothing fetched, memory bounded (tracemalloc).
- Huge answers served for real over 127.0.0.1 (requests-mock buffers bodies, so it cannot show
  streaming): refused past the endpoint's limit with bounded memory; a send's huge 2xx answer is
  "maybe sent", never retried; a compression bomb is bounded too.
- Text and links that are hard for XML and JSON (``]]>``, ``&``, emoji, right-to-left text, CR)
  round-trip through both codecs and through the sandbox; characters XML 1.0 cannot carry are
  refused before any request, naming the field.
- 10,000 bad numbers: one error counting them by rule with a few examples, and no log flood.

Unit tests in tests/unit/test_hook_errors.py keep the first versions of some of these (billion laughs
on /npai, an oversized answer with a lowered limit, the 10,000-number message); these extend them.
"""

from __future__ import annotations

import asyncio
import gzip
import io
import json
import threading
import tracemalloc
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import requests

from airflow_provider_sms import _bounded_body, codec
from airflow_provider_sms.exceptions import (
    SmsApiError,
    SmsError,
    SmsMaybeSentError,
    SmsTransportError,
    SmsValidationError,
)
from airflow_provider_sms.hooks.sms import SmsConnectionSettings, SmsHook
from airflow_provider_sms.models import Message, Recipient
from airflow_provider_sms.sandbox import wire
from airflow_provider_sms.sandbox.testing import TEST_TOKEN
from airflow_provider_sms.triggers.sms import SmsNpaiTrigger, SmsPollingTrigger, SmsWebhookTrigger
from tests.async_hooks import async_hook, mock_transport

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

# The suite's canary (tests/token_canary.py checks it never shows in any output).
TOKEN = TEST_TOKEN
MOCK_URL = "https://sms.hostile.test"
ALERT = {"text": "Hello", "pushtype": "alert"}
NUMBER = "33612345678"
MIB = 1024 * 1024
# A served "huge" answer: far more than any endpoint's limit but GET /npai's.
HUGE = 50 * MIB
# Bounds asserted with tracemalloc (peak of traced Python allocations during the call, every thread).
# Reading the whole 50 MB answer would peak above 50 MB; bounded reads peak near their 1 MiB limit
# (1.4 MiB measured), so 3 MiB leaves room without letting a second copy of the answer through.
SMALL_PEAK = 3 * MIB
XML_PEAK = 4 * MIB


# --------------------------------------------------------------------------------------- helpers


@contextmanager
def peak_memory() -> Iterator[list[int]]:
    """Measure the peak of traced allocations in the block; the result lands in the yielded list."""
    result: list[int] = []
    tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        yield result
    finally:
        result.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()


def connection(url: str, fmt: str) -> str:
    return json.dumps({"conn_type": "sms", "host": url, "password": TOKEN, "extra": {"format": fmt}})


def make_hook(monkeypatch: pytest.MonkeyPatch, url: str, fmt: str = "json", **kwargs: Any) -> SmsHook:
    """A hook on a fresh env-var connection, its settings and session built (so not measured later)."""
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", connection(url, fmt))
    hook = SmsHook(backoff=0.0, **kwargs)
    assert hook.session is not None
    return hook


# Each public call, the endpoint it names in errors, and whether it sends (a send's unreadable 2xx
# answer is "maybe sent", never a plain API error).
CALLS: dict[str, tuple[Callable[[SmsHook], Any], str, str, bool]] = {
    "send": (lambda h: h.send(ALERT, [NUMBER]), "POST", "/send", True),
    "send_lists": (lambda h: h.send_lists(ALERT, [1]), "POST", "/send/lists", True),
    "simulate": (lambda h: h.simulate(ALERT, [NUMBER]), "POST", "/send/simulate", False),
    "simulate_lists": (lambda h: h.simulate_lists(ALERT, [1]), "POST", "/send/lists/simulate", False),
    "get_webhook": (lambda h: h.get_webhook("7"), "GET", "/webhook/7", False),
    "get_npai": (lambda h: h.get_npai(), "GET", "/npai", False),
}


# ------------------------------------------------------------------------------ hostile XML bodies


def _billion_laughs() -> str:
    """Ten levels of ten references each: 10**9 "lol" if expanded."""
    entities = ['<!ENTITY lol0 "lol">']
    for level in range(1, 10):
        references = f"&lol{level - 1};" * 10
        entities.append(f'<!ENTITY lol{level} "{references}">')
    return (
        '<?xml version="1.0"?><!DOCTYPE response ['
        + "".join(entities)
        + "]><response><status>1</status><message>&lol9;</message></response>"
    )


BILLION_LAUGHS = _billion_laughs()
# One 100 KB entity referenced 1000 times: 100 MB if expanded, no nesting for a depth limit to catch.
QUADRATIC_BLOWUP = (
    f'<?xml version="1.0"?><!DOCTYPE response [<!ENTITY a "{"x" * 100_000}">]>'
    f"<response><status>1</status><message>{'&a;' * 1000}</message></response>"
)


def hostile_xml(recorder_url: str) -> dict[str, bytes]:
    """Every hostile XML body; ``recorder_url`` counts any fetch an external reference would make."""
    bodies = {
        "billion-laughs": BILLION_LAUGHS,
        "quadratic-blowup": QUADRATIC_BLOWUP,
        "external-file": '<?xml version="1.0"?><!DOCTYPE response [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
        "<response><status>1</status><message>&x;</message></response>",
        "external-http": f'<?xml version="1.0"?><!DOCTYPE response [<!ENTITY x SYSTEM "{recorder_url}/x">]>'
        "<response><status>1</status><message>&x;</message></response>",
        "dtd-alone": '<?xml version="1.0"?><!DOCTYPE response><response><status>1</status></response>',
        "external-dtd": f'<?xml version="1.0"?><!DOCTYPE response SYSTEM "{recorder_url}/r.dtd">'
        "<response><status>1</status><message>OK</message></response>",
        "parameter-entity": '<?xml version="1.0"?><!DOCTYPE response ['
        f'<!ENTITY % p SYSTEM "{recorder_url}/p.dtd"> %p;'
        "<!ENTITY % q \"<!ENTITY leak 'x'>\"> %q;]>"
        "<response><status>1</status><message>&leak;</message></response>",
    }
    return {name: body.encode() for name, body in bodies.items()}


HOSTILE_NAMES = list(hostile_xml("http://127.0.0.1:9"))


@pytest.mark.parametrize("http_status", [200, 400])
@pytest.mark.parametrize("call", list(CALLS))
@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_xml_answer_is_refused_on_every_endpoint(
    monkeypatch, requests_mock, big_server, name, call, http_status
):
    """Proves: no XML answer can expand entities or fetch anything, on any endpoint, 2xx or error.

    Refused with an SmsError naming the endpoint, in one call (not retried), in bounded memory; a
    send's 2xx answer is "maybe sent" (the campaign may exist), never a plain error.
    """
    body = hostile_xml(big_server.url)[name]
    run, method, path, sends = CALLS[call]
    endpoint = f"{method} {path}"
    hook = make_hook(monkeypatch, MOCK_URL, "xml")
    requests_mock.register_uri(
        method, MOCK_URL + path, content=body, status_code=http_status, headers={"Content-Type": "text/xml"}
    )

    with peak_memory() as peak, pytest.raises(SmsError) as info:
        run(hook)

    error = info.value
    assert peak[0] < XML_PEAK  # nothing expanded: the largest body is 103 KB
    assert endpoint in str(error)
    assert requests_mock.call_count == 1
    assert big_server.hits == []  # no external entity or DTD was fetched
    assert "lollol" not in str(error)
    assert "xxxxxxxxxx" not in str(error)
    if sends and http_status == 200:
        assert isinstance(error, SmsMaybeSentError)
        assert "refused as unsafe" in str(error)
    else:
        assert isinstance(error, SmsApiError)
        assert not isinstance(error, SmsMaybeSentError)
        assert error.endpoint == endpoint
        if http_status == 200:
            assert "refused as unsafe" in error.message
        else:  # an error answer's unreadable body: the HTTP status is what is reported
            assert error.http_status == 400


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_xml_answer_is_refused_by_the_triggers(big_server, name):
    """Proves: the async triggers (deferrable sensors) decode XML answers under the same rules."""
    body = hostile_xml(big_server.url)[name]
    settings = SmsConnectionSettings(base_url=MOCK_URL, token=TOKEN, format="xml")
    transport = mock_transport(lambda request: httpx.Response(200, content=body))

    async def poll(trigger: SmsPollingTrigger) -> None:
        async with async_hook(settings, transport) as hook:
            await trigger.poll(hook)

    for trigger, endpoint in [
        (SmsWebhookTrigger(webhook_id="7"), "GET /webhook/7"),
        (SmsNpaiTrigger(), "GET /npai"),
    ]:
        with peak_memory() as peak, pytest.raises(SmsApiError, match="refused as unsafe") as info:
            asyncio.run(poll(trigger))
        assert info.value.endpoint == endpoint
        assert peak[0] < XML_PEAK
    assert big_server.hits == []


@pytest.mark.integration
@pytest.mark.parametrize("path", ["/send", "/send/simulate", "/send/lists"])
def test_hostile_xml_request_body_is_refused_by_the_sandbox(sms_sandbox, big_server, path):
    """Proves: the sandbox decodes requests with the same safe parser: status -2 (XML error), HTTP 400,
    no campaign created, nothing fetched."""
    headers = {"Authorization": f"Bearer {sms_sandbox.token}", "Content-Type": "application/xml"}
    for name, body in hostile_xml(big_server.url).items():
        request_body = body.replace(b"<response>", b"<sms><message><text>").replace(
            b"</response>", b"</text></message></sms>"
        )
        answer = requests.post(sms_sandbox.url + path, data=request_body, headers=headers, timeout=30)
        envelope = codec.decode_envelope(answer.content, "xml")
        assert (answer.status_code, envelope.status) == (400, -2), name
        assert "refused as unsafe" in (envelope.message or ""), name
    assert sms_sandbox.inspect.campaigns() == []
    assert big_server.hits == []


@pytest.mark.parametrize("fmt", ["json", "xml"])
@pytest.mark.parametrize("call", list(CALLS))
def test_deeply_nested_answer_is_an_api_error_not_a_recursion_error(monkeypatch, requests_mock, call, fmt):
    """Proves a fix: an answer nested 100,000 deep used to escape as a bare RecursionError (on a send,
    hiding that the campaign may exist); it is now an SmsApiError naming the endpoint, or "maybe sent"."""
    if fmt == "json":
        body = b'{"status":1,"message":"OK","x":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    else:
        body = b"<response><status>1</status><x>" + b"<a>" * 100_000 + b"</a>" * 100_000 + b"</x></response>"
    run, method, path, sends = CALLS[call]
    hook = make_hook(monkeypatch, MOCK_URL, fmt)
    requests_mock.register_uri(method, MOCK_URL + path, content=body)

    with pytest.raises(SmsMaybeSentError if sends else SmsApiError, match="nested too deeply") as info:
        run(hook)

    assert f"{method} {path}" in str(info.value)
    assert requests_mock.call_count == 1


# ------------------------------------------------------------------------- huge answers, for real

BLOCK = b"x" * MIB  # served again and again: the server itself allocates nothing per megabyte


@dataclass
class Route:
    """What the server answers on one path.

    :param size: bytes of body (BLOCK repeated, then cut), unless ``body`` is given.
    :param declared: send ``Content-Length``; otherwise the body is chunked, its size unknown upfront.
    """

    status: int = 200
    size: int = HUGE
    declared: bool = False
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)


class BigServer(ThreadingHTTPServer):
    """A tiny HTTP server on 127.0.0.1 serving huge bodies without holding them in memory."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.routes: dict[str, Route] = {}
        self.hits: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # the client hanging up mid-body is the point of these tests


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: BigServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._answer()

    def _answer(self) -> None:
        path = self.path.split("?", 1)[0]
        self.server.hits.append(path)
        route = self.server.routes.get(path)
        if route is None:
            self.send_error(404)
            return
        size = len(route.body) if route.body is not None else route.size
        self.send_response(route.status)
        for name, value in route.headers.items():
            self.send_header(name, value)
        if route.declared or route.body is not None:
            self.send_header("Content-Length", str(size))
        else:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            if route.body is not None:
                self.wfile.write(route.body)
                return
            left = size
            view = memoryview(BLOCK)
            while left:
                piece = view[: min(left, len(BLOCK))]
                if route.declared:
                    self.wfile.write(piece)
                else:  # three writes: no copy of the megabyte (the server's memory is traced too)
                    self.wfile.write(b"%x\r\n" % len(piece))
                    self.wfile.write(piece)
                    self.wfile.write(b"\r\n")
                left -= len(piece)
            if not route.declared:
                self.wfile.write(b"0\r\n\r\n")
        except OSError:
            self.close_connection = True  # the client stopped reading: expected


@pytest.fixture(scope="module")
def big_server_instance() -> Iterator[BigServer]:
    server = BigServer()
    thread = threading.Thread(target=server.serve_forever, name="big-server", daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def big_server(big_server_instance: BigServer) -> BigServer:
    """The module's server with no routes and no hits recorded."""
    big_server_instance.routes = {}
    big_server_instance.hits = []
    return big_server_instance


def gzip_bomb(size: int) -> bytes:
    """``size`` zero bytes, gzipped (50 MB compress to about 50 KB)."""
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=9) as stream:
        for _ in range(size // MIB):
            stream.write(bytes(MIB))
    return out.getvalue()


@pytest.mark.parametrize("declared", [False, True], ids=["chunked", "content-length"])
@pytest.mark.parametrize("call", ["get_webhook", "simulate", "simulate_lists"])
def test_huge_answer_of_a_small_endpoint_is_refused_with_bounded_memory(
    monkeypatch, big_server, call, declared
):
    """Proves: a 50 MB answer where a 1 KB one is expected is refused after at most 1 MiB (or at once,
    when Content-Length says so), with peak memory far below 50 MB, in one request (not retried)."""
    run, method, path, _ = CALLS[call]
    big_server.routes[path] = Route(declared=declared)
    hook = make_hook(monkeypatch, big_server.url)

    with peak_memory() as peak, pytest.raises(SmsApiError, match="too large") as info:
        run(hook)

    assert peak[0] < SMALL_PEAK, f"peak {peak[0] / MIB:.1f} MiB"
    assert info.value.endpoint == f"{method} {path}"
    assert f"{method} {path}" in str(info.value)
    assert "larger than 1 MiB" in str(info.value)
    assert big_server.hits == [path]


@pytest.mark.parametrize("declared", [False, True], ids=["chunked", "content-length"])
@pytest.mark.parametrize("call", ["send", "send_lists"])
def test_huge_2xx_answer_to_a_send_is_maybe_sent_and_not_retried(monkeypatch, big_server, call, declared):
    """Proves a fix: a send whose 2xx answer is too large to read may have created the campaign, so it
    is SmsMaybeSentError (which no retry repeats); it used to be a plain, retryable SmsApiError."""
    run, method, path, _ = CALLS[call]
    big_server.routes[path] = Route(declared=declared)
    hook = make_hook(monkeypatch, big_server.url)

    with peak_memory() as peak, pytest.raises(SmsMaybeSentError, match="too large") as info:
        run(hook)

    assert peak[0] < SMALL_PEAK
    assert f"{method} {path}" in str(info.value)
    assert "must not be sent again" in str(info.value)
    assert big_server.hits == [path]


def test_huge_4xx_answer_to_a_send_is_an_api_error(monkeypatch, big_server):
    """Proves: a refusal (4xx) stays a refusal even when its body is too large to read."""
    big_server.routes["/send"] = Route(status=400)
    hook = make_hook(monkeypatch, big_server.url)

    with pytest.raises(SmsApiError, match="too large") as info:
        hook.send(ALERT, [NUMBER])

    assert not isinstance(info.value, SmsMaybeSentError)
    assert info.value.http_status == 400
    assert big_server.hits == ["/send"]


def test_huge_5xx_body_on_a_read_is_retried_without_being_read(monkeypatch, big_server):
    """Proves: a 503 is judged by its status alone (retried, then SmsTransportError); its 50 MB HTML
    body is never read."""
    big_server.routes["/webhook/7"] = Route(status=503, headers={"Content-Type": "text/html"})
    hook = make_hook(monkeypatch, big_server.url)
    monkeypatch.setattr("tenacity.nap.time.sleep", lambda seconds: None)

    with peak_memory() as peak, pytest.raises(SmsTransportError, match="HTTP 503"):
        hook.get_webhook("7")

    assert peak[0] < SMALL_PEAK
    assert big_server.hits == ["/webhook/7"] * 3


def test_gzip_bomb_is_refused_with_bounded_memory(monkeypatch, big_server):
    """Proves: a 50 KB gzip answer that inflates to 50 MB is refused after 1 MiB of decompressed bytes."""
    big_server.routes["/webhook/7"] = Route(body=gzip_bomb(HUGE), headers={"Content-Encoding": "gzip"})
    hook = make_hook(monkeypatch, big_server.url)

    with peak_memory() as peak, pytest.raises(SmsApiError, match="too large"):
        hook.get_webhook("7")

    assert peak[0] < SMALL_PEAK


def test_npai_answer_may_exceed_the_small_limit(monkeypatch, big_server):
    """Proves: limits are per endpoint: a 2.6 MB NPAI list (the service ignoring paging) is read whole."""
    entries = [
        {"id": str(n), "destination": f"3369{n:07d}", "date": "2026-01-15 10:30:00", "campaign_id": 1}
        for n in range(30_000)
    ]
    body = wire.encode_response(
        {"status": 1, "message": "OK", "list": entries, "totalRecords": 30_000}, "json"
    )
    assert len(body) > 2 * MIB  # twice the other endpoints' limit
    big_server.routes["/npai"] = Route(body=body, headers={"Content-Type": "application/json"})
    hook = make_hook(monkeypatch, big_server.url)

    npai = hook.get_npai()

    assert len(npai.entries) == 30_000
    assert big_server.hits == ["/npai"]


def test_npai_answer_beyond_its_limit_is_refused_with_bounded_memory(monkeypatch, big_server):
    """Proves: GET /npai has a limit too (64 MiB; lowered to 4 MiB here to keep the test light)."""
    monkeypatch.setattr(_bounded_body, "MAX_RESPONSE_BYTES", 4 * MIB)
    big_server.routes["/npai"] = Route()
    hook = make_hook(monkeypatch, big_server.url)

    with peak_memory() as peak, pytest.raises(SmsApiError, match="larger than 4 MiB") as info:
        hook.get_npai()

    assert peak[0] < 4 * MIB + SMALL_PEAK
    assert info.value.endpoint == "GET /npai"


@pytest.mark.parametrize(
    ("kind", "route"),
    [
        ("webhook", Route()),
        ("webhook", Route(declared=True)),
        ("webhook", Route(body=b"", headers={"Content-Encoding": "gzip"})),  # body set below
        ("npai", Route()),
    ],
    ids=["webhook-chunked", "webhook-content-length", "webhook-gzip-bomb", "npai-lowered-limit"],
)
def test_trigger_reads_are_bounded(monkeypatch, big_server, kind, route):
    """Proves a fix for the gzip case: the triggers (httpx) read with the hook's limits; httpx inflates
    a whole network chunk at once (a 50 KB gzip chunk became 50 MB, peak 138 MB), so they now read raw
    bytes and inflate them with a bound (BoundedBody)."""
    if route.headers.get("Content-Encoding") == "gzip":
        route.body = gzip_bomb(HUGE)
    monkeypatch.setattr(_bounded_body, "MAX_RESPONSE_BYTES", 4 * MIB)
    trigger: SmsPollingTrigger
    if kind == "webhook":
        trigger, path, limit = SmsWebhookTrigger(webhook_id="7"), "/webhook/7", "1 MiB"
    else:
        trigger, path, limit = SmsNpaiTrigger(), "/npai", "4 MiB"
    big_server.routes[path] = route
    settings = SmsConnectionSettings(base_url=big_server.url, token=TOKEN, format="json")

    async def measure() -> tuple[SmsApiError, int]:
        # The client (its TLS context alone is megabytes) is built before measuring: only the read counts.
        async with async_hook(settings) as hook:
            with peak_memory() as peak, pytest.raises(SmsApiError, match=f"larger than {limit}") as info:
                await trigger.poll(hook)
        return info.value, peak[0]

    error, peak = asyncio.run(measure())

    # Far below the 50 MB answer, with room for what varies from run to run: how much of the answer sits
    # in the socket buffers when the limit trips, the event loop's own allocations, and what the test
    # process's other threads allocate meanwhile (every thread is traced). A whole read stays far above.
    bound = (1 if kind == "webhook" else 4) * MIB + 12 * MIB
    assert peak < bound, f"peak {peak / MIB:.1f} MiB"
    assert error.endpoint == f"GET {path}"


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_compressed_answers_are_still_read_by_the_hook_and_the_triggers(monkeypatch, big_server, encoding):
    """Proves: bounding decompression (BoundedBody) keeps ordinary compressed answers readable."""
    record = {"webhook_id": "7", "type": "DLR", "url": "https://a.example.com/dlr", "status": "live"}
    plain = wire.encode_response({"status": 1, "message": "OK", "webhook": record}, "json")
    body = gzip.compress(plain) if encoding == "gzip" else zlib.compress(plain)
    big_server.routes["/webhook/7"] = Route(body=body, headers={"Content-Encoding": encoding})
    hook = make_hook(monkeypatch, big_server.url)
    settings = SmsConnectionSettings(base_url=big_server.url, token=TOKEN, format="json")
    trigger = SmsWebhookTrigger(webhook_id="7")

    async def poll() -> dict[str, Any] | None:
        async with async_hook(settings) as hook:
            return await trigger.poll(hook)

    assert hook.get_webhook("7").url == record["url"]
    payload = asyncio.run(poll())
    assert payload is not None
    assert payload["webhook"]["url"] == record["url"]


# ------------------------------------------------------------------------------ hard text and links

HARD_TEXTS = {
    "cdata-end": "Fin ]]> et ]]]]> et ]]>]]>",
    "cdata-start": "<![CDATA[ pas une section ]]>",
    "markup": "a & b < c > d &amp; &lt; <b>gras</b> <!-- x --> <?pi?>",
    "quotes": "\"double\" 'simple' « guillemets » “curly” ‘single’",  # noqa: RUF001
    "emoji": "Promo 😀🎉 -20 % 💶",
    "emoji-zwj": "Famille 👩‍👩‍👧‍👦, pro 🧑🏽‍💻, drapeau arc-en-ciel 🏳️‍🌈",
    "flags": "🇫🇷 🇧🇪 🇨🇭 🇺🇦 🏴󠁧󠁢󠁳󠁣󠁴󠁿",
    "arabic": "مرحبا، طلبك في الطريق",
    "hebrew-bidi": "שלום \u200fעולם\u200e 123 \u202bembedded\u202c",  # noqa: RUF001
    "combining": "e\u0301te\u0301 Z\u0351\u0352\u0353a\u0300\u0301l\u0308g\u0327o\u0328",
    "line-ends": "ligne 1\r\nligne 2\rligne 3\nligne 4\ttab",
    "leading-trailing-space": "  espaces autour  ",
    "c1-and-del": "del \x7f nel \x85 csi \x9b",
    "bom-and-separators": "\ufeffBOM, NBSP\u00a0ici, LS\u2028PS\u2029fin",
    "astral": "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 \U0001f9ea \U0010fffd",  # noqa: RUF001
    "json-specials": 'back\\slash \\u0041 "}]} {"status":-1}',
    "null-text": "null",
}


@pytest.mark.parametrize("fmt", ["json", "xml"])
@pytest.mark.parametrize("name", list(HARD_TEXTS))
def test_hard_text_round_trips_through_both_codecs(name, fmt):
    """Proves: what the client encodes is exactly what the service side decodes (both body kinds)."""
    message = Message(text=HARD_TEXTS[name], pushtype="alert", sender="Shop")
    recipients = [NUMBER, Recipient(value="33611111111", gsmsmsid=HARD_TEXTS[name])]

    request = wire.decode_request(codec.encode_send(message, recipients, fmt), fmt)
    lists_request = wire.decode_request(codec.encode_lists(message, [], fmt), fmt)

    assert Message.model_validate(request.message) == message
    assert Message.model_validate(lists_request.message) == message
    assert [Recipient.model_validate(r) for r in request.recipients] == [
        Recipient(value=NUMBER),
        recipients[1],
    ]


@pytest.mark.integration
@pytest.mark.parametrize("fmt", ["json", "xml"])
def test_hard_text_reaches_the_sandbox_unchanged(monkeypatch, sms_sandbox, fmt):
    """Proves: a real send over HTTP records exactly the text given, in both wire formats."""
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", sms_sandbox.connection_json(fmt))
    hook = SmsHook(backoff=0.0)
    for index, (name, text) in enumerate(HARD_TEXTS.items()):
        number = f"336120{index:05d}"  # one number per text: the anti-flood rule stays out of the way
        result = hook.send({"text": text, "pushtype": "alert"}, [{"value": number, "gsmsmsid": text}])
        assert result.sent == 1, name
        record = sms_sandbox.inspect.campaigns()[-1]
        assert record["text"] == text, name
        assert record["recipients"] == [{"value": number, "gsmsmsid": text}], name


LINKS = {
    "query-and-amp": "https://shop.example.com/promo?utm_source=sms&utm_medium=x&a=1&b=<2>",
    "fragment": "https://shop.example.com/page#section-2?not=query",
    "percent": "https://shop.example.com/caf%C3%A9/%20espace?q=%26%3D%23",
    "idn-host": "https://bücher.example/straße?q=ä&x=1#frag",
    "idn-cjk": "https://例え.テスト/パス?キー=値",
    "punycode": "https://xn--bcher-kva.example/?a=b&c=d",
    "quotes-in-query": "https://a.example.com/?q=\"x\"&r='y'",
    "cdata-end-in-query": "https://a.example.com/?q=]]>&r=1",
}


@pytest.mark.parametrize("fmt", ["json", "xml"])
def test_links_round_trip_through_both_codecs(fmt):
    """Proves: links with query strings, ``&``, fragments, percent-encoding and IDN hosts survive."""
    links = list(LINKS.values())
    message = Message(text="Voir " + " ".join(["<-short->"] * len(links)), pushtype="marketing", links=links)

    request = wire.decode_request(codec.encode_send(message, [NUMBER], fmt), fmt)

    assert Message.model_validate(request.message).links == links


@pytest.mark.integration
@pytest.mark.parametrize("fmt", ["json", "xml"])
def test_links_reach_the_sandbox_unchanged(monkeypatch, sms_sandbox, fmt):
    """Proves: the sandbox records the links exactly and puts one short URL in place of each marker."""
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", sms_sandbox.connection_json(fmt))
    links = list(LINKS.values())

    SmsHook().send(
        {"text": "Voir " + " ".join(["<-short->"] * len(links)), "pushtype": "alert", "links": links},
        [NUMBER],
    )

    record = sms_sandbox.inspect.campaigns()[-1]
    assert record["links"] == links
    assert "<-short->" not in record["text"]
    assert record["text"].count("https://sms.sb/") == len(links)


# Characters XML 1.0 cannot carry (and a lone surrogate, which no UTF-8 body can): refused before
# any request, in both formats, so that a DAG behaves the same whatever the connection's format.
UNSENDABLE = ["\x00", "\x01", "\x08", "\x0b", "\x0c", "\x1b", "\x1f", "\ufffe", "\uffff", "\ud800"]


@pytest.mark.parametrize("fmt", ["json", "xml"])
@pytest.mark.parametrize("char", UNSENDABLE, ids=[f"U+{ord(c):04X}" for c in UNSENDABLE])
def test_unsendable_characters_are_refused_before_any_request(monkeypatch, requests_mock, char, fmt):
    """Proves: text XML cannot carry is refused as bad input naming ``message.text``; no request."""
    hook = make_hook(monkeypatch, MOCK_URL, fmt)

    for call in (hook.send, hook.simulate):
        with pytest.raises(SmsValidationError) as info:
            call({"text": f"avant{char}après", "pushtype": "alert"}, [NUMBER])
        assert [name for name, _ in info.value.errors] == ["message.text"]
    assert requests_mock.call_count == 0


@pytest.mark.parametrize(
    "recipient",
    [{"value": NUMBER, "gsmsmsid": "id\x00"}, {"value": NUMBER, "gsmsmsid": "id\x1f"}],
    ids=["nul", "unit-separator"],
)
def test_unsendable_gsmsmsid_is_refused_before_any_request(monkeypatch, requests_mock, recipient):
    """Proves a fix: a control character in a gsmsmsid used to make a malformed XML body (status -2
    after the request); it is now refused before any request, naming the recipient and gsmsmsid."""
    hook = make_hook(monkeypatch, MOCK_URL, "xml")

    with pytest.raises(SmsValidationError, match=r"recipients\[0\]: gsmsmsid: .*control character"):
        hook.send(ALERT, [recipient])

    assert requests_mock.call_count == 0


@pytest.mark.parametrize("fmt", ["json", "xml"])
def test_a_gsmsmsid_longer_than_a_reports_message_id_is_refused_before_any_request(
    monkeypatch, requests_mock, fmt
):
    """Proves a fix (issue 29): the service echoes a gsmsmsid as its delivery report's message_id, which
    the receiver stores in 128 characters; a longer one was sent, and its reports were answered 503 for
    ever on PostgreSQL. It is now refused before any request, naming the recipient, gsmsmsid and the rule."""
    hook = make_hook(monkeypatch, MOCK_URL, fmt)

    with pytest.raises(
        SmsValidationError, match=r"recipients\[0\]: gsmsmsid: 129 characters, more than the 128 allowed"
    ):
        hook.send(ALERT, [{"value": NUMBER, "gsmsmsid": "g" * 129}])
    with pytest.raises(SmsValidationError, match=r"recipients\[1\]: gsmsmsid: 130 characters"):
        hook.send(ALERT, [NUMBER, {"value": NUMBER, "gsmsmsid": 10**129}])

    assert requests_mock.call_count == 0


@pytest.mark.parametrize(
    "link",
    [
        "https://a.example.com/x\ny",
        "https://a.example.com/x\ty",
        "https://a.example.com/\x00",
        "https://a.example.com/\x85",
        "https://a.example.com/nb\u00a0sp",
        "https://a.example.com/x\r",
    ],
    ids=["newline", "tab", "nul", "nel", "nbsp", "cr"],
)
def test_links_with_whitespace_or_controls_are_refused_before_any_request(monkeypatch, requests_mock, link):
    """Proves a fix: such links used to pass (and, in XML, to break the body or change on the way);
    they are now refused naming ``message.links`` and telling to percent-encode."""
    hook = make_hook(monkeypatch, MOCK_URL, "xml")

    with pytest.raises(SmsValidationError, match="percent-encode") as info:
        hook.send({"text": "Go <-short->", "pushtype": "alert", "links": [link]}, [NUMBER])

    assert [name for name, _ in info.value.errors] == ["message.links"]
    assert requests_mock.call_count == 0


def test_a_megabyte_of_junk_as_a_number_makes_a_short_error(monkeypatch, requests_mock):
    """Proves a fix: errors quote bad values cut to 60 characters (a 1 MB "number" made a 1 MB error)."""
    hook = make_hook(monkeypatch, MOCK_URL)

    with pytest.raises(SmsValidationError) as info:
        hook.send(ALERT, ["+" + "1a" * 500_000])

    assert len(str(info.value)) < 500
    assert "(1000003 characters)" in str(info.value)


# --------------------------------------------------------------------------- 10,000 bad numbers


def ten_thousand_bad() -> list[Any]:
    """5 good numbers then 10,000 bad ones, breaking four different rules."""
    return (
        [NUMBER] * 5
        + [f"+33 6 bad {i}" for i in range(6000)]
        + [f"06{i:08d}" for i in range(3000)]
        + [{"value": NUMBER, "gsmsmsid": f"id\x01{i}"} for i in range(999)]
        + [12.5]
    )


def test_ten_thousand_bad_numbers_make_one_error_counted_by_rule(monkeypatch, requests_mock, caplog):
    """Proves: one error for 10,000 bad numbers, counted by rule, quoting the first few and the first of
    each rule, short enough to read; no request is made and nothing is logged per number."""
    caplog.set_level("DEBUG")
    hook = make_hook(monkeypatch, MOCK_URL)

    with pytest.raises(SmsValidationError) as info:
        hook.send(ALERT, ten_thousand_bad())

    text = str(info.value)
    assert "10000 of 10005 recipients are not valid" in text
    assert (
        "by rule: 6000 not an international number, 3000 national number, 999 gsmsmsid invalid, 1 not text"
        in text
    )
    for index in (5, 6, 7, 8, 9, 6005, 9005, 10004):  # the first five, then the first of each other rule
        assert f"recipients[{index}]:" in text
    assert "(and 9992 more)" in text
    assert len(text) < 3000
    assert requests_mock.call_count == 0
    assert len(caplog.records) <= 1


def test_ten_thousand_bad_numbers_through_the_operator_log_at_most_a_few_lines(
    monkeypatch, requests_mock, caplog, memory_variables
):
    """Proves: the operator fails at once (not retried) with the aggregated error and no log flood."""
    from airflow.providers.common.compat.sdk import AirflowFailException

    from airflow_provider_sms.operators.sms import SmsSendOperator

    caplog.set_level("DEBUG")
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", connection(MOCK_URL, "json"))
    operator = SmsSendOperator(task_id="send", message=ALERT, recipients=ten_thousand_bad())
    ti = type("TI", (), {"dag_id": "d", "task_id": "send", "run_id": "r", "map_index": -1})()

    with pytest.raises(AirflowFailException, match="recipients are not valid") as info:
        operator.execute({"ti": ti})

    assert len(str(info.value)) < 6000
    assert requests_mock.call_count == 0
    assert len(caplog.records) <= 3
    assert sum(record.getMessage().count("recipients[") for record in caplog.records) <= 30


@pytest.mark.integration
@pytest.mark.parametrize("fmt", ["json", "xml"])
def test_ten_thousand_invalid_numbers_are_counted_by_the_sandbox(sms_sandbox, fmt):
    """Proves: the service side counts 10,000 invalid numbers in one answer (sent raw, past the hook)."""
    numbers = [f"0{i:09d}" for i in range(5000)] + [f"33{i:03d}" for i in range(5000)]
    body = codec.encode_send(Message(text="Hello"), numbers, fmt)
    headers = {
        "Authorization": f"Bearer {sms_sandbox.token}",
        "Content-Type": codec.CONTENT_TYPES[fmt],
        "Accept": codec.CONTENT_TYPES[fmt],
    }

    answer = requests.post(sms_sandbox.url + "/send/simulate", data=body, headers=headers, timeout=60)
    result = codec.decode_campaign_result(answer.content, fmt)

    assert (result.total, result.invalid, result.sent, result.cost) == (10_000, 10_000, 0, 0)


# ------------------------------------------------ country codes and spreadsheet cells (issue 40)

# Country codes no report may carry: what a spreadsheet reads as a formula (OWASP's leading characters),
# and anything else that is not two capital letters. The receiver answers each 422 naming the field
# (tests/integration/test_hostile_reports.py, over HTTP).
HOSTILE_COUNTRY_CODES = {
    "equals": "=2+3",
    "plus": "+FR",
    "minus": "-FR",
    "at": "@FR",
    "tab": "\tFR",
    "carriage-return": "\rFR",
    "line-feed": "FR\n",
    "lower-case": "fr",
    "three-letters": "FRA",
    "digits": "33",
    "fullwidth": "ＦＲ",  # noqa: RUF001
    "cyrillic": "FК",  # noqa: RUF001
    "nul": "F\x00",
    "hyperlink": '=HYPERLINK("http://x")',
}


@pytest.mark.parametrize("code", list(HOSTILE_COUNTRY_CODES.values()), ids=list(HOSTILE_COUNTRY_CODES))
def test_a_report_whose_country_code_is_not_two_capital_letters_is_refused_naming_the_field(code):
    """Proves a fix (issue 40): a signed report with ``country_code`` "=2+3" was stored, and came back as
    the cell ``=2+3`` of the failed numbers' CSV. Now the report is invalid, naming the field."""
    report = {
        "date": "2026-11-24T10:00:00+01:00",
        "status": 12,
        "destination": NUMBER,
        "campaign_id": 5000001,
        "country_code": code,
    }

    with pytest.raises(SmsValidationError) as info:
        codec.decode_delivery_report(json.dumps(report).encode())

    assert [name for name, _ in info.value.errors] == ["report.country_code"]
    assert NUMBER not in str(info.value)


# Cells a spreadsheet would read as a formula, and what the failed numbers' CSV writes instead.
FORMULA_CELLS = {
    "equals": ("=2+3", "'=2+3"),
    "plus": ("+33612345678", "'+33612345678"),
    "minus": ("-2+3", "'-2+3"),
    "at": ("@SUM(A1:A9)", "'@SUM(A1:A9)"),
    "tab": ("\t=2+3", "'\t=2+3"),
    "carriage-return": ("\r=2+3", "'\r=2+3"),
    "hyperlink": ('=HYPERLINK("http://x","y")', '\'=HYPERLINK("http://x","y")'),
    "dde": ("=cmd|' /C calc'!A0", "'=cmd|' /C calc'!A0"),
    # A line break inside a cell would start a row of its own with a formula: the cell is quoted whole.
    "row-break": ("FR\r=2+3", "FR\r=2+3"),
    "line-break": ("FR\n=2+3", "FR\n=2+3"),
}


@pytest.mark.parametrize(("cell", "written"), list(FORMULA_CELLS.values()), ids=list(FORMULA_CELLS))
def test_a_csv_cell_a_spreadsheet_would_read_as_a_formula_is_written_inert(cell, written):
    """Proves a fix (issue 40): ``failed.csv`` wrote every cell as stored; one led by ``=``, ``+``, ``-``,
    ``@``, a tab or a carriage return now gets a leading single quote, one holding a line break stays one
    cell of its row, and the other cells are unchanged."""
    import csv

    from airflow_provider_sms.campaigns.api import csv_text

    row = (NUMBER, "expired", cell, "2026-11-24T09:00:00+00:00")

    (read_back,) = list(csv.reader(io.StringIO(csv_text([row]), newline="")))

    assert read_back == [NUMBER, "expired", written, "2026-11-24T09:00:00+00:00"]
