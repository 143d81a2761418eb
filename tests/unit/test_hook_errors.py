"""Retry policy, error paths and hostile bodies of SmsHook (requests-mock)."""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest
import requests
from urllib3.exceptions import NewConnectionError, ProtocolError

from airflow_provider_sms.exceptions import (
    SmsApiError,
    SmsAuthError,
    SmsMaybeSentError,
    SmsNotFoundError,
    SmsTransportError,
    SmsValidationError,
)
from airflow_provider_sms.hooks._request_progress import SendProgress, nothing_sent
from airflow_provider_sms.hooks.sms import SmsAsyncHook, SmsHook
from tests.async_hooks import mock_transport

from .conftest import BASE_URL, connection_json
from .test_hook_wire import NPAI_ENTRY, RESULT_JSON

MESSAGE = {"text": "Hello", "pushtype": "alert"}
NPAI_OK = {"status": 1, "message": "OK", "list": [NPAI_ENTRY], "totalRecords": 1}


def refused() -> requests.ConnectionError:
    reason = NewConnectionError(None, "Failed to establish a new connection: [Errno 111] Connection refused")
    return requests.ConnectionError(requests.urllib3.exceptions.MaxRetryError(None, "/", reason))


def test_status_minus_8_on_send_is_maybe_sent_after_exactly_one_call(make_hook, requests_mock):
    hook = make_hook()
    requests_mock.post(f"{BASE_URL}/send", json={"status": -8, "message": "Campaign held for moderation"})

    with pytest.raises(SmsMaybeSentError, match="may have been created") as info:
        hook.send(MESSAGE, ["33612345678"])

    assert requests_mock.call_count == 1
    assert "status -8" in str(info.value)


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_5xx_on_send_is_maybe_sent_and_never_retried(make_hook, requests_mock, status):
    hook = make_hook()
    requests_mock.post(f"{BASE_URL}/send", status_code=status, text="<html>Bad gateway</html>")

    with pytest.raises(SmsMaybeSentError, match=f"HTTP {status}"):
        hook.send(MESSAGE, ["33612345678"])

    assert requests_mock.call_count == 1


def test_5xx_on_send_lists_is_maybe_sent_and_never_retried(make_hook, requests_mock):
    hook = make_hook("xml")
    requests_mock.post(f"{BASE_URL}/send/lists", status_code=503)

    with pytest.raises(SmsMaybeSentError):
        hook.send_lists(MESSAGE, [1])

    assert requests_mock.call_count == 1


@pytest.mark.parametrize(
    ("failure", "expected"),
    [
        (requests.ReadTimeout("read timed out"), SmsMaybeSentError),
        (
            requests.ConnectionError(ProtocolError("Connection aborted.", ConnectionResetError())),
            SmsMaybeSentError,
        ),
        (requests.exceptions.ChunkedEncodingError("truncated"), SmsMaybeSentError),
        (requests.ConnectTimeout("connect timed out"), SmsTransportError),
        # requests-mock bypasses the hook's adapter: judged by class, and an SSLError may come after
        # the whole request was written (a TLS record broken while the answer is read).
        (requests.exceptions.SSLError("[SSL: WRONG_VERSION_NUMBER] wrong version number"), SmsMaybeSentError),
    ],
    ids=["read-timeout", "reset-after-send", "truncated-stream", "connect-timeout", "ssl-error"],
)
def test_send_transport_failures_are_classified(make_hook, requests_mock, failure, expected):
    hook = make_hook()
    requests_mock.post(f"{BASE_URL}/send", exc=failure)

    with pytest.raises(expected) as info:
        hook.send(MESSAGE, ["33612345678"])

    assert requests_mock.call_count == 1
    assert not isinstance(info.value, SmsMaybeSentError) or "must not be sent again" in str(info.value)


UNTRACKED = SendProgress()
CONNECTING = SendProgress(tracked=True)
WRITING = SendProgress(tracked=True, request_started=True)


