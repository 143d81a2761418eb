"""The fault matrix: every endpoint x every fault, against the sandbox as a real HTTP server on 127.0.0.1.

Each case injects one fault with the sandbox's fault API (or, for the TLS rows, has the TLS front of
tests/tls_server.py relay the request to the sandbox and break the answer's TLS record), makes one
call through :class:`SmsHook`, and asserts the outcome (retried and succeeded, or which error) and,
through the inspection API, how many campaigns were created and how many requests reached the
sandbox: a send is made exactly once (never two campaigns for one send), simulations and reads
create nothing.

The rule (docs/operators.md, "Never the same campaign twice"): sends (POST /send, /send/lists) are
never retried, and any outcome that leaves the send in doubt is ``SmsMaybeSentError``; simulations
and reads are retried (bounded, with backoff, honouring Retry-After) on connection errors, 429 and
5xx. :data:`ROWS` holds the expected outcome of every cell: it drives the tests and prints the table
of docs/reliability.md::

    .venv/bin/python -m tests.reliability.test_fault_matrix
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import pytest

from airflow_provider_sms.exceptions import (
    SmsApiError,
    SmsError,
    SmsMaybeSentError,
    SmsTransportError,
)
from airflow_provider_sms.hooks.sms import SmsHook
from airflow_provider_sms.models import CampaignResult, NpaiList, Webhook
from tests.tls_server import AFTER_STATUS, BEFORE_STATUS, TlsFront

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, Callable, Iterator

    from airflow.triggers.base import TriggerEvent

    from airflow_provider_sms.sandbox.server import SandboxServer
    from airflow_provider_sms.triggers.sms import SmsPollingTrigger

pytestmark = pytest.mark.integration

CONN_ID = "sms_faults"
# Small on purpose: the whole file must stay fast. A slow fault of SLOW seconds always outlasts the
# connection's TIMEOUT, even on a loaded machine; a normal answer over loopback takes milliseconds.
TIMEOUT = 0.5
SLOW = 1.5
MAX_TRIES = 3
BACKOFF = 0.01
# Larger than BACKOFF's waits (at most 2 x 0.01 s plus jitter): an elapsed time this long shows that
# the Retry-After was honoured.
RETRY_AFTER = 0.1

ALERT = {"text": "Your parcel is on its way", "pushtype": "alert"}
NUMBERS = ["33612000001", "33612000002"]

# ---------------------------------------------------------------------------------------- endpoints


@dataclass(frozen=True)
class Endpoint:
    """One endpoint of the service and the hook call that reaches it.

    :param label: as in the table and the test ids, e.g. ``POST /send``.
    :param name: its name in the sandbox's fault API (``Faults.endpoints``) and request counts.
    :param sends: whether it creates a campaign (never retried).
    :param call: the hook call.
    :param ok: checks the result of a call that succeeded.
    """

    label: str
    name: str
    sends: bool
    call: Callable[[SmsHook], object]
    ok: Callable[[Any], bool]


def _campaign_ok(result: CampaignResult) -> bool:
    # The numbers given, or the 5 numbers of the sandbox's list 1.
    return result.status == 1 and result.total in (len(NUMBERS), 5)


ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint("POST /send", "/send", True, lambda hook: hook.send(ALERT, NUMBERS), _campaign_ok),
    Endpoint("POST /send/lists", "/send/lists", True, lambda hook: hook.send_lists(ALERT, [1]), _campaign_ok),
    Endpoint(
        "POST /send/simulate",
        "/send/simulate",
        False,
        lambda hook: hook.simulate(ALERT, NUMBERS),
        _campaign_ok,
    ),
    Endpoint(
        "POST /send/lists/simulate",
        "/send/lists/simulate",
        False,
        lambda hook: hook.simulate_lists(ALERT, [1]),
        _campaign_ok,
    ),
    Endpoint(
        "GET /webhook/:id",
        "/webhook",
        False,
        lambda hook: hook.get_webhook("1"),
        lambda result: isinstance(result, Webhook) and result.webhook_id == "1",
    ),
    Endpoint(
        "GET /npai",
        "/npai",
        False,
        lambda hook: hook.get_npai(),
        lambda result: isinstance(result, NpaiList) and len(result.entries) == 2,
    ),
)
READ_ENDPOINTS = tuple(endpoint for endpoint in ENDPOINTS if not endpoint.sends)

# ------------------------------------------------------------------------------------ the matrix

RETRIED = "Retried → OK"
# GET /npai answered status 1 with no ``list``: the shape of an empty list (in XML, zero ``list``
# elements look exactly so), read as one.
READ_EMPTY = "OK, read as an empty list"
MAYBE_SENT = "MaybeSent"
TRANSPORT = "Transport"
API_ERROR = "ApiError"
ERRORS: dict[str, type[SmsError]] = {
    MAYBE_SENT: SmsMaybeSentError,
    TRANSPORT: SmsTransportError,
    API_ERROR: SmsApiError,
}


@dataclass(frozen=True)
class Expected:
    """The outcome of one cell.

    :param outcome: :data:`RETRIED` (the call succeeded after one retry) or a key of :data:`ERRORS`.
    :param campaigns: campaigns the sandbox holds afterwards.
    :param requests: requests the sandbox received (1 on a send: never retried).
    """

    outcome: str
    campaigns: int
    requests: int

    def cell(self) -> str:
        """The cell's text: outcome and campaigns recorded."""
        return f"{self.outcome}, {self.campaigns}"


