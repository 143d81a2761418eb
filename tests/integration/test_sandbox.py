"""The sandbox as a real HTTP server on 127.0.0.1, driven by SmsHook in both wire formats."""

from __future__ import annotations

import json
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

import pendulum
import pytest
import requests

from airflow_provider_sms.exceptions import SmsApiError, SmsAuthError, SmsMaybeSentError, SmsNotFoundError
from airflow_provider_sms.hooks.sms import SmsHook
from airflow_provider_sms.sandbox import DEFAULT_SEEDS, SandboxServer
from airflow_provider_sms.sandbox.__main__ import exposure_warning
from airflow_provider_sms.sandbox.dlr_poster import retry_after_seconds
from airflow_provider_sms.sandbox.state import SandboxConfig
from airflow_provider_sms.sandbox.testing import TEST_TOKEN
from airflow_provider_sms.sms_parts import SHORT_URL_LENGTH

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.integration

ALERT = {"text": "Your parcel is on its way", "pushtype": "alert"}


@pytest.fixture(params=["json", "xml"])
def hook(
    request: pytest.FixtureRequest, sms_sandbox: SandboxServer, monkeypatch: pytest.MonkeyPatch
) -> SmsHook:
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", sms_sandbox.connection_json(request.param))
    return SmsHook(backoff=0.01)


@pytest.mark.parametrize(
    ("numbers", "field"),
    [
        (["33612000001", "33612000001"], "duplicated"),
        (["33612000001", "33600000001"], "blacklisted"),
        (["33612000001", "33699999901"], "npai"),
        (["33612000001", "336120000012"], "invalid"),
        (["33612000001", "8613800000000"], "not_allowed"),
    ],
)
def test_each_filtering_rule_is_counted(hook, numbers, field):
    result = hook.simulate(ALERT, numbers)

    assert getattr(result, field) == 1
    assert (result.total, result.sent, result.filtered) == (2, 1, 1)


def test_anti_flood_filters_the_same_number_after_five_messages(hook, sms_sandbox):
    for _ in range(5):
        assert hook.send(ALERT, ["33612000001"]).sent == 1

    result = hook.send(ALERT, ["33612000001", "33612000002"])

    assert (result.flood, result.sent) == (1, 1)


def test_monthly_country_limit(monkeypatch):
    next_year = pendulum.now("Europe/Paris").add(years=1).strftime("%Y-%m-%d 10:00:00")
    with SandboxServer(token=TEST_TOKEN, config=SandboxConfig(country_limits={"33": 3})) as server:
        monkeypatch.setenv("AIRFLOW_CONN_SMS_LIMIT", server.connection_json("json"))
        hook = SmsHook("sms_limit")
        first = hook.send(ALERT, ["33612000001", "33612000002"])
        second = hook.send(ALERT, ["33612000003", "33612000004", "447700900001"])
        # The limit is per calendar month: a campaign delayed to another month has its own quota.
        later = hook.simulate({**ALERT, "delay": next_year}, ["33612000005", "33612000006"])

    assert (first.sent, first.country_limit) == (2, 0)
    assert (second.sent, second.country_limit) == (2, 1)  # one more French number, and the UK one
    assert (later.sent, later.country_limit) == (2, 0)


@pytest.mark.parametrize(
    ("text", "credits"),
    [
        ("a" * 160, 1),
        ("a" * 161, 2),
        ("a" * 306, 2),
        ("a" * 307, 3),
        ("é" * 160, 1),
        ("€" * 80, 1),
        ("€" * 81, 2),
    ],
    ids=["160", "161", "306", "307", "gsm-accent", "80-extension", "81-extension"],
)
def test_cost_by_gsm7_length(hook, text, credits):
    assert hook.simulate({"text": text}, ["33612000001", "33612000002"]).cost == 2 * credits


@pytest.mark.parametrize(("length", "credits"), [(70, 1), (71, 2), (134, 2), (135, 3)])
def test_cost_of_unicode_text(hook, length, credits):
    text = "ж" * length
    assert hook.simulate({"text": text}, ["33612000001"]).cost == credits


def test_short_urls_replace_markers_and_count_in_the_length(hook, sms_sandbox):
    message = {
        "text": "Sale: <-short-> and <-short->",
        "pushtype": "marketing",
        # Inside the marketing send window (a Saturday, 10:00 Paris), whatever time the test runs.
        "delay": "2030-06-01 10:00:00",
        "links": ["https://a.example.com/x", "https://b.example.com/y?a=1&b=2"],
    }

    result = hook.send(message, ["33612000001"])

    (campaign,) = sms_sandbox.inspect.campaigns()
    assert campaign["ticket"] == result.ticket
    assert "<-short->" not in campaign["text"]
    assert campaign["text"].count("https://sms.sb/") == 2
    assert campaign["links"] == message["links"]


