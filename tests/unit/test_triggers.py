"""SmsWebhookTrigger and SmsNpaiTrigger against an httpx.MockTransport: events, retries, serialization,
and the sensor's timeout, on a frozen clock that each wait moves on."""

from __future__ import annotations

import asyncio
import importlib
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pendulum
import pytest
import time_machine

from airflow_provider_sms import codec
from airflow_provider_sms.hooks.sms import SmsAsyncHook
from airflow_provider_sms.sandbox import wire
from airflow_provider_sms.triggers.sms import SmsNpaiTrigger, SmsPollingTrigger, SmsWebhookTrigger
from tests.async_hooks import mock_transport

from .conftest import BASE_URL, TOKEN, connection_json
from .samples import WEBHOOK, npai_entry

Handler = Callable[[httpx.Request], httpx.Response]


def answer(fmt: str, data: dict[str, Any], status_code: int = 200, **headers: str) -> httpx.Response:
    return httpx.Response(status_code, content=wire.encode_response(data, fmt), headers=headers)


def webhook_answer(fmt: str, status: str) -> httpx.Response:
    return answer(fmt, {"status": 1, "message": "OK", "webhook": {**WEBHOOK, "status": status}})


class Service:
    """A scripted service: answers in order (the last one repeats) and records every request."""

    def __init__(self, *answers: httpx.Response | Handler | Exception) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        item = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(item, Exception):
            raise item
        return item(request) if callable(item) else item


@pytest.fixture
def conn(monkeypatch: pytest.MonkeyPatch, fmt: str) -> str:
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", connection_json(fmt))
    return fmt


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The trigger's waits between polls, recorded (each still yields to the loop)."""
    recorded: list[float] = []
    real_sleep = asyncio.sleep

    async def fake_sleep(delay: float, *args: Any) -> None:
        # Event loops of other threads (the session's sandbox server) keep their real sleeps.
        if threading.current_thread() is not threading.main_thread():
            await real_sleep(delay, *args)
            return
        recorded.append(delay)
        await real_sleep(0)

    monkeypatch.setattr(asyncio, "sleep", fake_sleep)
    return recorded


START = pendulum.datetime(2026, 11, 25, 8, tz="UTC")


def at(seconds: float) -> str:
    """The instant ``seconds`` after START, as a sensor hands it to its trigger."""
    return START.add(microseconds=int(seconds * 1e6)).isoformat()


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch, waits: list[float]) -> Iterator[time_machine.Coordinates]:
    """The wall clock frozen at START; each wait of the trigger (recorded in ``waits``) moves it on.

    On Python 3.10 time-machine moves the loop's monotonic clock too: a test's waits stay below
    first_event's 30 s bound.
    """
    with time_machine.travel(START, tick=False) as traveller:
        recorded_sleep = asyncio.sleep

        async def sleep_on_the_clock(delay: float, *args: Any) -> None:
            if threading.current_thread() is threading.main_thread():
                traveller.shift(delay)
            await recorded_sleep(delay, *args)

        monkeypatch.setattr(asyncio, "sleep", sleep_on_the_clock)
        yield traveller


def serve(monkeypatch: pytest.MonkeyPatch, service: Service) -> None:
    """Route the async hook's HTTP client to ``service`` (everything else about the client is real)."""
    build = SmsAsyncHook._client
    monkeypatch.setattr(
        SmsAsyncHook, "_client", lambda self, s: build(self, s, transport=mock_transport(service))
    )


async def first_event(trigger: SmsPollingTrigger) -> dict[str, Any]:
    # Bounded: a trigger that never yields fails the test instead of hanging it.
    async def consume() -> dict[str, Any]:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("the trigger ended without an event")

    return await asyncio.wait_for(consume(), timeout=30)


# ------------------------------------------------------------------------------------ serialization


@pytest.mark.parametrize(
    "trigger",
    [
        SmsWebhookTrigger(webhook_id="1839", require_healthy=True, sms_conn_id="sms_x", poke_interval=15),
        SmsWebhookTrigger(webhook_id="1839", timeout_at="2026-11-25T08:00:20.250000+00:00"),
        SmsNpaiTrigger(
            campaign_id="42",
            destinations=["+33 6 12 34 56 78"],
            since="2026-10-25T02:15:00+01:00",
            min_entries=2,
            exponential_backoff=True,
            max_wait=120,
        ),
        SmsNpaiTrigger(),
    ],
)
def test_serialize_round_trips_through_the_classpath(trigger):
    classpath, kwargs = trigger.serialize()

    module, _, name = classpath.rpartition(".")
    assert module == "airflow_provider_sms.triggers.sms"
    rebuilt = getattr(importlib.import_module(module), name)(**kwargs)
    assert rebuilt.serialize() == (classpath, kwargs)
    json.dumps(kwargs)  # plain values only: the triggerer stores them


