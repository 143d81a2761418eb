"""The wait metrics of SmsWebhookSensor and SmsNpaiSensor: polls, timeouts and NPAI numbers found, counted
once by the sensor in every mode (poke, reschedule, deferred), the service on requests-mock.

A deferred wait's polls come in its trigger's event (tests/unit/test_triggers.py checks the trigger puts
them there); the delivery wait's metrics are checked against the real receiver in
tests/integration/test_receiver_metrics.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from unittest import mock

import pytest
from airflow.exceptions import AirflowRescheduleException
from airflow.providers.common.compat.sdk import DAG, AirflowSensorTimeout, AirflowSkipException

from airflow_provider_sms.exceptions import SmsError
from airflow_provider_sms.sensors.sms import SmsNpaiSensor, SmsWebhookSensor
from tests.unit.samples import npai_entry
from tests.unit.test_sensors import NPAI_URL, WEBHOOK_URL, error_body, npai_body, webhook_body

from .conftest import connection_json

if TYPE_CHECKING:
    from tests.metrics_recorder import MetricsRecorder

NUMBERS = ["33700000002", "33700000003"]


@pytest.fixture
def conn(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", connection_json("json"))
    return "json"


def webhook_sensor(**kwargs: Any) -> SmsWebhookSensor:
    kwargs = {"poke_interval": 5, "timeout": 600, **kwargs}
    return SmsWebhookSensor(task_id="wait_webhook", webhook_id="1839", **kwargs)


def test_each_poke_is_a_poll_tagged_with_the_wait_and_nothing_else(
    conn: str, requests_mock: Any, sleeps: list[float], metrics_recorder: MetricsRecorder
) -> None:
    requests_mock.get(WEBHOOK_URL, [webhook_body(conn, "disabled")] * 2 + [webhook_body(conn, "live")])
    with DAG("sms_watch", schedule=None):
        sensor = webhook_sensor()

    sensor.execute({})

    (first, *_) = polls = metrics_recorder.tagged("wait.polls")
    assert [sent.value for sent in polls] == [1, 1, 1]
    assert first.tags == {
        "conn_id": "sms_default",
        "dag_id": "sms_watch",
        "task_id": "wait_webhook",
        "sensor": "webhook",
    }
    # Plain StatsD: the bounded tags in the name, the DAG and the task left out.
    assert "sms.wait.polls.sms_default.webhook" in metrics_recorder.names()
    assert metrics_recorder.tagged("wait.timeouts") == []


def test_a_poke_that_could_not_read_the_service_is_a_poll_too(
    conn: str, requests_mock: Any, sleeps: list[float], metrics_recorder: MetricsRecorder
) -> None:
    # One poke's worth of 503s (the hook's own retries), then the webhook live.
    requests_mock.get(WEBHOOK_URL, [{"status_code": 503}] * 3 + [webhook_body(conn, "live")])

    webhook_sensor().execute({})

    assert metrics_recorder.total("wait.polls", sensor="webhook") == 2


def test_the_pokes_of_a_rescheduled_wait_are_counted_once_each(
    conn: str, requests_mock: Any, metrics_recorder: MetricsRecorder
) -> None:
    requests_mock.get(WEBHOOK_URL, [webhook_body(conn, "disabled"), webhook_body(conn, "live")])
    ti = mock.Mock()
    ti.get_first_reschedule_date.return_value = None

    with pytest.raises(AirflowRescheduleException):
        webhook_sensor(mode="reschedule").execute({"ti": ti})
    # The next try is a new execute (a new process in Airflow).
    webhook_sensor(mode="reschedule").execute({"ti": ti})

    assert metrics_recorder.total("wait.polls") == 2


@pytest.mark.parametrize(
    ("soft_fail", "ending"), [(False, AirflowSensorTimeout), (True, AirflowSkipException)]
)
def test_a_poke_wait_that_times_out_is_counted_once_failed_or_skipped(
    conn: str,
    requests_mock: Any,
    sleeps: list[float],
    metrics_recorder: MetricsRecorder,
    soft_fail: bool,
    ending: type[Exception],
) -> None:
    requests_mock.get(WEBHOOK_URL, **webhook_body(conn, "disabled"))

    with pytest.raises(ending):
        webhook_sensor(timeout=0, soft_fail=soft_fail).execute({})

    assert metrics_recorder.total("wait.timeouts", reason="timeout", sensor="webhook") == 1
    assert "sms.wait.timeouts.sms_default.webhook.timeout" in metrics_recorder.names()


def test_a_wait_skipped_for_an_error_with_soft_fail_is_no_timeout(
    conn: str, requests_mock: Any, metrics_recorder: MetricsRecorder
) -> None:
    requests_mock.get(WEBHOOK_URL, **error_body(conn, -5, "Webhook not found", 404))

    with pytest.raises(AirflowSkipException):
        webhook_sensor(soft_fail=True).execute({})

    assert metrics_recorder.total("wait.polls") == 1
    assert metrics_recorder.tagged("wait.timeouts") == []


def test_the_npai_numbers_found_are_counted_once_each_and_never_named(
    conn: str, requests_mock: Any, sleeps: list[float], metrics_recorder: MetricsRecorder
) -> None:
    # The same number twice (two campaigns' entries): one number found.
    entries = [
        npai_entry("1", NUMBERS[0], campaign=8),
        npai_entry("2", NUMBERS[1], campaign=8),
        npai_entry("3", NUMBERS[1], campaign=8),
    ]
    requests_mock.get(NPAI_URL, [npai_body(conn, entries[:1]), npai_body(conn, entries)])

    result = SmsNpaiSensor(task_id="wait_npai", campaign_id=8, min_entries=3, poke_interval=5).execute({})

    assert result["count"] == 3
    assert metrics_recorder.total("npai.found", conn_id="sms_default", task_id="wait_npai") == 2
    assert metrics_recorder.total("wait.polls", sensor="npai") == 2
    assert metrics_recorder.personal_data([*NUMBERS, "7000000"]) == []


# ---------------------------------------------------------------------------- deferred: the sensor resumes


def test_a_resumed_wait_counts_the_polls_its_trigger_made(metrics_recorder: MetricsRecorder) -> None:
    sensor = webhook_sensor(deferrable=True)

    sensor.execute_complete({}, {"status": "success", "webhook": {"webhook_id": "1839"}, "polls": 7})

    assert metrics_recorder.total("wait.polls", sensor="webhook", task_id="wait_webhook") == 7
    assert metrics_recorder.tagged("wait.timeouts") == []


def test_an_event_of_an_earlier_version_counts_no_polls(metrics_recorder: MetricsRecorder) -> None:
    webhook_sensor(deferrable=True).execute_complete({}, {"status": "success", "webhook": {}})

    assert metrics_recorder.sent == []


@pytest.mark.parametrize("soft_fail", [False, True])
def test_a_deferred_wait_that_times_out_is_counted_once_by_the_resumed_sensor(
    metrics_recorder: MetricsRecorder, soft_fail: bool
) -> None:
    sensor = SmsNpaiSensor(task_id="wait_npai", deferrable=True, soft_fail=soft_fail)
    event = {
        "status": "timeout",
        "timeout_at": "2026-11-25T08:00:20+00:00",
        "message": "timed out",
        "polls": 4,
    }

    # As Airflow resumes a deferred task.
    with pytest.raises((AirflowSensorTimeout, AirflowSkipException)):
        sensor.resume_execution("execute_complete", {"event": event}, {})

    assert metrics_recorder.total("wait.timeouts", reason="timeout", sensor="npai") == 1
    assert metrics_recorder.total("wait.polls", sensor="npai") == 4


def test_a_deferred_wait_that_failed_counts_its_polls_and_no_timeout(
    metrics_recorder: MetricsRecorder,
) -> None:
    event = {"status": "error", "error": "api", "api_status": -99, "message": "Unknown error", "polls": 2}

    with pytest.raises(SmsError, match="Unknown error"):
        webhook_sensor(deferrable=True).execute_complete({}, event)

    assert metrics_recorder.total("wait.polls") == 2
    assert metrics_recorder.tagged("wait.timeouts") == []


def test_a_resumed_npai_wait_counts_the_numbers_found(metrics_recorder: MetricsRecorder) -> None:
    found = {"count": 3, "destinations": NUMBERS, "entries": []}

    result = SmsNpaiSensor(task_id="wait_npai", deferrable=True).execute_complete(
        {}, {"status": "success", "npai": found, "polls": 1}
    )

    assert result == found
    assert metrics_recorder.total("npai.found") == 2
    assert metrics_recorder.personal_data(NUMBERS) == []