@pytest.mark.parametrize(("filler", "credits"), [(160 - SHORT_URL_LENGTH, 1), (161 - SHORT_URL_LENGTH, 2)])
def test_short_urls_are_counted_at_their_real_length(hook, sms_sandbox, filler, credits):
    message = {"text": "a" * filler + "<-short->", "pushtype": "alert", "links": ["https://example.com/x"]}

    result = hook.send(message, ["33612000001"])

    (campaign,) = sms_sandbox.inspect.campaigns()
    assert re.fullmatch("a+https://sms\\.sb/[A-Za-z0-9]+", campaign["text"])
    assert len(campaign["text"]) == filler + SHORT_URL_LENGTH
    assert result.cost == credits


def test_credits_decrease_on_send_only_and_simulate_equals_send(hook, sms_sandbox):
    numbers = ["33612000001", "33612000001", "33600000001", "33612000002", "336123"[:5] + "000000"]
    before = sms_sandbox.inspect.credits()

    simulated = hook.simulate(ALERT, numbers)
    assert sms_sandbox.inspect.credits() == before
    assert sms_sandbox.inspect.campaigns() == []
    sent = hook.send(ALERT, numbers)

    assert sent.model_dump(exclude={"ticket"}) == simulated.model_dump(exclude={"ticket"})
    assert sms_sandbox.inspect.credits() == before - sent.cost == sent.credits


def test_lists_are_expanded_and_unknown_list_is_not_found(hook, sms_sandbox):
    large = hook.simulate_lists(ALERT, [3])
    assert (large.total, large.sent, large.cost) == (1000, 1000, 1000)
    result = hook.send_lists(ALERT, [1, 2])

    assert (result.total, result.sent, result.blacklisted, result.duplicated) == (10, 8, 1, 1)
    (campaign,) = sms_sandbox.inspect.campaigns()
    assert campaign["lists"] == [1, 2]
    with pytest.raises(SmsNotFoundError, match="list 99"):
        hook.simulate_lists(ALERT, [99])


def test_unreachable_number_becomes_an_npai_entry_of_its_campaign(hook):
    before = {entry.destination for entry in hook.get_npai().entries}

    result = hook.send(ALERT, ["33700000042"])

    after = {entry.destination: entry for entry in hook.get_npai().entries}
    assert "33700000042" not in before
    assert after["33700000042"].campaign_id == int(result.ticket)
    assert hook.simulate(ALERT, ["33700000042"]).npai == 1


def test_not_enough_credits_is_an_error_and_creates_nothing(hook, sms_sandbox):
    sms_sandbox.inspect.set_credits(1)

    with pytest.raises(SmsApiError) as info:
        hook.send(ALERT, ["33612000001", "33612000002"])

    assert info.value.status == -3
    assert sms_sandbox.inspect.campaigns() == []


def test_delay_is_kept_on_the_campaign(hook, sms_sandbox):
    hook.send({**ALERT, "delay": "2031-05-04 09:30:00"}, ["33612000001"])
    assert sms_sandbox.inspect.campaigns()[0]["delay"] == "2031-05-04 09:30:00"


def test_minus_8_fault_records_the_campaign_and_the_hook_raises_maybe_sent(hook, sms_sandbox):
    sms_sandbox.inspect.set_faults(maybe_sent=1)

    with pytest.raises(SmsMaybeSentError, match="status -8"):
        hook.send(ALERT, ["33612000001"])

    assert len(sms_sandbox.inspect.campaigns()) == 1
    hook.send(ALERT, ["33612000002"])  # the fault fired once
    assert len(sms_sandbox.inspect.campaigns()) == 2


def test_faults_can_be_scoped_to_one_endpoint(hook, sms_sandbox):
    sms_sandbox.inspect.set_faults(maybe_sent=1, endpoints=["/send/lists"])

    assert hook.send(ALERT, ["33612000001"]).status == 1
    with pytest.raises(SmsMaybeSentError):
        hook.send_lists(ALERT, [1])

    assert [c["endpoint"] for c in sms_sandbox.inspect.campaigns()] == ["/send", "/send/lists"]
    assert sms_sandbox.inspect.faults()["maybe_sent"] == 0


@pytest.mark.parametrize(
    ("faults", "named"),
    [
        ({"maybe_sent": -1}, "maybe_sent"),
        ({"http_error": [200, 1]}, "http_error"),
        ({"endpoints": ["/sned"]}, "/sned"),
        ({"retry": 1}, "retry"),
        ({"truncated": -1}, "truncated"),
        ({"slow": [500, 1]}, "slow"),
        ({"slow": [1, -1]}, "slow"),
    ],
)
def test_bad_faults_are_refused_naming_the_field(sms_sandbox, faults, named):
    with pytest.raises(requests.HTTPError, match=re.escape(named)):
        sms_sandbox.inspect.set_faults(**faults)
    assert sms_sandbox.inspect.faults()["endpoints"] is None