@dataclass(frozen=True)
class Row:
    """One fault and what it does to each kind of endpoint.

    :param label: the fault, as in the table and the test ids.
    :param faults: the sandbox faults for ``count`` occurrences (``Faults`` fields, ``endpoints`` aside);
        ``None`` when the sandbox injects none: connection refused (the connection points at a closed
        port) and the TLS rows.
    :param send: the outcome on POST /send and /send/lists (the fault fires once).
    :param read: the outcome on the simulations and reads when the fault fires once.
    :param persistent: the outcome on the simulations and reads when it fires on every try, if the
        fault is retried at all (``None``: not retried, the same as ``read``).
    :param trigger: what the async triggers (GET /webhook/:id, GET /npai) do when it fires once.
    :param npai: the outcome on GET /npai, when it differs from ``read``.
    :param npai_trigger: what the NPAI trigger does, when it differs from ``trigger``.
    :param tls_break: for the TLS rows, where the TLS front breaks the answer (``BEFORE_STATUS``,
        ``AFTER_STATUS``), ``count`` times.
    """

    label: str
    faults: Callable[[int], dict[str, Any]] | None
    send: Expected
    read: Expected
    persistent: Expected | None
    trigger: str
    npai: Expected | None = None
    npai_trigger: str | None = None
    tls_break: str | None = None


# A retried read: the first try meets the fault, the second succeeds; every try meets it: all fail.
READ_RETRIED = Expected(RETRIED, 0, 2)
READ_EXHAUSTED = Expected(TRANSPORT, 0, MAX_TRIES)
# Trigger outcomes.
POLLS_AGAIN = "polls again → OK"
POLLS_ON = "polls on (until the sensor's timeout)"
ERROR_EVENT = "error event (api): task fails"