# --------------------------------------------------------------------------------- webhook trigger


async def test_webhook_trigger_yields_success_once_live(conn, monkeypatch, waits):
    service = Service(webhook_answer(conn, "disabled"), webhook_answer(conn, "live"))
    serve(monkeypatch, service)

    payload = await first_event(SmsWebhookTrigger(webhook_id="1839", poke_interval=7))

    assert payload == {"status": "success", "webhook": WEBHOOK, "polls": 2}
    assert waits == [7]
    assert [(r.method, str(r.url)) for r in service.requests] == [("GET", f"{BASE_URL}/webhook/1839")] * 2
    request = service.requests[0]
    assert request.headers["Authorization"] == f"Bearer {TOKEN}"
    assert request.headers["Accept"] == codec.CONTENT_TYPES[conn]
    assert TOKEN not in json.dumps(payload)


@pytest.mark.parametrize("http", [200, 404])
async def test_webhook_trigger_yields_error_on_unknown_id(conn, monkeypatch, waits, http):
    service = Service(answer(conn, {"status": -5, "message": "Webhook not found"}, http))
    serve(monkeypatch, service)

    payload = await first_event(SmsWebhookTrigger(webhook_id="nope"))

    assert payload["status"] == "error"
    assert payload["error"] == "not_found"
    assert payload["api_status"] == -5
    assert "Webhook not found" in payload["message"]
    assert len(service.requests) == 1
    assert payload["polls"] == 1
    assert waits == []


async def test_rejected_token_yields_an_auth_error(conn, monkeypatch, waits, capfd):
    serve(monkeypatch, Service(answer(conn, {"status": -1, "message": "Authentication error"}, 401)))

    payload = await first_event(SmsWebhookTrigger(webhook_id="1839"))

    assert (payload["status"], payload["error"]) == ("error", "auth")
    assert TOKEN not in json.dumps(payload)
    output = capfd.readouterr()
    # The trigger did log the failure (without the token: the token canary checks what is read here).
    assert "Authentication error" in output.out + output.err


async def test_webhook_trigger_survives_503_429_and_a_dropped_connection(conn, monkeypatch, waits):
    service = Service(
        httpx.Response(503),
        answer(conn, {"status": -99, "message": "busy"}, 429, **{"Retry-After": "12"}),
        httpx.ConnectError("connection refused"),
        webhook_answer(conn, "live"),
    )
    serve(monkeypatch, service)

    payload = await first_event(SmsWebhookTrigger(webhook_id="1839", poke_interval=2))

    assert payload["status"] == "success"
    assert len(service.requests) == 4
    assert waits == [2, 12, 2]  # Retry-After is honoured when longer than the poke interval
    assert payload["polls"] == 4  # the failed polls too: the sensor counts them when it resumes


async def test_exponential_backoff_doubles_the_wait_up_to_max_wait(conn, monkeypatch, waits):
    serve(monkeypatch, Service(*[webhook_answer(conn, "disabled")] * 5, webhook_answer(conn, "live")))

    trigger = SmsWebhookTrigger(webhook_id="1839", poke_interval=3, exponential_backoff=True, max_wait=20)
    payload = await first_event(trigger)

    assert payload["status"] == "success"
    assert waits == [3, 6, 12, 20, 20]


async def test_require_healthy_waits_for_a_2xx_last_call(conn, monkeypatch, waits):
    unhealthy = answer(conn, {"status": 1, "message": "OK", "webhook": {**WEBHOOK, "last_http_code": 502}})
    serve(monkeypatch, Service(unhealthy, webhook_answer(conn, "live")))

    payload = await first_event(SmsWebhookTrigger(webhook_id="1839", require_healthy=True, poke_interval=1))

    assert payload["webhook"]["last_http_code"] == 200
    assert waits == [1]


async def test_unreadable_answer_yields_an_api_error(conn, monkeypatch, waits):
    serve(monkeypatch, Service(httpx.Response(200, content=b"<html>maintenance</html>")))

    payload = await first_event(SmsWebhookTrigger(webhook_id="1839"))

    assert (payload["status"], payload["error"]) == ("error", "api")
    assert "GET /webhook/1839" in payload["message"]


async def test_missing_connection_yields_a_connection_error(monkeypatch, waits):
    monkeypatch.delenv("AIRFLOW_CONN_SMS_MISSING", raising=False)

    payload = await first_event(SmsWebhookTrigger(webhook_id="1839", sms_conn_id="sms_missing"))

    assert (payload["status"], payload["error"]) == ("error", "connection")
    assert "sms_missing" in payload["message"]
    assert payload["polls"] == 0