def test_cli_fault_options_take_pairs_and_counters():
    from airflow_provider_sms.sandbox.__main__ import _faults

    faults = _faults([("slow", "1.5,2"), ("truncated", "1"), ("endpoints", "/npai,/webhook")])

    assert (faults.slow, faults.truncated, faults.endpoints) == ((1.5, 2), 1, ["/npai", "/webhook"])
    assert _faults([("slow", "3")]).slow == 3.0


def test_dropped_connection_after_record_is_maybe_sent(hook, sms_sandbox):
    sms_sandbox.inspect.set_faults(drop_after_record=1)

    with pytest.raises(SmsMaybeSentError):
        hook.send(ALERT, ["33612000001"])

    assert len(sms_sandbox.inspect.campaigns()) == 1


def test_unscoped_ambiguous_send_faults_pass_the_cost_gate_simulation_by(hook, sms_sandbox):
    # Unscoped, maybe_sent and drop_after_record aim at the send behind a gate's simulation.
    sms_sandbox.inspect.set_faults(maybe_sent=1, drop_after_record=1)

    assert hook.simulate(ALERT, ["33612000001"]).status == 1
    with pytest.raises(SmsMaybeSentError, match="status -8"):
        hook.send(ALERT, ["33612000001"])
    with pytest.raises(SmsMaybeSentError, match="Connection aborted"):
        hook.send(ALERT, ["33612000002"])

    assert len(sms_sandbox.inspect.campaigns()) == 2
    assert sms_sandbox.inspect.requests() == {
        **dict.fromkeys(sms_sandbox.inspect.requests(), 0),
        "/send/simulate": 1,
        "/send": 2,
    }


def test_5xx_and_429_faults_are_retried_on_reads(hook, sms_sandbox):
    sms_sandbox.inspect.set_faults(http_error=[503, 1], endpoints=["/npai"])
    assert hook.get_npai().total_records == 2
    sms_sandbox.inspect.set_faults(rate_limit=[0.05, 1], endpoints=["/webhook"])
    assert hook.get_webhook("1").status == "live"


def test_webhooks_and_unknown_id(hook, sms_sandbox):
    webhook = hook.get_webhook("1")
    assert (webhook.type, webhook.status, webhook.last_http_code) == ("DLR", "live", 200)
    sms_sandbox.inspect.set_webhook("1", status="paused")
    assert hook.get_webhook("1").status == "paused"
    with pytest.raises(SmsNotFoundError):
        hook.get_webhook("404")


class _DlrReceiver(BaseHTTPRequestHandler):
    """Answers 202 to delivery reports and queues them for the test (``failures``: 500 to the first N)."""

    received: queue.Queue[tuple[dict[str, Any], str | None]]
    failures: list[int]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.failures[0] > 0:
            self.failures[0] -= 1
            self.send_response(500)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.received.put((json.loads(body), self.headers.get("X-SMSFactor-Signature")))
        self.send_response(202)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def dlr_receiver() -> Iterator[tuple[str, queue.Queue, list[int]]]:
    """A loopback DLR receiver: its URL, the reports it acknowledged, and how many calls to fail first."""
    received: queue.Queue = queue.Queue()
    failures = [0]
    handler = type("Receiver", (_DlrReceiver,), {"received": received, "failures": failures})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/dlr", received, failures
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("fmt", ["json", "xml"])
def test_delivery_reports_reach_a_loopback_webhook_and_record_its_code(dlr_receiver, monkeypatch, fmt):
    url, received, _ = dlr_receiver
    with SandboxServer(token=TEST_TOKEN, dlr=True) as server:
        server.inspect.set_webhook("1", url=url)
        monkeypatch.setenv("AIRFLOW_CONN_SMS_DLR", server.connection_json(fmt))
        hook = SmsHook("sms_dlr")

        ticket = hook.send(
            ALERT,
            [
                {"value": "33612000001", "gsmsmsid": "m-1"},
                "33612000002",
                {"value": "33600000001", "gsmsmsid": "bl"},
            ],
        ).ticket
        report, signature = received.get(timeout=20)
        deadline = time.monotonic() + 20  # bounds the wait; not a timing assertion
        while hook.get_webhook("1").last_http_code != 202 and time.monotonic() < deadline:
            time.sleep(0.05)

        assert hook.get_webhook("1").last_http_code == 202
    assert {k: report[k] for k in ("status", "destination", "message_id", "campaign_id", "country_code")} == {
        "status": 3,
        "destination": "33612000001",
        "message_id": "m-1",
        "campaign_id": int(ticket),
        "country_code": "FR",
    }
    assert pendulum.parse(report["date"]).offset is not None
    assert signature == DEFAULT_SEEDS.webhooks["1"]["signature"]
    # One report per number sent: the one without a gsmsmsid too; the blacklisted one was not sent.
    second, _ = received.get(timeout=20)
    assert (second["destination"], second["message_id"]) == ("33612000002", None)
    assert received.empty()