ROWS: tuple[Row, ...] = (
    # Nothing reaches the service: safe to retry anywhere, but sends leave that to the user.
    Row("connection refused", None, Expected(TRANSPORT, 0, 0), Expected(TRANSPORT, 0, 0), None, POLLS_ON),
    # The request was processed (a send's campaign recorded), then the connection is reset unanswered.
    Row(
        "connection dropped after the request was recorded",
        lambda n: {"drop_after_record": n},
        Expected(MAYBE_SENT, 1, 1),
        READ_RETRIED,
        READ_EXHAUSTED,
        POLLS_AGAIN,
    ),
    # The sandbox answers after SLOW seconds (a send's campaign is recorded first).
    Row(
        "read timeout",
        lambda n: {"slow": (SLOW, n)},
        Expected(MAYBE_SENT, 1, 1),
        READ_RETRIED,
        READ_EXHAUSTED,
        POLLS_AGAIN,
    ),
    # The sandbox's HTTP errors come before any work (nothing recorded); a real 5xx may come after
    # the campaign was created, so a send cannot tell: MaybeSent either way.
    Row(
        "500",
        lambda n: {"http_error": (500, n)},
        Expected(MAYBE_SENT, 0, 1),
        READ_RETRIED,
        READ_EXHAUSTED,
        POLLS_AGAIN,
    ),
    Row(
        "502 with an HTML body",
        lambda n: {"http_error": (502, n)},
        Expected(MAYBE_SENT, 0, 1),
        READ_RETRIED,
        READ_EXHAUSTED,
        POLLS_AGAIN,
    ),
    Row(
        "503",
        lambda n: {"http_error": (503, n)},
        Expected(MAYBE_SENT, 0, 1),
        READ_RETRIED,
        READ_EXHAUSTED,
        POLLS_AGAIN,
    ),
    # The server gave up waiting for the request: a send may have been read and processed in part.
    Row(
        "408",
        lambda n: {"http_error": (408, n)},
        Expected(MAYBE_SENT, 0, 1),
        READ_RETRIED,
        READ_EXHAUSTED,
        POLLS_AGAIN,
    ),
    # The service refused the request: nothing was sent, but a send is still not retried by the hook.
    Row(
        "429 with Retry-After",
        lambda n: {"rate_limit": (RETRY_AFTER, n)},
        Expected(TRANSPORT, 0, 1),
        READ_RETRIED,
        READ_EXHAUSTED,
        POLLS_AGAIN,
    ),
    # On a send: the campaign exists and may still go out. Elsewhere: an answer of the service
    # (nothing created), not retried.
    Row(
        "status -8",
        lambda n: {"maybe_sent": n},
        Expected(MAYBE_SENT, 1, 1),
        Expected(API_ERROR, 0, 1),
        None,
        ERROR_EVENT,
    ),
    # Status 1 without the result's figures: the campaign exists, the answer cannot be trusted.
    Row(
        "status 1 without the result's fields",
        lambda n: {"bad_success_shape": n},
        Expected(MAYBE_SENT, 1, 1),
        Expected(API_ERROR, 0, 1),
        None,
        ERROR_EVENT,
        npai=Expected(READ_EMPTY, 0, 1),
        npai_trigger=POLLS_AGAIN,
    ),
    # Status -99, unknown error: the service does not say it refused, so a send may have gone out.
    Row(
        "status -99",
        lambda n: {"unknown_error": n},
        Expected(MAYBE_SENT, 1, 1),
        Expected(API_ERROR, 0, 1),
        None,
        ERROR_EVENT,
    ),
    # Half the body, then the connection closes: a broken transfer, retried like a dropped connection.
    Row(
        "truncated body",
        lambda n: {"truncated": n},
        Expected(MAYBE_SENT, 1, 1),
        READ_RETRIED,
        READ_EXHAUSTED,
        POLLS_AGAIN,
    ),
    # A complete 200 that is no answer: repeating the call would get the same (a base URL that points
    # at a web site, a proxy answering instead of the service), so it is a clear error at once.
    Row(
        "empty body",
        lambda n: {"empty_body": n},
        Expected(MAYBE_SENT, 1, 1),
        Expected(API_ERROR, 0, 1),
        None,
        ERROR_EVENT,
    ),
    Row(
        "wrong content type",
        lambda n: {"wrong_content_type": n},
        Expected(MAYBE_SENT, 1, 1),
        Expected(API_ERROR, 0, 1),
        None,
        ERROR_EVENT,
    ),
    # Over HTTPS: the whole request was written and recorded, then the answer's TLS record is broken.
    # requests raises SSLError, as for a failed handshake; a send cannot take it for "nothing sent".
    Row(
        "TLS broken after the POST, before the status line",
        None,
        Expected(MAYBE_SENT, 1, 1),
        READ_RETRIED,
        READ_EXHAUSTED,
        POLLS_AGAIN,
        tls_break=BEFORE_STATUS,
    ),
    Row(
        "TLS broken after the POST, after the status line",
        None,
        Expected(MAYBE_SENT, 1, 1),
        READ_RETRIED,
        READ_EXHAUSTED,
        POLLS_AGAIN,
        tls_break=AFTER_STATUS,
    ),
)


def expected(endpoint: Endpoint, row: Row) -> Expected:
    """The outcome of the cell ``row`` x ``endpoint`` when the fault fires once."""
    if endpoint.name == "/npai" and row.npai is not None:
        return row.npai
    return row.send if endpoint.sends else row.read


