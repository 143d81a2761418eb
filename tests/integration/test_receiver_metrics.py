"""The metrics of the API server's receiver and flusher, and of the delivery wait, on the real receiver.

The receiver's app runs over HTTP on 127.0.0.1 on the session's migrated SQLite database, its flusher in
its lifespan, as in tests/integration/test_delivery_reports.py; the provider's metrics go to the test's
recorder (tests/metrics_recorder.py), this process being the API server. Each call of the receiver must
count once: stored, duplicate, or refused by the reason of the step that refused it.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import text

from airflow_provider_sms.delivery_reports import connections as connections_module
from airflow_provider_sms.metrics import RECEIVER_REFUSALS
from airflow_provider_sms.sandbox.testing import TEST_TOKEN
from airflow_provider_sms.sensors.sms import SmsDeliveryReportsSensor
from airflow_provider_sms.triggers.sms import SmsDeliveryReportsTrigger
from tests.integration.conftest import clear
from tests.integration.test_delivery_reports import (
    HEADERS,
    SIGNATURE,
    asset_events,
    connection_env,
    declare_asset,
    flushed,
    post,
    report,
    serve_receiver,
    wait_until,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from airflow_provider_sms.sandbox.server import SandboxServer, ThreadedServer
    from tests.metrics_recorder import MetricsRecorder

pytestmark = pytest.mark.integration

NUMBERS = ["33600000051", "33600000052", "33600000053", "33600000054", "33600000055"]
CAMPAIGN = 918273


@pytest.fixture
def access_log() -> list[str]:
    return []


@pytest.fixture
def server(
    metadata_db: Any, sms_sandbox: SandboxServer, monkeypatch: pytest.MonkeyPatch, access_log: list[str]
) -> Iterator[ThreadedServer]:
    """The receiver's app on 127.0.0.1 (its flusher running), sms_default receiving from 127.0.0.1."""
    clear(metadata_db)
    connection_env(monkeypatch, sms_sandbox)
    with serve_receiver(access_log) as receiver:
        yield receiver
    clear(metadata_db)


def test_each_call_counts_once_stored_duplicate_or_refused_by_reason(
    server: ThreadedServer,
    metadata_db: Any,
    sms_sandbox: SandboxServer,
    monkeypatch: pytest.MonkeyPatch,
    metrics_recorder: MetricsRecorder,
) -> None:
    connection_env(monkeypatch, sms_sandbox, conn_id="sms_strict", dlr_allowed_callers=[])
    connection_env(monkeypatch, sms_sandbox, conn_id="sms_fresh")
    lookup = connections_module.lookup_connection

    def database_down_for_sms_down(conn_id: str) -> Any:
        if conn_id == "sms_down":
            raise connections_module.connections_unreadable()
        return lookup(conn_id)

    monkeypatch.setattr(connections_module, "lookup_connection", database_down_for_sms_down)
    answers: dict[str, list[int]] = {}

    def call(cause: str, body: Any, conn_id: str = "sms_default", **headers: str) -> None:
        answers.setdefault(cause, []).append(post(server, body, conn_id, {**HEADERS, **headers}).status_code)

    call("stored", report(NUMBERS[0]))
    call("stored", report(NUMBERS[1]))
    call("duplicates", report(NUMBERS[0]))
    call("unknown_name", report(), conn_id="made_up_name_4711")
    call("connection_unavailable", report(), conn_id="sms_down")
    call("caller", report(), conn_id="sms_strict")
    call("size", b"{" + b" " * 20_000 + b"}")
    call("body", report(), **{"Content-Type": "text/plain"})
    call("body", b"{not json")
    call("body", json.dumps(report(status="delivered")).encode())
    call("signature", report(), **{"X-SMSFactor-Signature": ""})
    call("signature", report(), **{"X-SMSFactor-Signature": "forged"})
    # A connection whose signature was never read: the service fails to give it.
    sms_sandbox.inspect.set_faults(http_error=(502, 1))
    call("signature_unavailable", report(), conn_id="sms_fresh")
    sms_sandbox.inspect.clear_faults()
    with metadata_db.engine.begin() as connection:
        connection.execute(text("ALTER TABLE sms_delivery_report RENAME TO sms_delivery_report_away"))
    try:
        call("store_unavailable", report(NUMBERS[2]))
    finally:
        with metadata_db.engine.begin() as connection:
            connection.execute(text("ALTER TABLE sms_delivery_report_away RENAME TO sms_delivery_report"))

    assert answers == {
        "stored": [200, 200],
        "duplicates": [200],
        "unknown_name": [404],
        "connection_unavailable": [503],
        "caller": [404],
        "size": [413],
        "body": [415, 400, 422],
        "signature": [401, 403],
        "signature_unavailable": [503],
        "store_unavailable": [503],
    }
    # Every reason the metric declares happened here once per call, and no other.
    refused = {
        cause: int(metrics_recorder.total("receiver.refused", reason=cause)) for cause in RECEIVER_REFUSALS
    }
    assert refused == {cause: len(answers[cause]) for cause in RECEIVER_REFUSALS}
    assert {sent.tags["reason"] for sent in metrics_recorder.tagged("receiver.refused")} <= set(
        RECEIVER_REFUSALS
    )
    assert metrics_recorder.total("receiver.stored", conn_id="sms_default") == 2
    assert metrics_recorder.total("receiver.duplicates", conn_id="sms_default") == 1
    calls = sum(len(codes) for codes in answers.values())
    counted = sum(
        metrics_recorder.total(name)
        for name in ("receiver.stored", "receiver.duplicates", "receiver.refused")
    )
    assert counted == calls
    # A refusal names the connection once it is known to receive reports; a made-up name is never sent.
    (caller,) = metrics_recorder.tagged("receiver.refused", reason="caller")
    assert caller.tags == {"conn_id": "sms_strict", "reason": "caller"}
    (unknown,) = metrics_recorder.tagged("receiver.refused", reason="unknown_name")
    assert unknown.tags == {"reason": "unknown_name"}
    assert "sms.receiver.refused.signature" in metrics_recorder.names()
    assert "sms.receiver.stored.sms_default" in metrics_recorder.names()
    secrets = [*NUMBERS, str(CAMPAIGN), "777", TEST_TOKEN, SIGNATURE, "forged", "made_up_name", "sms_down"]
    assert metrics_recorder.personal_data(secrets) == []