def test_delivery_reports_are_retried_until_acknowledged_with_the_configured_statuses(
    dlr_receiver, monkeypatch
):
    url, received, failures = dlr_receiver
    config = SandboxConfig(dlr=True, dlr_statuses=(3, 2), dlr_backoff=0.01)
    with SandboxServer(token=TEST_TOKEN, config=config) as server:
        server.inspect.set_webhook("1", url=url)
        monkeypatch.setenv("AIRFLOW_CONN_SMS_DLR", server.connection_json())
        failures[0] = 2  # the receiver answers 500 to the first two calls
        SmsHook("sms_dlr").send(ALERT, ["33612000001", "33612000002", "33612000003"])
        reports = [received.get(timeout=20)[0] for _ in range(3)]
        deadline = time.monotonic() + 20  # bounds the wait; not a timing assertion
        while len(server.inspect.delivery_reports()["acknowledged"]) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        counts = server.inspect.delivery_reports()

    assert [(r["destination"], r["status"]) for r in reports] == [
        ("33612000001", 3),
        ("33612000002", 2),
        ("33612000003", 3),
    ]
    assert counts["attempted"] == 5  # the first report tried three times
    assert [r["destination"] for r in counts["acknowledged"]] == ["33612000001", "33612000002", "33612000003"]


class _ScriptedReceiver(BaseHTTPRequestHandler):
    """Answers delivery reports from a script (then 200), after ``delay`` seconds; notes when each came
    and the most calls it held at once."""

    script: list[tuple[int, dict[str, str]]]
    arrivals: list[tuple[float, str]]
    delay: float
    busy: list[int]  # [calls under way, most at once]
    lock: threading.Lock

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.lock:
            self.arrivals.append((time.monotonic(), body["destination"]))
            code, headers = self.script.pop(0) if self.script else (200, {})
            self.busy[0] += 1
            self.busy[1] = max(self.busy)
        time.sleep(self.delay)
        with self.lock:
            self.busy[0] -= 1
        self.send_response(code)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def scripted_receiver() -> Iterator[tuple[str, type[_ScriptedReceiver]]]:
    """A loopback DLR receiver answering from its ``script``: its URL and its class (to script it)."""
    handler = type(
        "Scripted",
        (_ScriptedReceiver,),
        {"script": [], "arrivals": [], "delay": 0.0, "busy": [0, 0], "lock": threading.Lock()},
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/dlr", handler
    server.shutdown()
    server.server_close()


def wait_until_posted(server: SandboxServer, reports: int) -> dict[str, Any]:
    """The ledger's counts once ``reports`` reports are done (acknowledged or given up)."""
    deadline = time.monotonic() + 30  # bounds the wait; not a timing assertion
    counts = server.inspect.delivery_report_counts()
    while (counts["reports"] < reports or counts["in_progress"]) and time.monotonic() < deadline:
        time.sleep(0.05)
        counts = server.inspect.delivery_report_counts()
    return counts


def test_delivery_reports_honour_retry_after_up_to_the_longest_wait(scripted_receiver, monkeypatch):
    url, receiver = scripted_receiver
    # The first report is asked to wait 1 s, the second 3600 s: the sandbox waits 1 s, then its cap.
    receiver.script = [(503, {"Retry-After": "1"}), (200, {}), (503, {"Retry-After": "3600"})]
    config = SandboxConfig(dlr=True, dlr_backoff=0.01, dlr_max_wait=1.5)
    with SandboxServer(token=TEST_TOKEN, config=config) as server:
        server.inspect.set_webhook("1", url=url)
        monkeypatch.setenv("AIRFLOW_CONN_SMS_DLR", server.connection_json())
        ticket = SmsHook("sms_dlr").send(ALERT, ["33612000001", "33612000002"]).ticket
        counts = wait_until_posted(server, 2)
        ledger = server.inspect.delivery_report_ledger()

    (first, _), (again, _), (second, _), (second_again, _) = receiver.arrivals
    assert again - first >= 1.0  # Retry-After honoured (longer than the backoff)
    assert 1.5 <= second_again - second < 10  # ... but capped at dlr_max_wait, not an hour
    assert counts == {
        "reports": 2,
        "acknowledged": 2,
        "given_up": 0,
        "in_progress": 0,
        "tries": 4,
        "answers": {"200": 2, "503": 2},
        "retry_after": {"503": 2},
    }
    assert ledger == [
        {
            "campaign_id": int(ticket),
            "destination": number,
            "status": 3,
            "tries": 2,
            "code": 200,
            "acknowledged": True,
            "done": True,
        }
        for number in ("33612000001", "33612000002")
    ]


def test_delivery_reports_unanswered_are_given_up_after_the_last_try_and_counted(monkeypatch):
    # The seeded webhook's URL (127.0.0.1:9) has nothing listening: every call goes unanswered.
    config = SandboxConfig(dlr=True, dlr_tries=3, dlr_backoff=0.01)
    with SandboxServer(token=TEST_TOKEN, config=config) as server:
        monkeypatch.setenv("AIRFLOW_CONN_SMS_DLR", server.connection_json())
        SmsHook("sms_dlr").send(ALERT, ["33612000001"])
        counts = wait_until_posted(server, 1)
        (row,) = server.inspect.delivery_report_ledger()
        whole = server.inspect.delivery_reports()

    assert (counts["acknowledged"], counts["given_up"], counts["answers"]) == (0, 1, {"0": 3})
    assert counts["retry_after"] == {}
    assert (row["tries"], row["code"], row["acknowledged"], row["done"]) == (3, 0, False, True)
    assert (whole["attempted"], whole["acknowledged"]) == (3, [])


def test_concurrent_posters_share_a_campaigns_reports(scripted_receiver, monkeypatch):
    url, receiver = scripted_receiver
    receiver.delay = 0.05  # long enough for the posters to overlap
    numbers = [f"336120{index:05d}" for index in range(40)]
    config = SandboxConfig(dlr=True, dlr_concurrency=4)
    with SandboxServer(token=TEST_TOKEN, config=config) as server:
        server.inspect.set_webhook("1", url=url)
        monkeypatch.setenv("AIRFLOW_CONN_SMS_DLR", server.connection_json())
        SmsHook("sms_dlr").send(ALERT, numbers)
        counts = wait_until_posted(server, len(numbers))
        ledger = server.inspect.delivery_report_ledger()

    assert 2 <= receiver.busy[1] <= 4  # several at once, never more than the posters
    assert sorted(destination for _, destination in receiver.arrivals) == numbers  # each once
    assert (counts["acknowledged"], counts["tries"]) == (40, 40)
    assert [row["destination"] for row in ledger] == numbers  # the ledger keeps the numbers' order


def test_concurrency_and_the_next_ticket_are_set_at_run_time_until_a_reset(
    scripted_receiver, sms_sandbox, monkeypatch
):
    url, receiver = scripted_receiver
    receiver.delay = 0.05
    inspect = sms_sandbox.inspect
    inspect.set_webhook("1", url=url)
    inspect.set_delivery_reports(True, statuses=[3, 12], tries=2, concurrency=3)
    inspect.set_next_ticket(7_000_001)
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", sms_sandbox.connection_json())
    numbers = [f"336120{index:05d}" for index in range(12)]

    assert SmsHook().send(ALERT, numbers).ticket == "7000001"
    counts = wait_until_posted(sms_sandbox, len(numbers))
    assert counts["acknowledged"] == 12
    assert 2 <= receiver.busy[1] <= 3
    assert {row["campaign_id"] for row in inspect.delivery_report_ledger()} == {7_000_001}
    assert SmsHook().send(ALERT, ["33612000099"]).ticket == "7000002"
    with pytest.raises(requests.HTTPError, match="concurrency must be an integer of at least 1"):
        inspect.set_delivery_reports(True, concurrency=0)
    with pytest.raises(requests.HTTPError, match="ticket must be an integer of at least 1"):
        inspect.set_next_ticket(0)
    inspect.reset()
    assert (sms_sandbox.state.dlr_concurrency, inspect.delivery_report_ledger()) == (1, [])
    # Back to the clock's numbering, past every id handed out (never 5000001 again).
    assert int(SmsHook().send(ALERT, ["33612000098"]).ticket) > 7_000_002


def test_a_reset_stops_the_reports_still_being_posted(scripted_receiver, sms_sandbox, monkeypatch):
    url, receiver = scripted_receiver
    receiver.delay = 0.02
    sms_sandbox.inspect.set_webhook("1", url=url)
    sms_sandbox.inspect.set_delivery_reports(True)
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", sms_sandbox.connection_json())
    SmsHook().send(ALERT, [f"336120{index:05d}" for index in range(500)])
    deadline = time.monotonic() + 20  # bounds the wait; not a timing assertion
    while len(receiver.arrivals) < 5 and time.monotonic() < deadline:
        time.sleep(0.01)

    sms_sandbox.inspect.reset()
    time.sleep(0.2)  # a call under way at the reset may still land
    stopped_at = len(receiver.arrivals)
    time.sleep(0.5)
    assert len(receiver.arrivals) == stopped_at < 500
    assert sms_sandbox.inspect.delivery_report_counts()["reports"] == 0  # the new ledger is empty


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        (None, None),
        ("", None),
        ("30", 30.0),
        (" 2 ", 2.0),
        ("soon", None),
        ("-1", None),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),  # a date in the past: no wait
        ("Wed, 21 Oct 2015 07:28:00 -0000", 0.0),  # read as UTC too (Python gives it no zone)
    ],
)
def test_retry_after_is_read_as_seconds_or_an_http_date(header, seconds):
    assert retry_after_seconds(header) == seconds


