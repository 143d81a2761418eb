"""The sandbox as a real HTTP server on 127.0.0.1, driven by SmsHook in both wire formats."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import requests

from airflow_provider_sms.exceptions import SmsApiError, SmsAuthError, SmsMaybeSentError, SmsNotFoundError
from airflow_provider_sms.hooks.sms import SmsHook
from airflow_provider_sms.sandbox import SandboxServer
from airflow_provider_sms.sandbox.state import SandboxConfig

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


def test_monthly_country_limit():
    with SandboxServer(token="limit-token", config=SandboxConfig(country_limits={"33": 3})) as server:
        os.environ["AIRFLOW_CONN_SMS_LIMIT"] = server.connection_json("json")
        try:
            hook = SmsHook("sms_limit")
            first = hook.send(ALERT, ["33612000001", "33612000002"])
            second = hook.send(ALERT, ["33612000003", "33612000004", "447700900001"])
        finally:
            del os.environ["AIRFLOW_CONN_SMS_LIMIT"]

    assert (first.sent, first.country_limit) == (2, 0)
    assert (second.sent, second.country_limit) == (2, 1)  # one more French number, and the UK one


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


def test_dropped_connection_after_record_is_maybe_sent(hook, sms_sandbox):
    sms_sandbox.inspect.set_faults(drop_after_record=1)

    with pytest.raises(SmsMaybeSentError):
        hook.send(ALERT, ["33612000001"])

    assert len(sms_sandbox.inspect.campaigns()) == 1


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


def test_npai_pages_with_start_and_length(sms_sandbox):
    for n in range(5):
        sms_sandbox.inspect.add_npai(f"3369000000{n}", campaign_id=7)
    headers = {"Authorization": f"Bearer {sms_sandbox.token}", "Accept": "application/json"}

    page = requests.get(
        f"{sms_sandbox.url}/npai", params={"start": 2, "length": 3}, headers=headers, timeout=10
    ).json()

    assert page["totalRecords"] == 7
    assert [entry["destination"] for entry in page["list"]] == ["33690000000", "33690000001", "33690000002"]


def test_xml_and_json_answers_decode_to_equal_models(sms_sandbox, monkeypatch):
    results = {}
    for fmt in ("json", "xml"):
        sms_sandbox.state.reset()
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
    ("body", "content_type", "status"),
    [
        (
            b'{"sms": {"message": {"text": "a <-short->"}, '
            b'"recipients": {"gsm": [{"value": "33612000001"}]}}}',
            "application/json",
            -7,
        ),
        (
            b'{"sms": {"message": {"text": "a", "delay": "2001-01-01 10:00:00"}, "recipients": {"gsm": []}}}',
            "application/json",
            -4,
        ),
        (b'{"sms": ', "application/json", -6),
        (b"<sms><message>", "application/xml", -2),
    ],
    ids=["marker-mismatch", "past-delay", "bad-json", "bad-xml"],
)
def test_server_side_validation_uses_the_service_statuses(sms_sandbox, body, content_type, status):
    headers = {
        "Authorization": f"Bearer {sms_sandbox.token}",
        "Accept": "application/json",
        "Content-Type": content_type,
    }

    answer = requests.post(f"{sms_sandbox.url}/send", data=body, headers=headers, timeout=10)

    assert answer.status_code == 400
    assert answer.json()["status"] == status
    assert sms_sandbox.inspect.campaigns() == []


def test_cli_prints_its_url_serves_and_stops_on_sigterm():
    process = subprocess.Popen(
        [sys.executable, "-m", "airflow_provider_sms.sandbox", "--port", "0", "--token", "cli-token"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stdout.readline().strip()
        assert line.startswith("SMS sandbox listening on http://127.0.0.1:")
        url = line.rsplit(" ", 1)[1]
        answer = requests.get(
            f"{url}/webhook/1",
            headers={"Authorization": "Bearer cli-token", "Accept": "application/json"},
            timeout=10,
        )
        assert answer.json()["webhook"]["type"] == "DLR"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
    finally:
        if process.poll() is None:
            process.kill()


def test_requests_per_second_smoke(hook, sms_sandbox):
    """Not a timed assertion: prints the rate so the figure can be reported (see README)."""
    calls = 300
    started = time.perf_counter()
    for _ in range(calls):
        hook.get_webhook("1")
    rate = calls / (time.perf_counter() - started)
    print(f"\nsandbox served {calls} GET /webhook/1 ({hook.format}) at {rate:.0f} requests/s")
    assert rate > 0