@pytest.mark.parametrize(
    ("failure", "progress", "expected"),
    [
        # Not tracked (another adapter, requests-mock): the classes raised only before a request is written.
        (requests.exceptions.SSLError("handshake or broken record"), UNTRACKED, False),
        (requests.ConnectTimeout("connect timed out"), UNTRACKED, True),
        (refused(), UNTRACKED, True),
        (requests.exceptions.InvalidURL("bad"), UNTRACKED, True),
        (requests.exceptions.MissingSchema("bad"), UNTRACKED, True),
        (requests.exceptions.InvalidSchema("bad"), UNTRACKED, True),
        (requests.exceptions.ProxyError("proxy"), UNTRACKED, False),
        (requests.ReadTimeout("read timed out"), UNTRACKED, False),
        # Tracked: where it failed decides, whatever the class.
        (requests.exceptions.SSLError("handshake"), CONNECTING, True),
        (requests.exceptions.ProxyError("CONNECT refused"), CONNECTING, True),
        (requests.exceptions.SSLError("broken record"), WRITING, False),
        # A redirect's second connection refused, after the first request was written.
        (refused(), WRITING, False),
    ],
)
def test_nothing_sent_by_where_the_send_failed_else_by_class(failure, progress, expected):
    assert nothing_sent(failure, progress) is expected


def test_a_send_not_through_the_hooks_adapter_falls_back_to_the_class_rule(make_hook, requests_mock):
    """requests-mock stands in for the adapter: SSLError is maybe sent, a connect timeout nothing sent."""
    hook = make_hook()
    requests_mock.post(f"{BASE_URL}/send", exc=requests.exceptions.SSLError("record layer failure"))
    requests_mock.post(f"{BASE_URL}/send/lists", exc=requests.ConnectTimeout("connect timed out"))

    with pytest.raises(SmsMaybeSentError, match="SSLError"):
        hook.send(MESSAGE, ["33612345678"])
    with pytest.raises(SmsTransportError, match="nothing was sent") as info:
        hook.send_lists(MESSAGE, [1])

    assert not isinstance(info.value, SmsMaybeSentError)
    assert requests_mock.call_count == 2


def test_connection_refused_on_send_is_transport_error_nothing_sent(make_hook, requests_mock):
    hook = make_hook()
    requests_mock.post(f"{BASE_URL}/send", exc=refused())

    with pytest.raises(SmsTransportError, match="nothing was sent") as info:
        hook.send(MESSAGE, ["33612345678"])

    assert not isinstance(info.value, SmsMaybeSentError)
    assert requests_mock.call_count == 1


@pytest.mark.parametrize("body", [b"", b'{"status": 1, "message": "OK", "tick', b"<html>oops</html>"])
def test_unreadable_2xx_answer_to_a_send_is_maybe_sent(make_hook, requests_mock, body):
    hook = make_hook()
    requests_mock.post(f"{BASE_URL}/send", content=body)

    with pytest.raises(SmsMaybeSentError):
        hook.send(MESSAGE, ["33612345678"])


def test_429_on_send_is_not_retried_and_says_nothing_was_sent(make_hook, requests_mock):
    hook = make_hook()
    requests_mock.post(f"{BASE_URL}/send", status_code=429, headers={"Retry-After": "3"})

    with pytest.raises(SmsTransportError, match="nothing was sent"):
        hook.send(MESSAGE, ["33612345678"])

    assert requests_mock.call_count == 1


def test_503_then_200_on_get_npai_succeeds_after_a_retry(make_hook, requests_mock, sleeps):
    hook = make_hook()
    requests_mock.get(f"{BASE_URL}/npai", [{"status_code": 503, "text": "busy"}, {"json": NPAI_OK}])

    npai = hook.get_npai()

    assert [entry.id for entry in npai.entries] == ["81"]
    assert requests_mock.call_count == 2
    assert len(sleeps) == 1


def test_429_with_retry_after_on_simulate_waits_then_retries(make_hook, requests_mock, sleeps):
    hook = make_hook()
    sim = {key: value for key, value in RESULT_JSON.items() if key != "ticket"}
    requests_mock.post(
        f"{BASE_URL}/send/simulate",
        [{"status_code": 429, "headers": {"Retry-After": "7"}}, {"json": sim}],
    )

    result = hook.simulate(MESSAGE, ["33612345678"])

    assert result.cost == 2
    assert requests_mock.call_count == 2
    assert sleeps == [7.0]