def test_retry_after_as_a_future_http_date_is_the_time_left():
    when = pendulum.now("UTC").add(seconds=60)
    assert 50 < (retry_after_seconds(when.format("ddd, DD MMM YYYY HH:mm:ss [GMT]")) or 0) <= 60


def test_npai_pages_with_start_and_length(sms_sandbox):
    for n in range(5):
        sms_sandbox.inspect.add_npai(f"3369000000{n}", campaign_id=7)
    headers = {"Authorization": f"Bearer {sms_sandbox.token}", "Accept": "application/json"}

    page = requests.get(
        f"{sms_sandbox.url}/npai", params={"start": 2, "length": 3}, headers=headers, timeout=10
    ).json()

    assert page["totalRecords"] == 7
    assert [entry["destination"] for entry in page["list"]] == ["33690000000", "33690000001", "33690000002"]
    everything = requests.get(f"{sms_sandbox.url}/npai", headers=headers, timeout=10).json()
    assert (len(everything["list"]), everything["totalDisplayRecords"]) == (7, 7)
    refused = requests.get(f"{sms_sandbox.url}/npai", params={"length": -1}, headers=headers, timeout=10)
    assert (refused.status_code, refused.json()["status"]) == (400, -7)
    assert "length" in refused.json()["message"]


def test_xml_and_json_answers_decode_to_equal_models(sms_sandbox, monkeypatch):
    results = {}
    for fmt in ("json", "xml"):
        sms_sandbox.state.reset()
        # The same ticket in both formats, chosen: the sandbox never numbers two campaigns alike.
        sms_sandbox.state.set_next_ticket(5_000_001)
        monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", sms_sandbox.connection_json(fmt))
        hook = SmsHook()
        results[fmt] = (
            hook.send_lists(ALERT, [1, 2]),
            hook.get_webhook("2"),
            hook.get_npai().model_dump(exclude={"entries"}),
            [e.model_dump(exclude={"date"}) for e in hook.get_npai().entries],
        )
    assert results["json"] == results["xml"]