def test_concurrent_calls_are_each_counted_once_across_their_shared_commits(
    server: ThreadedServer, metrics_recorder: MetricsRecorder
) -> None:
    bodies = [report(f"3360000{index:04d}", campaign_id=CAMPAIGN) for index in range(40)]
    bodies += bodies[:5]  # the service's retries of five of them

    async def post_all() -> list[int]:
        answers = await asyncio.gather(*(asyncio.to_thread(post, server, body) for body in bodies))
        return [answer.status_code for answer in answers]

    assert asyncio.run(post_all()) == [200] * 45

    # Per commit (tests/unit/test_group_commit.py): how many commits depends on how the calls overlapped.
    assert metrics_recorder.total("receiver.stored") == 40
    assert metrics_recorder.total("receiver.duplicates") == 5


def test_the_flusher_counts_each_asset_event_and_how_long_reports_waited(
    server: ThreadedServer,
    metadata_db: Any,
    sms_sandbox: SandboxServer,
    monkeypatch: pytest.MonkeyPatch,
    metrics_recorder: MetricsRecorder,
) -> None:
    connection_env(
        monkeypatch, sms_sandbox, conn_id="sms_metrics_small", dlr_event_max_reports=2, dlr_event_interval=0.2
    )
    connection_env(monkeypatch, sms_sandbox, conn_id="sms_metrics_no_dag", dlr_event_interval=0.2)
    asset = declare_asset("sms_metrics_small")
    before = len(asset_events(asset.name))
    started = time.monotonic()
    for number in NUMBERS:
        assert (
            post(server, report(number, campaign_id=CAMPAIGN), conn_id="sms_metrics_small").status_code == 200
        )
    assert (
        post(server, report(NUMBERS[0], campaign_id=CAMPAIGN), conn_id="sms_metrics_no_dag").status_code
        == 200
    )
    flushed(metadata_db)
    elapsed_ms = (time.monotonic() - started) * 1000

    events = asset_events(asset.name)[before:]
    assert sum(event.extra["reports"] for event in events) == len(NUMBERS)
    wait_until(
        lambda: metrics_recorder.total("flusher.asset_events", conn_id="sms_metrics_small") == len(events)
    )
    # A connection whose asset no DAG schedules on has its reports batched, but no asset event.
    wait_until(lambda: bool(metrics_recorder.values("flusher.lag", conn_id="sms_metrics_no_dag")))
    assert metrics_recorder.total("flusher.asset_events", conn_id="sms_metrics_no_dag") == 0
    # The lag of a look is the wait of the oldest report it batched: at least the connection's interval
    # for a partial batch, never longer than the test.
    lags = metrics_recorder.values("flusher.lag", conn_id="sms_metrics_small") + metrics_recorder.values(
        "flusher.lag", conn_id="sms_metrics_no_dag"
    )
    assert all(0 <= lag <= elapsed_ms + 1000 for lag in lags)
    assert max(metrics_recorder.values("flusher.lag", conn_id="sms_metrics_no_dag")) >= 200
    assert metrics_recorder.personal_data([*NUMBERS, str(CAMPAIGN)]) == []