def test_reads_give_up_after_max_tries_with_transport_error(make_hook, requests_mock, sleeps):
    hook = make_hook()
    requests_mock.get(
        f"{BASE_URL}/webhook/1", status_code=502, text="<html><body>502 Bad Gateway</body></html>"
    )

    with pytest.raises(SmsTransportError, match="HTTP 502"):
        hook.get_webhook("1")

    assert requests_mock.call_count == 3
    assert len(sleeps) == 2
    assert sleeps[1] > sleeps[0] * 0.9  # exponential, with jitter


def test_connection_refused_on_read_is_retried_then_transport_error(make_hook, requests_mock, sleeps):
    hook = make_hook()
    requests_mock.get(f"{BASE_URL}/npai", exc=refused())

    with pytest.raises(SmsTransportError, match="Connection refused"):
        hook.get_npai()

    assert requests_mock.call_count == 3


@pytest.mark.parametrize("call", ["read", "send"])
def test_an_unreachable_service_is_named_by_connection_and_address(monkeypatch, sleeps, call):
    """A real refused connect on 127.0.0.1: the error names the connection and where it points, not
    urllib3's private connection class."""
    with socket.socket() as probe:  # a port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv(
        "AIRFLOW_CONN_SMS_NOWHERE",
        json.dumps({"conn_type": "sms", "host": f"http://127.0.0.1:{port}", "password": "dev-token"}),
    )
    hook = SmsHook("sms_nowhere")

    with pytest.raises(SmsTransportError) as info:
        hook.get_npai() if call == "read" else hook.send(MESSAGE, ["33612345678"])

    text = str(info.value)
    assert f"connection 'sms_nowhere' could not connect to 127.0.0.1:{port}" in text
    assert "Connection refused" in text
    assert "_Tracking" not in text
    assert "HTTPConnection" not in text
    if call == "send":
        assert "nothing was sent" in text


@pytest.mark.parametrize(
    ("http_status", "body", "error", "match"),
    [
        (401, {"status": -1, "message": "Unauthorized"}, SmsAuthError, "status -1"),
        (200, {"status": -1, "message": "Unauthorized"}, SmsAuthError, "access token"),
        (404, {"status": -5, "message": "Webhook not found"}, SmsNotFoundError, "Webhook not found"),
        (200, {"error": "Internal error"}, SmsApiError, "Internal error"),
        (404, "<html>Not Found</html>", SmsApiError, "HTTP 404"),
        (200, '{"status": 1, "message": "OK", "webh', SmsApiError, "not valid JSON"),
        (200, "", SmsApiError, "empty body"),
        (200, {"status": 1, "message": "OK"}, SmsApiError, "no 'webhook'"),
        (200, {"status": "x", "message": "?"}, SmsApiError, "not an integer"),
    ],
)
def test_error_answers_to_reads_raise_clear_errors(make_hook, requests_mock, http_status, body, error, match):
    hook = make_hook()
    kwargs = {"json": body} if isinstance(body, dict) else {"text": body}
    requests_mock.get(f"{BASE_URL}/webhook/9", status_code=http_status, **kwargs)

    with pytest.raises(error, match=match):
        hook.get_webhook("9")

    assert requests_mock.call_count == 1


def test_api_error_keeps_status_message_and_raw_body(make_hook, requests_mock):
    hook = make_hook()
    body = {"status": -7, "message": "Invalid sender", "details": {"sender": "too long"}}
    requests_mock.post(f"{BASE_URL}/send", status_code=400, json=body)

    with pytest.raises(SmsApiError) as info:
        hook.send(MESSAGE, ["33612345678"])

    error = info.value
    assert (error.status, error.message, error.http_status) == (-7, "Invalid sender", 400)
    assert error.details == {"sender": "too long"}
    assert b"Invalid sender" in error.body
    assert "data error" in str(error)