async def test_bad_webhook_id_yields_a_validation_error_without_a_request(conn, monkeypatch, waits):
    service = Service(webhook_answer(conn, "live"))
    serve(monkeypatch, service)

    payload = await first_event(SmsWebhookTrigger(webhook_id="a/b"))

    assert (payload["status"], payload["error"]) == ("error", "validation")
    assert service.requests == []


# ------------------------------------------------------------------------------------ NPAI trigger


async def test_npai_trigger_reads_every_page_until_enough_entries_match(conn, monkeypatch, waits):
    page1 = [npai_entry(str(i), campaign=1, destination=f"3360000{i:04d}") for i in range(1000)]

    def npai(entries: list[dict[str, Any]], total: int) -> httpx.Response:
        return answer(conn, {"status": 1, "message": "OK", "list": entries, "totalRecords": total})

    service = Service(
        npai(page1, 1000),  # first poll: campaign 9 has no entry yet
        npai(page1, 1001),  # second poll: the entry appeared, on page 2
        npai([npai_entry("1000", campaign=9, destination="33699999999")], 1001),
    )
    serve(monkeypatch, service)

    payload = await first_event(SmsNpaiTrigger(campaign_id="9", poke_interval=4))

    assert payload["status"] == "success"
    assert payload["npai"]["count"] == 1
    assert payload["npai"]["destinations"] == ["33699999999"]
    assert payload["npai"]["entries"][0]["campaign_id"] == 9
    assert [dict(r.url.params) for r in service.requests] == [
        {"start": "0", "length": "1000"},
        {"start": "0", "length": "1000"},
        {"start": "1000", "length": "1000"},
    ]
    assert waits == [4]


async def test_npai_trigger_keeps_quick_work_in_the_loop_and_long_work_off_it(conn, monkeypatch, waits):
    from airflow_provider_sms._wait_conditions import NpaiFilter

    threads: list[tuple[str, str]] = []
    decode, matching = codec.decode_npai, NpaiFilter.matching

    def decode_here(*args: Any, **kwargs: Any) -> Any:
        threads.append(("decode", threading.current_thread().name))
        return decode(*args, **kwargs)

    def matching_here(self: NpaiFilter, npai: Any) -> Any:
        threads.append(("filter", threading.current_thread().name))
        return matching(self, npai)

    monkeypatch.setattr(codec, "decode_npai", decode_here)
    monkeypatch.setattr(NpaiFilter, "matching", matching_here)
    short = [npai_entry("1", campaign=9)]
    long = [npai_entry(str(i), campaign=9, destination=f"3360000{i:04d}") for i in range(1000)]
    listed: list[dict[str, Any]] = []
    serve(monkeypatch, Service(lambda request: answer(conn, listed[-1])))
    for entries, since in ((short, None), (long, None), (long, "2026-01-01 00:00:00")):
        threads.clear()
        listed.append({"status": 1, "message": "OK", "list": entries, "totalRecords": len(entries)})
        payload = await first_event(SmsNpaiTrigger(campaign_id=9, since=since, min_entries=len(entries)))
        assert payload["npai"]["count"] == len(entries)
        where = dict((what, name != threading.current_thread().name) for what, name in threads)
        # A short page (< 80 KB) is decoded in the loop; a 1,000-entry page (170 KB) in the worker
        # thread. Plain checks of 1,000 entries are quick; reading 1,000 dates is not.
        assert where == {"decode": entries is long, "filter": since is not None}, (len(entries), since)


async def test_npai_trigger_survives_a_503_in_the_middle_of_the_pages(conn, monkeypatch, waits):
    entries = [npai_entry("1", campaign=5), npai_entry("2", campaign=5, destination="33611111111")]
    service = Service(
        answer(conn, {"status": 1, "message": "OK", "list": entries[:1], "totalRecords": 2}),
        httpx.Response(503),
        answer(conn, {"status": 1, "message": "OK", "list": entries, "totalRecords": 2}),
    )
    serve(monkeypatch, service)

    payload = await first_event(SmsNpaiTrigger(campaign_id=5, min_entries=2, poke_interval=1))

    assert payload["npai"]["count"] == 2
    assert waits == [1]


# ------------------------------------------------------------------------------- the sensor's timeout