# ------------------------------------------------------------------------------------ the delivery wait


def delivered_some(server: ThreadedServer, metadata_db: Any) -> None:
    """Reports of CAMPAIGN: 2 delivered, 1 expired, 1 still sent, 1 of a status the service does not
    document; a 6th message sent has none."""
    statuses = [3, 3, 12, 1, 42]
    for number, status in zip(NUMBERS, statuses, strict=True):
        assert post(server, report(number, status, campaign_id=CAMPAIGN)).status_code == 200
    flushed(metadata_db)


EXPECTED_BY_STATUS = {"delivered": 2, "expired": 1, "sent": 1, "other": 1, "no_report": 1}


def by_status(metrics_recorder: MetricsRecorder) -> dict[str, float]:
    return {
        sent.tags["status"]: sent.value for sent in metrics_recorder.tagged("delivery.reports") if sent.tags
    }


def test_a_poke_wait_that_reaches_its_deadline_counts_the_messages_by_status_and_the_share_delivered(
    server: ThreadedServer,
    metadata_db: Any,
    sms_sandbox: SandboxServer,
    monkeypatch: pytest.MonkeyPatch,
    access_log: list[str],
    metrics_recorder: MetricsRecorder,
) -> None:
    delivered_some(server, metadata_db)
    connection_env(monkeypatch, sms_sandbox, dlr_api_url=server.url)
    sensor = SmsDeliveryReportsSensor(
        task_id="wait_delivery",
        campaign=CAMPAIGN,
        expected=6,
        min_final_share=1.0,
        deadline=timedelta(seconds=0.6),
        poke_interval=0.2,
        timeout=30,
    )

    result = sensor.execute({})

    assert result["complete"] is False
    assert by_status(metrics_recorder) == EXPECTED_BY_STATUS
    assert metrics_recorder.values("delivery.delivered_share", task_id="wait_delivery") == [2 / 6]
    assert metrics_recorder.total("wait.timeouts", reason="deadline", sensor="delivery_reports") == 1
    # One poll per summary read, but for the last one, which reads the failed numbers once the wait is over.
    pokes = [url for url in access_log if "/summary?" in url and "failed=false" in url]
    assert metrics_recorder.total("wait.polls", sensor="delivery_reports") == len(pokes) >= 2
    assert "sms.delivery.reports.sms_default.no_report" in metrics_recorder.names()
    assert metrics_recorder.personal_data([*NUMBERS, str(CAMPAIGN)]) == []


def test_a_deferred_wait_counts_the_same_once_its_sensor_resumes(
    server: ThreadedServer,
    metadata_db: Any,
    sms_sandbox: SandboxServer,
    monkeypatch: pytest.MonkeyPatch,
    metrics_recorder: MetricsRecorder,
) -> None:
    delivered_some(server, metadata_db)
    connection_env(monkeypatch, sms_sandbox, dlr_api_url=server.url)
    trigger = SmsDeliveryReportsTrigger(
        summary_url=f"{server.url}/sms/delivery-reports/sms_default/summary",
        campaign_ids=[CAMPAIGN],
        expected=6,
        min_final_share=0.5,
        deadline="2099-01-01T00:00:00+00:00",
        poke_interval=0.2,
    )

    async def first_event() -> dict[str, Any]:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("the trigger ended without an event")

    event = asyncio.run(asyncio.wait_for(first_event(), timeout=30))
    # The trigger counts nothing (the receiver, in this process too, does): its event carries the polls.
    assert not [
        sent for sent in metrics_recorder.sent if sent.name.startswith(("sms.wait.", "sms.delivery."))
    ]
    sensor = SmsDeliveryReportsSensor(
        task_id="wait_delivery", campaign=CAMPAIGN, expected=6, min_final_share=0.5, deferrable=True
    )

    result = sensor.execute_complete({}, event)

    assert result["complete"] is True
    assert by_status(metrics_recorder) == EXPECTED_BY_STATUS
    assert metrics_recorder.values("delivery.delivered_share") == [2 / 6]
    assert metrics_recorder.total("wait.polls", sensor="delivery_reports") == event["polls"] == 1
    assert metrics_recorder.tagged("wait.timeouts") == []