@pytest.mark.parametrize(
    ("call", "args", "field"),
    [
        (
            "send",
            ({"text": "Go <-short-> <-short->", "links": ["https://a.example.com"]}, ["33612345678"]),
            "marker",
        ),
        ("send", ({"text": "Hi", "pushtype": "promo"}, ["33612345678"]), "pushtype"),
        ("send", ({"text": "Go <-short->", "links": ["https://a.example.com"]}, ["33612345678"]), "pushtype"),
        ("send", (MESSAGE, ["+33 6 12 ab 56 78"]), r"recipients\[0\]: .* not an international"),
        ("send", (MESSAGE, ["0612345678"]), "national number"),
        ("send", (MESSAGE, []), "no recipients"),
        ("send_lists", (MESSAGE, [{"value": 3, "gsmsmsid": "x"}]), "gsmsmsid"),
        ("send_lists", (MESSAGE, ["abc"]), "list id must be an integer"),
        ("simulate_lists", (MESSAGE, [True]), "list id must be an integer"),
        ("send", ({"text": "Hi", "delay": "2020-01-01 10:00:00"}, ["33612345678"]), "in the past"),
        ("send", ({"text": "Hi", "delay": "2031-03-30 02:30:00"}, ["33612345678"]), "does not exist"),
        ("send", ({"text": "Hi", "sender": "ThisIsWayTooLong"}, ["33612345678"]), "sender"),
        ("simulate", ({"text": ""}, ["33612345678"]), "text"),
    ],
)
def test_invalid_input_raises_before_any_request(make_hook, requests_mock, call, args, field):
    hook = make_hook()

    with pytest.raises(SmsValidationError, match=field):
        getattr(hook, call)(*args)

    assert requests_mock.call_count == 0


def test_ten_thousand_bad_numbers_make_one_aggregated_error(make_hook, requests_mock):
    hook = make_hook()
    numbers = ["33612345678"] * 5 + [f"+33 6 bad {i}" for i in range(10_000)]

    with pytest.raises(SmsValidationError) as info:
        hook.send(MESSAGE, numbers)

    text = str(info.value)
    assert "10000 of 10005 recipients are not valid" in text
    assert "recipients[5]" in text
    assert "(and 9995 more)" in text
    assert len(text) < 2000
    assert requests_mock.call_count == 0