def test_wrong_or_missing_token_is_rejected(sms_sandbox, monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_SMS_DEFAULT",
        sms_sandbox.connection_json("xml").replace(sms_sandbox.token, "not-the-token"),
    )

    with pytest.raises(SmsAuthError) as info:
        SmsHook().simulate(ALERT, ["33612000001"])

    assert (info.value.status, info.value.http_status) == (-1, 401)
    answer = requests.get(f"{sms_sandbox.url}/npai", headers={"Accept": "application/json"}, timeout=10)
    assert answer.status_code == 401
    assert answer.json() == {"status": -1, "message": "invalid or missing access token"}


@pytest.mark.parametrize(
    ("body", "content_type", "status", "named"),
    [
        (
            b'{"sms": {"message": {"text": "a <-short->"}, '
            b'"recipients": {"gsm": [{"value": "33612000001"}]}}}',
            "application/json",
            -7,
            "message: text has 1 '<-short->' marker(s) but 0 link(s)",
        ),
        (
            b'{"sms": {"message": {"text": "a", "delay": "2001-01-01 10:00:00"}, "recipients": {"gsm": []}}}',
            "application/json",
            -4,
            "message.delay",
        ),
        (
            b'{"sms": {"message": {"text": "a", "delay": "2031-02-30 10:00:00"}, "recipients": {"gsm": []}}}',
            "application/json",
            -4,
            "message.delay",
        ),
        (
            b"<sms><message><text>a</text><pushtype>promo</pushtype></message>"
            b"<recipients><gsm>33612000001</gsm></recipients></sms>",
            "application/xml",
            -7,
            "message.pushtype",
        ),
        (b'{"sms": ', "application/json", -6, "not valid JSON"),
        (b"<sms><message>", "application/xml", -2, "not valid XML"),
    ],
    ids=["marker-mismatch", "past-delay", "malformed-delay", "bad-pushtype", "bad-json", "bad-xml"],
)
def test_server_side_validation_uses_the_service_statuses(sms_sandbox, body, content_type, status, named):
    headers = {
        "Authorization": f"Bearer {sms_sandbox.token}",
        "Accept": "application/json",
        "Content-Type": content_type,
    }

    answer = requests.post(f"{sms_sandbox.url}/send", data=body, headers=headers, timeout=10)

    assert answer.status_code == 400
    assert answer.json()["status"] == status
    assert named in answer.json()["message"]
    assert sms_sandbox.inspect.campaigns() == []


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_cli_prints_its_url_serves_and_stops_on_signal(monkeypatch, token_canary, signum):
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "airflow_provider_sms.sandbox", "--port", "0", "--token", TEST_TOKEN),
            *("--credits", "5", "--fault", "maybe_sent=1", "--fault", "endpoints=/send"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stdout.readline().strip()
        assert re.fullmatch(r"SMS sandbox listening on http://127\.0\.0\.1:\d+", line)
        url = line.rsplit(" ", 1)[1]
        monkeypatch.setenv(
            "AIRFLOW_CONN_SMS_CLI", json.dumps({"conn_type": "sms", "host": url, "password": TEST_TOKEN})
        )
        hook = SmsHook("sms_cli")

        with pytest.raises(SmsMaybeSentError):  # the start-up fault, after recording the campaign
            hook.send(ALERT, ["33612000001"])
        assert hook.get_webhook("1").type == "DLR"
        assert requests.get(f"{url}/_sandbox/credits", timeout=10).json() == {"credits": 4}

        process.send_signal(signum)
        assert process.wait(timeout=20) == 0
        assert process.stdout.read() == ""  # exactly one line on stdout
        token_canary.check_output(process.stderr.read(), "stderr of the sandbox CLI")
    finally:
        if process.poll() is None:
            process.kill()
        process.stdout.close()
        process.stderr.close()


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.10", "sandbox.example"])
def test_a_host_beyond_this_machine_gets_a_loud_warning(host):
    """Its inspection API needs no token: an address other machines may reach is said at start. (Not
    bound here: the tests listen on loopback only.)"""
    warning = exposure_warning(host)
    assert warning is not None
    assert warning.startswith(f"sms-sandbox: WARNING: listening on {host}, which is not a loopback address")
    assert "give --host 127.0.0.1" in warning


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_cli_on_loopback_starts_without_a_warning(host):
    process = subprocess.Popen(
        [sys.executable, "-m", "airflow_provider_sms.sandbox", "--host", host, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout.readline().startswith("SMS sandbox listening on http://")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
        stderr = process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
        process.stdout.close()
        process.stderr.close()
    assert "WARNING" not in stderr, stderr
    assert [exposure_warning(other) for other in ("127.0.0.2", "::1")] == [None, None]


def test_cli_dlr_url_points_webhook_1_at_the_receiver_and_a_reset_keeps_it(dlr_receiver, monkeypatch):
    url, received, _ = dlr_receiver
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "airflow_provider_sms.sandbox",
            "--port",
            "0",
            "--token",
            TEST_TOKEN,
            "--dlr-url",
            url,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        sandbox = process.stdout.readline().strip().rsplit(" ", 1)[1]
        monkeypatch.setenv(
            "AIRFLOW_CONN_SMS_CLI", json.dumps({"conn_type": "sms", "host": sandbox, "password": TEST_TOKEN})
        )
        hook = SmsHook("sms_cli")
        assert hook.get_webhook("1").url == url
        for number in ("33612000001", "33612000002"):  # the second after a reset
            ticket = hook.send(ALERT, [number]).ticket
            report, signature = received.get(timeout=20)  # --dlr-url alone turns the reports on
            assert (report["destination"], report["campaign_id"]) == (number, int(ticket))
            assert signature == "sb-sig-1"
            assert sandbox_cli("reset", sandbox).returncode == 0
        assert hook.get_webhook("1").url == url
    finally:
        process.terminate()
        process.wait(timeout=20)
        process.stdout.close()
        process.stderr.close()


def test_cli_refuses_an_unknown_fault():
    result = subprocess.run(
        [sys.executable, "-m", "airflow_provider_sms.sandbox", "--port", "0", "--fault", "maybe_snet=1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode == 2
    assert "maybe_snet" in result.stderr
    assert result.stdout == ""


def sandbox_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "airflow_provider_sms.sandbox", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--fault", "bogus=1"],
            "sms-sandbox: --fault bogus=1: unknown fault 'bogus'; valid faults: maybe_sent, "
            "drop_after_record, bad_success_shape, unknown_error, truncated, empty_body, "
            "wrong_content_type, http_error, rate_limit, slow (and endpoints=/send,/npai to scope them)",
        ),
        (
            ["--fault", "maybe_sent=abc"],
            "sms-sandbox: --fault maybe_sent: Input should be a valid integer, unable to parse string as an "
            "integer (got 'abc')",
        ),
        (
            ["--fault", "http_error=200,1"],
            "sms-sandbox: --fault http_error: http_error must be (code 400-599",
        ),
        (["--credits", "-4"], "sms-sandbox: --credits -4: must be 0 or more"),
        (
            ["--dlr-url", "https://hooks.example.com/dlr"],
            "sms-sandbox: --dlr-url https://hooks.example.com/dlr: must be an http(s) URL on 127.0.0.1 or "
            "localhost (the sandbox posts reports nowhere else)",
        ),
        (
            ["--host", "192.0.2.1"],
            "sms-sandbox: cannot listen on 192.0.2.1:0 (Cannot assign requested address)",
        ),
    ],
    ids=["unknown-fault", "bad-count", "bad-code", "credits", "foreign-dlr-url", "foreign-address"],
)
def test_cli_bad_arguments_are_one_line_and_no_traceback(args, line):
    result = sandbox_cli("--port", "0", *args)

    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith(line)
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr
    assert "pydantic" not in result.stderr


def test_cli_port_in_use_is_one_line_suggesting_port_0(sms_sandbox):
    port = sms_sandbox.url.rsplit(":", 1)[1]

    result = sandbox_cli("--port", port)

    assert result.returncode == 2
    assert result.stderr == (
        f"sms-sandbox: port {port} on 127.0.0.1 is already in use; pick another with --port, "
        "or --port 0 for a free one\n"
    )
    assert result.stdout == ""


def test_cli_help_shows_the_defaults():
    result = sandbox_cli("--help")

    text = " ".join(result.stdout.split())
    assert result.returncode == 0
    assert "access token to accept (default: sandbox-token)" in text
    assert f"starting credits (default: {DEFAULT_SEEDS.credits})" in text
    assert "(default: 8080)" in text
    assert "reset URL" in text


def test_cli_reset_forgets_what_earlier_runs_did(sms_sandbox, monkeypatch):
    """A number made unreachable by one run is an NPAI entry, filtered in the next; reset clears it."""
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", sms_sandbox.connection_json())
    hook = SmsHook()
    assert hook.send(ALERT, ["33700000099"]).npai == 0
    assert hook.send(ALERT, ["33700000099"]).npai == 1  # the rerun meets the first run's NPAI entry

    result = sandbox_cli("reset", sms_sandbox.url)

    assert result.returncode == 0, result.stderr
    assert result.stdout == f"SMS sandbox at {sms_sandbox.url} reset to its seeds\n"
    assert sms_sandbox.inspect.campaigns() == []
    assert hook.send(ALERT, ["33700000099"]).npai == 0


def test_cli_reset_of_nothing_running_says_so():
    result = sandbox_cli("reset", "http://127.0.0.1:9")

    assert result.returncode == 1
    assert "nothing answers there: is it running?" in result.stderr
    assert "Traceback" not in result.stderr


def test_requests_per_second_smoke(hook, sms_sandbox):
    """Not a timed assertion: prints the rate so the figure can be reported (see docs/sandbox.md)."""
    calls = 500
    started = time.perf_counter()
    for _ in range(calls):
        hook.get_webhook("1")
    rate = calls / (time.perf_counter() - started)
    print(f"\nsandbox served {calls} GET /webhook/1 ({hook.format}) at {rate:.0f} requests/s")
    assert rate > 0


# ------------------------------------------------------------------------ fidelity to the service


@pytest.mark.parametrize("fmt", ["json", "xml"])
@pytest.mark.parametrize("path", ["/send/simulate", "/send/lists/simulate"])
def test_a_simulation_answer_has_no_ticket_at_all(sms_sandbox, fmt, path):
    body = {"sms": {"message": {"text": "Hi"}}}
    body["sms"].update(
        {"lists": [{"value": 1}]} if "lists" in path else {"recipients": {"gsm": [{"value": "33612000001"}]}}
    )
    mime = f"application/{fmt}"
    response = requests.post(
        f"{sms_sandbox.url}{path}",
        json=body,
        headers={"Authorization": f"Bearer {TEST_TOKEN}", "Accept": mime},
        timeout=10,
    )

    assert response.status_code == 200, response.text
    assert "<status>1</status>" in response.text if fmt == "xml" else response.json()["status"] == 1
    assert "ticket" not in response.text


@pytest.mark.parametrize("fmt", ["json", "xml"])
def test_npai_info_fields_are_text_in_both_formats(sms_sandbox, fmt):
    response = requests.get(
        f"{sms_sandbox.url}/npai",
        headers={"Authorization": f"Bearer {TEST_TOKEN}", "Accept": f"application/{fmt}"},
        timeout=10,
    )

    if fmt == "json":
        assert {response.json()["list"][0][f"info{n}"] for n in range(1, 5)} == {""}
    else:
        assert "<info1></info1>" in response.text or "<info1/>" in response.text
    from airflow_provider_sms import codec

    entry = codec.decode_npai(response.content, fmt).entries[0]
    assert [entry.info1, entry.info2, entry.info3, entry.info4] == ["", "", "", ""]


MARKETING_150 = (
    "Soldes d'hiver: -20% sur tout le magasin jusqu'a dimanche. " * 2 + "x" * 32
)  # 150 GSM-7 chars


@pytest.mark.parametrize(
    ("pushtype", "sender", "credits"),
    [("marketing", "MyShop", 2), ("marketing", None, 1), ("alert", "MyShop", 1)],
)
def test_the_stop_mention_of_a_marketing_sms_with_a_sender_counts_in_its_cost(
    hook, pushtype, sender, credits
):
    assert len(MARKETING_150) == 150
    # A Tuesday at 10:00 Paris: inside the marketing send window.
    message = {"text": MARKETING_150, "pushtype": pushtype, "delay": "2030-06-04 10:00:00"}
    if sender:
        message["sender"] = sender

    assert hook.simulate(message, ["33612000001"]).cost == credits