def trigger_outcome(trigger_name: str, row: Row) -> str:
    """What a trigger does when the row's fault fires once."""
    if trigger_name == "SmsNpaiTrigger" and row.npai_trigger is not None:
        return row.npai_trigger
    return row.trigger


def cell(endpoint: Endpoint, row: Row) -> str:
    """The table's cell: one-shot outcome, and for retried reads what every try failing ends in."""
    text = expected(endpoint, row).cell()
    if not endpoint.sends and row.persistent is not None:
        text += f"; every try: {row.persistent.cell()}"
    return text


def markdown_table() -> str:
    """The matrix as a markdown table (rows: faults, columns: endpoints), with its legend."""
    header = ["fault", *(endpoint.label for endpoint in ENDPOINTS)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join([row.label, *(cell(e, row) for e in ENDPOINTS)]) + " |" for row in ROWS]
    cases = len(ROWS) * len(ENDPOINTS) + sum(
        len(READ_ENDPOINTS) for row in ROWS if row.persistent is not None
    )
    legend = (
        f"\nEach cell: outcome, campaigns recorded by the sandbox. `{RETRIED}`: the hook retried and the "
        f"call succeeded; `{MAYBE_SENT}`: `SmsMaybeSentError`; `{TRANSPORT}`: `SmsTransportError`; "
        f"`{API_ERROR}`: `SmsApiError`. `every try`: the fault on each of the hook's {MAX_TRIES} "
        "tries. Every send reached the sandbox at most once (never retried); simulations and reads "
        f"created nothing. {cases} cases (plus {len(PROBE_ROWS) * len(ENDPOINTS)} in XML and "
        f"{len(ROWS) * len(TRIGGERS)} through the async triggers); campaigns duplicated: 0."
    )
    triggers = [
        "",
        "| fault | async triggers (GET /webhook/:id, GET /npai, deferrable sensors) |",
        "|---|---|",
    ]
    triggers += [
        f"| {row.label} | {row.trigger}"
        + (f" (NPAI trigger: {row.npai_trigger})" if row.npai_trigger else "")
        + " |"
        for row in ROWS
    ]
    return "\n".join([*lines, legend, *triggers])


# ------------------------------------------------------------------------------------------- fixtures


