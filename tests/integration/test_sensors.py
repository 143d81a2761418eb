"""The sensors and triggers against the sandbox, a real HTTP server on 127.0.0.1, in JSON and XML."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from airflow.providers.common.compat.sdk import AirflowFailException, AirflowSensorTimeout, TaskDeferred

from airflow_provider_sms.hooks.sms import SmsHook
from airflow_provider_sms.sensors.sms import SmsNpaiSensor, SmsWebhookSensor
from airflow_provider_sms.triggers.sms import SmsNpaiTrigger, SmsPollingTrigger, SmsWebhookTrigger

pytestmark = pytest.mark.integration

# The sandbox turns numbers starting with 337000 into NPAI entries of the campaign that sent to them.
UNREACHABLE = "33700000077"
# Seeded entry dated "2026-10-25 02:30:00" (Paris, in the autumn DST overlap), campaign 1002.
OVERLAP_NUMBER = "33699999902"


@pytest.fixture(params=["json", "xml"])
def sandbox(request: pytest.FixtureRequest, sms_sandbox: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The sandbox, reset, with sms_default pointing at it in the wire format under test."""
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", sms_sandbox.connection_json(request.param))
    return sms_sandbox


async def first_event(trigger: SmsPollingTrigger) -> dict[str, Any]:
    async def consume() -> dict[str, Any]:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("the trigger ended without an event")

    # Bounded: a trigger that never yields fails the test instead of hanging the suite.
    return await asyncio.wait_for(consume(), timeout=60)


# ------------------------------------------------------------------------------------ poke / reschedule


def test_webhook_sensor_returns_the_seeded_live_dlr_webhook(sandbox):
    record = SmsWebhookSensor(task_id="w", webhook_id="1", poke_interval=0, timeout=30).execute({})

    assert record == {
        "webhook_id": "1",
        "type": "DLR",
        "url": "http://127.0.0.1:9/dlr",
        "status": "live",
        "signature": "sb-sig-1",
        "last_http_code": 200,
    }


def test_webhook_sensor_sees_the_status_change(sandbox):
    sandbox.inspect.set_webhook("7", status="disabled", url="https://crm.example.com/dlr")
    sensor = SmsWebhookSensor(task_id="w", webhook_id="7")

    assert not sensor.poke({})
    sandbox.inspect.set_webhook("7", status="live")
    result = sensor.poke({})

    assert result.is_done
    assert result.xcom_value["status"] == "live"


def test_require_healthy_waits_for_the_receiver(sandbox):
    # Seeded webhook 2 is live but its receiver last answered 500.
    with pytest.raises(AirflowSensorTimeout):
        SmsWebhookSensor(task_id="w", webhook_id="2", require_healthy=True, timeout=0).execute({})
    sandbox.inspect.set_webhook("2", last_http_code=200)

    record = SmsWebhookSensor(task_id="w", webhook_id="2", require_healthy=True, timeout=0).execute({})
    assert record["last_http_code"] == 200


def test_unknown_webhook_fails_at_once(sandbox):
    with pytest.raises(AirflowFailException, match=r"status -5"):
        SmsWebhookSensor(task_id="w", webhook_id="no-such-hook", timeout=3600).execute({})


def test_wrong_token_fails_at_once(sandbox, monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_SMS_DEFAULT", sandbox.connection_json("json").replace(sandbox.token, "x" * 20)
    )

    with pytest.raises(AirflowFailException, match=r"status -1"):
        SmsWebhookSensor(task_id="w", webhook_id="1", timeout=3600).execute({})


def test_npai_entry_appears_only_after_the_campaign_is_sent(sandbox):
    sensor = SmsNpaiSensor(task_id="n", destinations=[UNREACHABLE], timeout=0)
    with pytest.raises(AirflowSensorTimeout):
        sensor.execute({})

    ticket = SmsHook().send({"text": "Your parcel is on its way", "pushtype": "alert"}, [UNREACHABLE]).ticket
    result = SmsNpaiSensor(task_id="n", campaign_id=ticket, timeout=0).execute({})

    assert result["count"] == 1
    assert result["destinations"] == [UNREACHABLE]
    assert result["entries"][0]["campaign_id"] == int(ticket)


def test_npai_sensor_reads_every_page_of_a_long_list(sandbox):
    for index in range(1500):
        sandbox.state.add_npai(destination=f"3361{index:07d}", campaign_id=2001)
    sandbox.state.add_npai(destination="33612349999", campaign_id=2002)

    result = SmsNpaiSensor(task_id="n", campaign_id=2002, timeout=0).execute({})
    everything = SmsNpaiSensor(task_id="n", campaign_id=2001, min_entries=1500, timeout=0).execute({})

    assert result["destinations"] == ["33612349999"]
    assert everything["count"] == 1500