BILLION_LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
 <!ENTITY lol5 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
 <!ENTITY lol6 "&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;">
 <!ENTITY lol7 "&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;">
 <!ENTITY lol8 "&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;">
 <!ENTITY lol9 "&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;">
]>
<response><status>1</status><message>&lol9;</message><list/></response>"""

EXTERNAL_ENTITY = b"""<?xml version="1.0"?>
<!DOCTYPE response [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>
<response><status>1</status><message>&xxe;</message></response>"""


@pytest.mark.parametrize("body", [BILLION_LAUGHS, EXTERNAL_ENTITY], ids=["billion-laughs", "external-entity"])
def test_hostile_xml_is_refused_without_expansion(make_hook, requests_mock, body):
    hook = make_hook("xml")
    requests_mock.get(f"{BASE_URL}/npai", content=body, headers={"Content-Type": "application/xml"})

    started = time.process_time()
    with pytest.raises(SmsApiError, match="refused as unsafe") as info:
        hook.get_npai()

    assert time.process_time() - started < 1.0  # no expansion happened (a generous bound, not a benchmark)
    assert "root:" not in str(info.value)
    assert requests_mock.call_count == 1


def test_oversized_answer_is_refused(make_hook, requests_mock, monkeypatch):
    monkeypatch.setattr("airflow_provider_sms._bounded_body.MAX_RESPONSE_BYTES", 1024)
    hook = make_hook()
    requests_mock.get(f"{BASE_URL}/npai", content=b"x" * 5000)

    with pytest.raises(SmsApiError, match="larger than"):
        hook.get_npai()


# ------------------------------------------------------- sends: only a definite refusal means "not sent"

SEND_CALLS = {
    "/send": lambda hook: hook.send(MESSAGE, ["33612345678"]),
    "/send/lists": lambda hook: hook.send_lists(MESSAGE, [1]),
}
FIGURES = {"cost": 1, "credits": 99, "total": 1, "sent": 1}


def send_answer(requests_mock, fmt: str, path: str, data: dict, http: int = 200) -> None:
    from airflow_provider_sms.sandbox import wire

    body = wire.encode_response(data, fmt)
    requests_mock.post(f"{BASE_URL}{path}", status_code=http, content=body)


@pytest.mark.parametrize("path", list(SEND_CALLS))
@pytest.mark.parametrize(
    ("http", "data", "why"),
    [
        (200, {"status": 1, "message": "OK"}, "status 1"),
        (200, {"status": 1, "message": "OK", "ticket": "42", **FIGURES, "cost": "a lot"}, "status 1"),
        (
            400,
            {"status": 1, "message": "OK", "ticket": "42", **FIGURES},
            "HTTP 400 with a body saying status 1",
        ),
        (200, {"status": -99, "message": "Unknown error"}, "status -99"),
        (200, {"status": -42, "message": "Something new"}, "status -42"),
        (200, {"status": -8, "message": "Held for moderation"}, "status -8"),
        (403, {"status": -8, "message": "Held for moderation"}, "status -8"),
        (408, {"status": -7, "message": "late"}, "HTTP 408"),
    ],
    ids=[
        "ok-without-figures",
        "ok-wrong-type",
        "400-saying-ok",
        "-99",
        "undocumented",
        "-8",
        "403-with--8",
        "408",
    ],
)
def test_send_answers_that_are_no_definite_refusal_are_maybe_sent(
    make_hook, requests_mock, fmt, path, http, data, why
):
    """Proves: the never-twice rule is one rule: anything but a definite refusal is 'maybe sent'."""
    hook = make_hook(fmt)
    send_answer(requests_mock, fmt, path, data, http)

    with pytest.raises(SmsMaybeSentError, match="must not be sent again automatically") as info:
        SEND_CALLS[path](hook)

    assert why in str(info.value)
    assert requests_mock.call_count == 1


@pytest.mark.parametrize("path", list(SEND_CALLS))
@pytest.mark.parametrize(
    ("http", "data", "error"),
    [
        *[(200, {"status": status, "message": "refused"}, SmsApiError) for status in (-2, -3, -4, -6, -7)],
        (401, {"status": -1, "message": "Invalid token"}, SmsAuthError),
        (404, {"status": -5, "message": "Unknown list"}, SmsNotFoundError),
        (400, {"status": -99, "message": "Bad request"}, SmsApiError),
        (422, {"error": "unprocessable"}, SmsApiError),
    ],
    ids=["-2", "-3", "-4", "-6", "-7", "401--1", "404--5", "400--99", "422-no-status"],
)
def test_send_definite_refusals_are_the_services_error(
    make_hook, requests_mock, fmt, path, http, data, error
):
    """Proves: a refusal status (-1 to -7), or a 4xx not claiming success, means nothing was sent."""
    hook = make_hook(fmt)
    send_answer(requests_mock, fmt, path, data, http)

    with pytest.raises(error) as info:
        SEND_CALLS[path](hook)

    assert not isinstance(info.value, SmsMaybeSentError)
    assert info.value.http_status == http
    assert requests_mock.call_count == 1


@pytest.mark.parametrize("path", list(SEND_CALLS))
def test_send_to_a_wrong_base_url_404_html_is_a_refusal(make_hook, requests_mock, path):
    hook = make_hook()
    requests_mock.post(f"{BASE_URL}{path}", status_code=404, text="<html><h1>Not Found</h1></html>")

    with pytest.raises(SmsApiError, match="HTTP 404") as info:
        SEND_CALLS[path](hook)

    assert not isinstance(info.value, SmsMaybeSentError)


def test_408_on_a_read_is_retried(make_hook, requests_mock, sleeps):
    hook = make_hook()
    requests_mock.get(f"{BASE_URL}/npai", [{"status_code": 408}, {"json": NPAI_OK}])

    assert len(hook.get_npai().entries) == 1
    assert requests_mock.call_count == 2
    assert len(sleeps) == 1


# ------------------------------------------------------------------------------- base URL without scheme


def test_a_base_url_without_scheme_is_refused_before_any_request(monkeypatch, requests_mock):
    monkeypatch.setenv(
        "AIRFLOW_CONN_SMS_DEFAULT",
        json.dumps({"conn_type": "sms", "host": "127.0.0.1:35509", "password": "dev-token"}),
    )
    hook = SmsHook()

    with pytest.raises(SmsValidationError) as info:
        hook.simulate(MESSAGE, ["33612345678"])

    assert str(info.value) == (
        "connection 'sms_default': the Base URL (host) '127.0.0.1:35509' has no scheme; write it with one, "
        "e.g. 'https://127.0.0.1:35509' for the service or 'http://127.0.0.1:35509' for a local sandbox"
    )
    assert info.value.errors[0][0] == "host"
    assert requests_mock.call_count == 0
    ok, text = hook.test_connection()  # what `airflow connections test` and the UI's Test button show
    assert not ok
    assert "has no scheme" in text
    assert "'http://127.0.0.1:35509'" in text


def test_the_hint_of_a_uri_without_scheme_keeps_its_port(monkeypatch):
    """The URI form gives the port apart from the host (sms://:TOKEN@127.0.0.1:8190): the hint keeps it."""
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", "sms://:dev-token@127.0.0.1:8190")

    ok, text = SmsHook().test_connection()

    assert not ok
    assert "'https://127.0.0.1:8190' for the service or 'http://127.0.0.1:8190' for a local sandbox" in text


def test_a_scheme_given_as_the_connections_schema_is_honoured(monkeypatch, requests_mock):
    """The URI form puts the scheme in the path: sms://:TOKEN@host:port/https."""
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", "sms://:dev-token@sms.test:8443/https")
    requests_mock.get("https://sms.test:8443/npai", json=NPAI_OK)

    assert len(SmsHook().get_npai().entries) == 1


@pytest.mark.parametrize("http_status", [401, 200])
def test_a_refused_token_names_the_connection_to_fix_on_every_call(monkeypatch, requests_mock, http_status):
    monkeypatch.setenv("AIRFLOW_CONN_SMS_XML_ALERTS", connection_json())
    refusal = {"status": -1, "message": "invalid or missing access token"}
    for method, path in (
        ("POST", "/send"),
        ("POST", "/send/simulate"),
        ("GET", "/npai"),
        ("GET", "/webhook/9"),
    ):
        requests_mock.register_uri(method, f"{BASE_URL}{path}", status_code=http_status, json=refusal)
    hook = SmsHook("sms_xml_alerts")
    calls = (
        lambda: hook.send(MESSAGE, ["33612345678"]),
        lambda: hook.simulate(MESSAGE, ["33612345678"]),
        hook.get_npai,
        lambda: hook.get_webhook("9"),
    )

    for call in calls:
        with pytest.raises(SmsAuthError) as info:
            call()
        assert info.value.connection == "sms_xml_alerts"
        assert "the service answered status -1" in str(info.value)
        assert str(info.value).endswith(
            ": invalid or missing access token (authentication error: check the access token, the "
            "password of the Airflow connection 'sms_xml_alerts')"
        )


async def test_the_async_hook_names_the_connection_of_a_refused_token(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SMS_ALERTS", connection_json())
    refusal = json.dumps({"status": -1, "message": "invalid or missing access token"}).encode()
    transport = mock_transport(lambda request: httpx.Response(401, content=refusal))
    monkeypatch.setattr(
        SmsAsyncHook,
        "_client",
        lambda self, settings, build=SmsAsyncHook._client: build(self, settings, transport),
    )

    async with SmsAsyncHook("sms_alerts") as hook:
        for call in (hook.get_npai, lambda: hook.get_webhook("9")):
            with pytest.raises(SmsAuthError, match="password of the Airflow connection 'sms_alerts'"):
                await call()