async def test_the_trigger_ends_itself_at_the_sensors_timeout_after_a_last_poll(conn, monkeypatch, clock):
    service = Service(webhook_answer(conn, "disabled"))
    serve(monkeypatch, service)

    payload = await first_event(SmsWebhookTrigger(webhook_id="1839", poke_interval=7, timeout_at=at(20)))

    assert payload == {
        "status": "timeout",
        "timeout_at": at(20),
        "message": f"Sensor has timed out: still waiting for webhook 1839 to be live at {at(20)}, the end "
        "of the sensor's timeout (counted from the task's start)",
        "polls": 4,
    }
    # Polls at 0, 7, 14 and 20 s: the last wait is cut to the time left, the last poll falls at the timeout.
    assert len(service.requests) == 4
    assert pendulum.now("UTC") == START.add(seconds=20)


async def test_a_trigger_rebuilt_after_a_restart_keeps_the_same_instant(conn, monkeypatch, clock, waits):
    serve(monkeypatch, Service(webhook_answer(conn, "disabled")))
    _, kwargs = SmsWebhookTrigger(webhook_id="1839", poke_interval=10, timeout_at=at(30)).serialize()
    clock.shift(25)  # the triggerer restarted 25 s into the wait

    payload = await first_event(SmsWebhookTrigger(**kwargs))

    assert payload["status"] == "timeout"
    assert waits == [5]


async def test_a_trigger_started_after_its_timeout_polls_once_then_times_out(conn, monkeypatch, clock, waits):
    # E.g. a triggerer down past the sensor's timeout: the one poll may still find the wait over.
    service = Service(webhook_answer(conn, "disabled"), webhook_answer(conn, "live"))
    serve(monkeypatch, service)
    clock.shift(60)

    timed_out = await first_event(SmsWebhookTrigger(webhook_id="1839", timeout_at=at(20)))
    done = await first_event(SmsWebhookTrigger(webhook_id="1839", timeout_at=at(20)))

    assert (timed_out["status"], done["status"]) == ("timeout", "success")
    assert (len(service.requests), waits) == (2, [])


async def test_retry_after_is_cut_to_the_time_left(conn, monkeypatch, clock, waits, capfd):
    busy = answer(conn, {"status": -99, "message": "busy"}, 429, **{"Retry-After": "120"})
    serve(monkeypatch, Service(busy))

    payload = await first_event(SmsWebhookTrigger(webhook_id="1839", poke_interval=5, timeout_at=at(8)))

    assert payload["status"] == "timeout"
    assert waits == [8]
    output = capfd.readouterr()
    assert "HTTP 429; polling again in 8.0s" in output.out + output.err


async def test_the_npai_trigger_times_out_naming_the_entries_awaited(conn, monkeypatch, clock):
    listing = {"status": 1, "message": "OK", "list": [npai_entry("1", campaign=7)], "totalRecords": 1}
    serve(monkeypatch, Service(answer(conn, listing)))

    payload = await first_event(SmsNpaiTrigger(campaign_id=42, poke_interval=5, timeout_at=at(12)))

    assert payload["status"] == "timeout"
    assert "still waiting for at least 1 NPAI entry of campaign 42 at" in payload["message"]


async def test_a_trigger_an_earlier_version_stored_has_no_timeout_and_still_waits(conn, monkeypatch, waits):
    # Stored without timeout_at: Airflow's own deferral timeout is the only one that ends it.
    serve(monkeypatch, Service(*[webhook_answer(conn, "disabled")] * 3, webhook_answer(conn, "live")))
    _, kwargs = SmsWebhookTrigger(webhook_id="1839", poke_interval=60, timeout_at=at(20)).serialize()
    del kwargs["timeout_at"]

    trigger = SmsWebhookTrigger(**kwargs)
    payload = await first_event(trigger)

    assert trigger.serialize()[1]["timeout_at"] is None
    assert payload["status"] == "success"
    assert waits == [60, 60, 60]


@pytest.mark.parametrize("fmt", ["json"])
async def test_a_delivery_wait_whose_receiver_stays_unreadable_ends_at_its_deadline(
    conn, monkeypatch, clock, busy_receiver
):
    from airflow_provider_sms.triggers.sms import SmsDeliveryReportsTrigger

    trigger = SmsDeliveryReportsTrigger(
        summary_url=busy_receiver,
        campaign_ids=[5000001],
        expected=3,
        min_final_share=1.0,
        deadline=at(10),
        poke_interval=4,
        timeout_at=at(3600),
    )

    payload = await first_event(trigger)

    assert payload["status"] == "error"
    assert (
        f"The deadline {at(10)} passed while the delivery-report receiver could not be read"
        in payload["message"]
    )
    assert "the connections cannot be read" in payload["message"]
    assert payload["polls"] == 4  # at 0, 4 and 8 s "not yet"; at 12 s past the deadline