@pytest.mark.parametrize(
    ("since", "found"),
    [
        ("2026-10-25T02:15:00+01:00", False),  # the second 02:15 comes after the entry's 02:30 (CEST)
        ("2026-10-25T02:15:00+02:00", True),
        ("2026-10-25 02:30:00", True),  # same wall clock, read as the same first occurrence
    ],
)
def test_since_across_the_dst_overlap_on_the_seeded_entry(sandbox, since, found):
    sensor = SmsNpaiSensor(task_id="n", destinations=OVERLAP_NUMBER, since=since, timeout=0)
    if found:
        assert sensor.execute({})["destinations"] == [OVERLAP_NUMBER]
    else:
        with pytest.raises(AirflowSensorTimeout):
            sensor.execute({})


def test_transient_faults_only_delay_the_npai_sensor(sandbox):
    # One poke's worth of 503s (the hook tries 3 times), then the list is read on the next poke.
    sandbox.inspect.set_faults(http_error=(503, 3), endpoints=["/npai"])
    sensor = SmsNpaiSensor(task_id="n", campaign_id=1001)

    assert not sensor.poke({})
    assert sensor.poke({}).xcom_value["destinations"] == ["33699999901"]


# ---------------------------------------------------------------------------------------- triggers


async def test_npai_trigger_finds_the_entry_of_a_sent_campaign_through_faults(sandbox, capfd):
    ticket = SmsHook().send({"text": "Your parcel is on its way", "pushtype": "alert"}, [UNREACHABLE]).ticket
    sandbox.inspect.set_faults(http_error=(503, 2), rate_limit=(0, 1), endpoints=["/npai"])

    payload = await first_event(SmsNpaiTrigger(campaign_id=ticket, poke_interval=0.05))

    assert payload["status"] == "success"
    assert payload["npai"]["destinations"] == [UNREACHABLE]
    assert payload["npai"]["entries"][0]["campaign_id"] == int(ticket)
    output = capfd.readouterr()
    assert "HTTP 503" in output.out + output.err  # the faults did happen and were retried


async def test_webhook_trigger_success_and_unknown_id(sandbox):
    live = await first_event(SmsWebhookTrigger(webhook_id="1", poke_interval=0.05))
    unknown = await first_event(SmsWebhookTrigger(webhook_id="no-such-hook", poke_interval=0.05))

    assert live["webhook"]["webhook_id"] == "1"
    assert (unknown["status"], unknown["error"], unknown["api_status"]) == ("error", "not_found", -5)
    assert sandbox.token not in str(live) + str(unknown)


async def test_webhook_trigger_waits_for_live(sandbox, monkeypatch):
    sandbox.inspect.set_webhook("8", status="disabled", url="https://crm.example.com/dlr")
    polls = 0
    original = SmsWebhookTrigger.poll

    async def poll_then_enable(self: SmsWebhookTrigger, hook: Any) -> Any:
        nonlocal polls
        polls += 1
        result = await original(self, hook)
        if result is None:  # seen disabled: the DLR receiver comes up now
            await asyncio.to_thread(sandbox.inspect.set_webhook, "8", status="live")
        return result

    monkeypatch.setattr(SmsWebhookTrigger, "poll", poll_then_enable)
    payload = await first_event(SmsWebhookTrigger(webhook_id="8", poke_interval=0.05))

    assert payload["webhook"]["status"] == "live"
    assert polls == 2


async def test_a_deferred_wait_ends_at_its_sensors_timeout(sandbox):
    sensor = SmsNpaiSensor(task_id="n", campaign_id=4242, deferrable=True, poke_interval=0.2, timeout=1)
    with pytest.raises(TaskDeferred) as info:
        sensor.execute({})
    # As the triggerer runs it: rebuilt from what the database stores.
    classpath, kwargs = info.value.trigger.serialize()
    assert classpath.endswith(".SmsNpaiTrigger")

    started = time.monotonic()
    payload = await first_event(SmsNpaiTrigger(**kwargs))

    assert payload["status"] == "timeout"
    assert time.monotonic() - started < 5  # at its 1 s timeout, not at this test's 60 s bound
    # A poll every 0.2 s from the sensor's start, the last one at its timeout.
    assert 2 <= sandbox.inspect.requests()["/npai"] <= 6
    with pytest.raises(
        AirflowSensorTimeout, match="still waiting for at least 1 NPAI entry of campaign 4242"
    ):
        sensor.resume_execution("execute_complete", {"event": payload}, {})