def closed_port() -> int:
    """A 127.0.0.1 port nothing listens on: bound, then released."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def connect(
    sandbox: SandboxServer,
    monkeypatch: pytest.MonkeyPatch,
    row: Row,
    fmt: str = "json",
    front: TlsFront | None = None,
) -> None:
    """Point the ``sms_faults`` connection at the sandbox, at a closed port for connection refused, or,
    for the TLS rows, at the sandbox's TLS ``front`` (its certificate as ``verify``)."""
    if row.tls_break is not None:
        assert front is not None, "a TLS row needs the tls_front fixture"
        connection = sandbox.connection_json(fmt, timeout=TIMEOUT, verify=str(front.certificate.cert))
        connection = connection.replace(sandbox.url, front.url)
    else:
        connection = sandbox.connection_json(fmt, timeout=TIMEOUT)
        if row.faults is None:
            connection = connection.replace(sandbox.url, f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", connection)


def inject(
    sandbox: SandboxServer, endpoint: Endpoint, row: Row, count: int, front: TlsFront | None = None
) -> None:
    """Set the row's fault for ``count`` occurrences, scoped to ``endpoint`` alone."""
    if row.faults is not None:
        sandbox.inspect.set_faults(**row.faults(count), endpoints=[endpoint.name])
    if row.tls_break is not None:
        assert front is not None, "a TLS row needs the tls_front fixture"
        front.break_at, front.breaks = row.tls_break, count


def requests_received(sandbox: SandboxServer, endpoint: Endpoint) -> int:
    """Requests the sandbox received on ``endpoint``, and none on any other."""
    counts = sandbox.inspect.requests()
    others = {name: n for name, n in counts.items() if name != endpoint.name and n}
    assert not others, f"requests reached other endpoints: {others}"
    return counts[endpoint.name]


def run_case(
    sandbox: SandboxServer,
    endpoint: Endpoint,
    row: Row,
    want: Expected,
    count: int,
    front: TlsFront | None = None,
) -> tuple[object, float]:
    """Inject, call, and assert the outcome and the sandbox's counts; returns the result and the time."""
    inject(sandbox, endpoint, row, count, front)
    hook = SmsHook(CONN_ID, max_tries=MAX_TRIES, backoff=BACKOFF)
    start = time.monotonic()
    result: object = None
    if want.outcome == RETRIED:
        result = endpoint.call(hook)
        assert endpoint.ok(result), result
    elif want.outcome == READ_EMPTY:
        result = endpoint.call(hook)
        assert isinstance(result, NpaiList), result
        assert result.entries == []
    else:
        with pytest.raises(SmsError) as caught:
            endpoint.call(hook)
        # Exactly the class the cell names: not a subclass standing for another outcome.
        error = caught.value
        assert isinstance(error, ERRORS[want.outcome]), repr(error)
        assert not isinstance(error, SmsMaybeSentError) or want.outcome == MAYBE_SENT
        if want.outcome == TRANSPORT:
            assert type(error) is SmsTransportError, repr(error)  # no private retry class leaks out
        if want.outcome == MAYBE_SENT:
            assert "must not be sent again" in str(error)
        if endpoint.sends and want.outcome == TRANSPORT:
            assert "nothing was sent" in str(error)
    elapsed = time.monotonic() - start
    assert len(sandbox.inspect.campaigns()) == want.campaigns
    assert requests_received(sandbox, endpoint) == want.requests
    assert faults_left(sandbox) == [], "the fault did not fire as many times as set"
    if front is not None:
        assert front.breaks == 0, "the TLS front did not break as many answers as set"
    return result, elapsed


def faults_left(sandbox: SandboxServer) -> list[str]:
    """The faults with uses left: a counter above 0, or a ``(value, count)`` pair with a count above 0."""
    left = []
    for name, value in sandbox.inspect.faults().items():
        if name == "endpoints" or not value:
            continue
        if not isinstance(value, list) or value[1] > 0:
            left.append(name)
    return left


@pytest.fixture
def sandbox(sms_sandbox: SandboxServer) -> Iterator[SandboxServer]:
    """The session's sandbox, reset; faults cleared afterwards so that no other test meets them."""
    yield sms_sandbox
    sms_sandbox.inspect.clear_faults()


# --------------------------------------------------------------------------------------------- tests

CASES = [pytest.param(e, r, id=f"{e.label}-{r.label}") for r in ROWS for e in ENDPOINTS]
PERSISTENT = [
    pytest.param(e, r, id=f"{e.label}-{r.label}")
    for r in ROWS
    if r.persistent is not None
    for e in READ_ENDPOINTS
]


@pytest.mark.parametrize(("endpoint", "row"), CASES)
def test_fault_once(
    sandbox: SandboxServer,
    tls_front: TlsFront,
    monkeypatch: pytest.MonkeyPatch,
    endpoint: Endpoint,
    row: Row,
) -> None:
    """The fault fires once: sends are never retried; simulations and reads retry what is transient."""
    connect(sandbox, monkeypatch, row, front=tls_front)
    want = expected(endpoint, row)

    _, elapsed = run_case(sandbox, endpoint, row, want, count=1, front=tls_front)

    if row.label == "429 with Retry-After" and not endpoint.sends:
        assert elapsed >= RETRY_AFTER  # the wait the service asked for, not the (shorter) backoff


@pytest.mark.parametrize(("endpoint", "row"), PERSISTENT)
def test_fault_on_every_try(
    sandbox: SandboxServer,
    tls_front: TlsFront,
    monkeypatch: pytest.MonkeyPatch,
    endpoint: Endpoint,
    row: Row,
) -> None:
    """A transient fault on every try: the retries are bounded and end in SmsTransportError."""
    connect(sandbox, monkeypatch, row, front=tls_front)
    assert row.persistent is not None

    run_case(sandbox, endpoint, row, row.persistent, count=MAX_TRIES, front=tls_front)


# The faults whose handling goes through the body's parser, in the other wire format.
PROBE_ROWS = tuple(
    row
    for row in ROWS
    if row.label
    in (
        "status -8",
        "status 1 without the result's fields",
        "status -99",
        "truncated body",
        "empty body",
        "wrong content type",
    )
)


@pytest.mark.parametrize(
    ("endpoint", "row"),
    [pytest.param(e, r, id=f"{e.label}-{r.label}") for r in PROBE_ROWS for e in ENDPOINTS],
)
def test_body_faults_in_xml(
    sandbox: SandboxServer, monkeypatch: pytest.MonkeyPatch, endpoint: Endpoint, row: Row
) -> None:
    """The body faults end the same in XML (an HTML page must not read as 'unsafe XML', for one)."""
    connect(sandbox, monkeypatch, row, fmt="xml")

    run_case(sandbox, endpoint, row, expected(endpoint, row), count=1)


def test_an_html_page_is_named_as_such_with_the_fix(
    sandbox: SandboxServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 200 HTML page (a wrong base URL, a proxy) says what it is and what to check, in both formats."""
    (row,) = (row for row in ROWS if row.label == "wrong content type")
    for fmt in ("json", "xml"):
        connect(sandbox, monkeypatch, row, fmt=fmt)
        sandbox.inspect.set_faults(wrong_content_type=1)
        with pytest.raises(SmsApiError, match="HTML page") as caught:
            SmsHook(CONN_ID, max_tries=MAX_TRIES, backoff=BACKOFF).get_npai()
        assert "base URL" in str(caught.value)
        assert caught.value.http_status == 200


# ------------------------------------------------------------------------------------------- triggers


def _webhook_trigger() -> SmsPollingTrigger:
    from airflow_provider_sms.triggers.sms import SmsWebhookTrigger

    return SmsWebhookTrigger(webhook_id="1", sms_conn_id=CONN_ID, poke_interval=0.05)


def _npai_trigger() -> SmsPollingTrigger:
    from airflow_provider_sms.triggers.sms import SmsNpaiTrigger

    return SmsNpaiTrigger(campaign_id=1001, sms_conn_id=CONN_ID, poke_interval=0.05)


TRIGGERS: dict[str, tuple[Endpoint, Callable[[], SmsPollingTrigger]]] = {
    "SmsWebhookTrigger": (ENDPOINTS[4], _webhook_trigger),
    "SmsNpaiTrigger": (ENDPOINTS[5], _npai_trigger),
}
# How long a trigger facing connection refused is watched: several polls, no event.
WATCH = 1.0


@pytest.mark.parametrize(
    ("trigger_name", "row"), [pytest.param(t, r, id=f"{t}-{r.label}") for r in ROWS for t in TRIGGERS]
)
async def test_fault_once_in_the_triggers(
    sandbox: SandboxServer,
    tls_front: TlsFront,
    monkeypatch: pytest.MonkeyPatch,
    trigger_name: str,
    row: Row,
) -> None:
    """The triggers meet the same read faults: transient ones only delay the wait, others end it."""
    endpoint, build = TRIGGERS[trigger_name]
    connect(sandbox, monkeypatch, row, front=tls_front)
    inject(sandbox, endpoint, row, 1, front=tls_front)
    # run() is an async generator (typed as an iterator): closed below, as the triggerer would.
    events = cast("AsyncGenerator[TriggerEvent, None]", build().run())
    outcome = trigger_outcome(trigger_name, row)
    start = time.monotonic()
    try:
        if outcome == POLLS_ON:
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(events.__anext__(), timeout=WATCH)
            requests = 0
        else:
            event = (await asyncio.wait_for(events.__anext__(), timeout=30)).payload
            if outcome == POLLS_AGAIN:
                assert event["status"] == "success", event
                requests = 2
                if row.label == "429 with Retry-After":
                    assert time.monotonic() - start >= RETRY_AFTER  # longer than the poke_interval
            else:
                assert (event["status"], event["error"]) == ("error", "api"), event
                requests = 1
    finally:
        with contextlib.suppress(Exception):
            await events.aclose()
    assert len(sandbox.inspect.campaigns()) == 0
    assert requests_received(sandbox, endpoint) == requests
    assert tls_front.breaks == 0, "the TLS front did not break as many answers as set"


if __name__ == "__main__":
    sys.stdout.write(markdown_table() + "\n")
