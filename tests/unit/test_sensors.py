"""SmsWebhookSensor and SmsNpaiSensor: poke logic against requests-mock, the shared NPAI filter, deferral."""

from __future__ import annotations

import datetime as dt
from typing import Any
from unittest import mock

import pendulum
import pytest
from airflow.providers.common.compat.sdk import (
    AirflowFailException,
    AirflowSensorTimeout,
    AirflowSkipException,
    TaskDeferred,
)

from airflow_provider_sms._wait_conditions import DATE_READ_SECONDS, ENTRY_CHECK_SECONDS
from airflow_provider_sms.exceptions import SmsError, SmsValidationError
from airflow_provider_sms.models import NpaiEntry, NpaiList
from airflow_provider_sms.sandbox import wire
from airflow_provider_sms.sensors.sms import DEFERRAL_TIMEOUT_GRACE, SmsNpaiSensor, SmsWebhookSensor
from airflow_provider_sms.triggers.sms import NpaiFilter, SmsNpaiTrigger, SmsWebhookTrigger

from .conftest import BASE_URL, connection_json
from .samples import WEBHOOK, npai_entry

WEBHOOK_URL = f"{BASE_URL}/webhook/1839"
NPAI_URL = f"{BASE_URL}/npai"


def webhook_body(fmt: str, status: str = "live", last_http_code: int | None = 200) -> dict[str, Any]:
    record = {**WEBHOOK, "status": status, "last_http_code": last_http_code}
    return {"content": wire.encode_response({"status": 1, "message": "OK", "webhook": record}, fmt)}


def npai_body(fmt: str, entries: list[dict[str, Any]], total: int | None = None) -> dict[str, Any]:
    answer = {"status": 1, "message": "OK", "list": entries, "totalRecords": total or len(entries)}
    answer["totalDisplayRecords"] = len(entries)
    return {"content": wire.encode_response(answer, fmt)}


def error_body(fmt: str, status: int, message: str, http: int = 200) -> dict[str, Any]:
    return {
        "content": wire.encode_response({"status": status, "message": message}, fmt),
        "status_code": http,
    }


@pytest.fixture
def conn(monkeypatch: pytest.MonkeyPatch, fmt: str) -> str:
    """The sms_default connection, in the wire format under test."""
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", connection_json(fmt))
    return fmt


def webhook_sensor(**kwargs: Any) -> SmsWebhookSensor:
    return SmsWebhookSensor(task_id="wait_webhook", webhook_id="1839", poke_interval=5, timeout=600, **kwargs)


def npai_sensor(**kwargs: Any) -> SmsNpaiSensor:
    return SmsNpaiSensor(task_id="wait_npai", poke_interval=5, timeout=600, **kwargs)


# ---------------------------------------------------------------------------------- webhook sensor


def test_webhook_sensor_waits_until_live_and_returns_the_record(conn, requests_mock, sleeps):
    requests_mock.get(
        WEBHOOK_URL,
        [webhook_body(conn, "disabled"), webhook_body(conn, "pending"), webhook_body(conn, "live")],
    )

    record = webhook_sensor().execute({})

    assert requests_mock.call_count == 3
    assert sleeps == [5, 5]
    assert record == WEBHOOK


def test_require_healthy_waits_for_a_2xx_last_call(conn, requests_mock, sleeps):
    requests_mock.get(
        WEBHOOK_URL,
        [webhook_body(conn, "live", 500), webhook_body(conn, "live", None), webhook_body(conn, "live", 204)],
    )

    record = webhook_sensor(require_healthy=True).execute({})

    assert requests_mock.call_count == 3
    assert record["last_http_code"] == 204


def test_without_require_healthy_a_failing_receiver_is_enough(conn, requests_mock, sleeps):
    requests_mock.get(WEBHOOK_URL, **webhook_body(conn, "LIVE", 500))

    assert webhook_sensor().execute({})["last_http_code"] == 500
    assert requests_mock.call_count == 1


@pytest.mark.parametrize("http", [200, 404])
def test_unknown_webhook_fails_at_once_without_poking(conn, requests_mock, sleeps, http):
    requests_mock.get(WEBHOOK_URL, **error_body(conn, -5, "Webhook not found", http))

    with pytest.raises(AirflowFailException, match=r"status -5.*Webhook not found"):
        webhook_sensor().execute({})
    assert requests_mock.call_count == 1
    assert sleeps == []


def test_rejected_token_fails_at_once(conn, requests_mock, sleeps):
    requests_mock.get(WEBHOOK_URL, **error_body(conn, -1, "Authentication error", 401))

    with pytest.raises(AirflowFailException, match="authentication"):
        webhook_sensor().execute({})
    assert requests_mock.call_count == 1


def test_transient_errors_mean_not_yet_and_the_sensor_keeps_poking(conn, requests_mock, sleeps):
    # The hook retries 3 times per poke: one poke's worth of 503s, then a connection failure retried.
    requests_mock.get(
        WEBHOOK_URL,
        [{"status_code": 503}] * 3 + [{"status_code": 502}, webhook_body(conn, "live")],
    )

    assert webhook_sensor().execute({})["status"] == "live"
    assert requests_mock.call_count == 5
    # `sleeps` records every time.sleep: the hook's 3 backoffs and one poke interval between the pokes.
    assert len(sleeps) == 4
    assert sleeps.count(5) == 1


def test_unknown_connection_fails_at_once(monkeypatch, requests_mock):
    monkeypatch.delenv("AIRFLOW_CONN_SMS_NOPE", raising=False)

    with pytest.raises(AirflowFailException, match="sms_nope"):
        webhook_sensor(sms_conn_id="sms_nope").execute({})


def test_other_api_errors_fail_the_try_normally(conn, requests_mock, sleeps):
    requests_mock.get(WEBHOOK_URL, **error_body(conn, -99, "Unknown error"))

    with pytest.raises(SmsError, match="-99") as info:
        webhook_sensor().execute({})
    assert not isinstance(info.value, AirflowFailException)


@pytest.mark.parametrize("webhook_id", ["", "  ", "a/b"])
def test_bad_webhook_id_fails_before_any_request(conn, requests_mock, webhook_id):
    sensor = SmsWebhookSensor(task_id="w", webhook_id=webhook_id)

    with pytest.raises(AirflowFailException, match="webhook_id"):
        sensor.execute({})
    assert requests_mock.call_count == 0


def test_timeout_fails_and_soft_fail_skips(conn, requests_mock, sleeps):
    requests_mock.get(WEBHOOK_URL, **webhook_body(conn, "disabled"))

    with pytest.raises(AirflowSensorTimeout):
        SmsWebhookSensor(task_id="w", webhook_id="1839", timeout=0, poke_interval=1).execute({})
    with pytest.raises(AirflowSkipException):
        SmsWebhookSensor(task_id="w", webhook_id="1839", timeout=0, soft_fail=True).execute({})


def test_soft_fail_skips_on_unknown_webhook(conn, requests_mock):
    requests_mock.get(WEBHOOK_URL, **error_body(conn, -5, "Webhook not found", 404))

    with pytest.raises(AirflowSkipException):
        webhook_sensor(soft_fail=True).execute({})


def test_exponential_backoff_lengthens_the_waits(conn, requests_mock, sleeps):
    requests_mock.get(WEBHOOK_URL, [webhook_body(conn, "disabled")] * 5 + [webhook_body(conn, "live")])

    SmsWebhookSensor(
        task_id="w", webhook_id="1839", poke_interval=2, timeout=3600, exponential_backoff=True
    ).execute({})

    assert len(sleeps) == 5
    assert sleeps[-1] > sleeps[0]
    assert sleeps == sorted(sleeps)


def test_reschedule_mode_gives_the_slot_back_between_pokes(conn, requests_mock):
    from airflow.exceptions import AirflowRescheduleException

    requests_mock.get(WEBHOOK_URL, [webhook_body(conn, "disabled"), webhook_body(conn, "live")])
    ti = mock.Mock()
    ti.get_first_reschedule_date.return_value = None
    sensor = webhook_sensor(mode="reschedule")

    with pytest.raises(AirflowRescheduleException) as info:
        sensor.execute({"ti": ti})
    assert info.value.reschedule_date > pendulum.now("UTC")
    # The next try is a fresh run of execute (a new process in Airflow): it finds the webhook live.
    assert webhook_sensor(mode="reschedule").execute({"ti": ti})["status"] == "live"


# ------------------------------------------------------------------------------------- NPAI sensor


def test_npai_sensor_filters_by_campaign_and_returns_the_entries(conn, requests_mock, sleeps):
    first = [npai_entry("1", campaign=7), npai_entry("2", "33700000002", campaign=8)]
    second = [*first, npai_entry("3", "33700000003", campaign=8)]
    requests_mock.get(NPAI_URL, [npai_body(conn, first), npai_body(conn, second)])

    result = npai_sensor(campaign_id="8", min_entries=2).execute({})

    assert requests_mock.call_count == 2
    assert result["count"] == 2
    assert result["destinations"] == ["33700000002", "33700000003"]
    assert [e["id"] for e in result["entries"]] == ["2", "3"]
    assert result["entries"][0]["campaign_id"] == 8
    assert result["entries"][0]["user_information"] == []


def test_npai_sensor_filters_by_normalized_destination(conn, requests_mock, sleeps):
    entries = [
        npai_entry("1", "33612345678"),
        npai_entry("2", "33612345679"),
        npai_entry("3", "4915112345678"),
    ]
    requests_mock.get(NPAI_URL, **npai_body(conn, entries))

    result = npai_sensor(destinations=["+33 6 12 34 56 78", "0049 151 12345678"], min_entries=2).execute({})

    assert result["destinations"] == ["33612345678", "4915112345678"]


def test_npai_sensor_reads_every_page(conn, requests_mock, sleeps):
    # 1,001 entries, paged 1,000 at a time: the only match is on the second page.
    page1 = [npai_entry(str(i), f"3360000{i:04d}", campaign=1) for i in range(1000)]
    page2 = [npai_entry("1000", "33699999999", campaign=2)]
    requests_mock.get(NPAI_URL, [npai_body(conn, page1, total=1001), npai_body(conn, page2, total=1001)])

    result = npai_sensor(campaign_id=2).execute({})

    assert result["destinations"] == ["33699999999"]
    assert [r.qs for r in requests_mock.request_history] == [
        {"start": ["0"], "length": ["1000"]},
        {"start": ["1000"], "length": ["1000"]},
    ]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"campaign_id": "ticket-12"}, "campaign_id"),
        ({"campaign_id": 1.5}, "campaign_id"),
        ({"destinations": ["33612345678", "0612345678"]}, r"destinations\[1\]"),
        ({"destinations": []}, "destinations"),
        ({"since": "yesterday"}, "since"),
        ({"since": dt.datetime(2026, 1, 1, 12, 0)}, "since"),  # naive
        ({"since": "2026-03-29 02:30:00"}, "since"),  # does not exist in Paris
    ],
)
def test_bad_npai_filters_fail_before_any_request(conn, requests_mock, kwargs, field):
    with pytest.raises(AirflowFailException, match=field):
        npai_sensor(**kwargs).execute({})
    assert requests_mock.call_count == 0


@pytest.mark.parametrize("min_entries", [0, -1, True, "2"])
def test_bad_min_entries_is_refused_when_the_dag_is_parsed(min_entries):
    with pytest.raises(SmsValidationError, match="min_entries"):
        SmsNpaiSensor(task_id="n", min_entries=min_entries)


def test_templated_fields():
    assert set(SmsNpaiSensor.template_fields) == {"sms_conn_id", "campaign_id", "destinations", "since"}
    assert "webhook_id" in SmsWebhookSensor.template_fields


# -------------------------------------------------- `since` across the 2026-10-25 DST overlap (Paris)

# On 2026-10-25 Paris clocks go back from 03:00 CEST to 02:00 CET: 02:00-02:59 happens twice.
# Entry dates are Paris wall-clock strings; one in the overlap is read as its first occurrence (CEST).
OVERLAP_ENTRIES = [
    npai_entry("before", date="2026-10-25 01:59:59"),  # 23:59:59 UTC the day before
    npai_entry("first-pass", date="2026-10-25 02:30:00"),  # 00:30 UTC
    npai_entry("after", date="2026-10-25 03:00:00"),  # 02:00 UTC (CET)
]


def npai(entries: list[dict[str, Any]]) -> NpaiList:
    return NpaiList.model_validate({"status": 1, "message": "OK", "list": entries})


@pytest.mark.parametrize(
    ("since", "expected"),
    [
        # The second 02:15 (CET, 01:15 UTC) is after the entry dated 02:30 (first occurrence, 00:30 UTC):
        # comparing wall-clock strings would wrongly keep that entry.
        ("2026-10-25T02:15:00+01:00", ["after"]),
        # The first 02:15 (CEST) is before it.
        ("2026-10-25T02:15:00+02:00", ["first-pass", "after"]),
        (pendulum.datetime(2026, 10, 25, 0, 30, tz="UTC"), ["first-pass", "after"]),  # inclusive
        (dt.datetime(2026, 10, 25, 0, 30, 1, tzinfo=dt.timezone.utc), ["after"]),
        ("2026-10-25T01:00:00Z", ["after"]),
        # A Paris wall-clock string in the overlap is also read as its first occurrence.
        ("2026-10-25 02:30:00", ["first-pass", "after"]),
        ("2026-10-24 23:00:00", ["before", "first-pass", "after"]),
    ],
)
def test_since_compares_instants_across_the_autumn_overlap(since, expected):
    npai_filter = NpaiFilter.build(since=since)

    assert [e.id for e in npai_filter.matching(npai(OVERLAP_ENTRIES))] == expected


def test_ambiguous_paris_since_is_resolved_and_logged(caplog):
    npai_filter = NpaiFilter.build(since="2026-10-25 02:15:00")

    # (== between zones is always False for a time in the overlap, PEP 495: compare instants.)
    assert npai_filter.since.timestamp() == pendulum.datetime(2026, 10, 25, 0, 15, tz="UTC").timestamp()
    assert "since 2026-10-25 02:15:00 occurs twice" in caplog.text


def test_all_filters_combine():
    entries = [
        npai_entry("a", "33611111111", "2026-10-25 03:10:00", campaign=5),
        npai_entry("b", "33622222222", "2026-10-25 03:10:00", campaign=5),
        npai_entry("c", "33611111111", "2026-10-25 03:10:00", campaign=6),
        npai_entry("d", "33611111111", "2026-10-25 02:10:00", campaign=5),
    ]
    npai_filter = NpaiFilter.build(
        campaign_id=5, destinations="+33 6 11 11 11 11", since="2026-10-25T02:30:00+01:00"
    )

    assert [e.id for e in npai_filter.matching(npai(entries))] == ["a"]


def test_campaign_filter_reads_the_list_grouped_once_and_keeps_the_services_order():
    entries = [npai_entry(str(i), campaign=i % 3, destination=f"336000000{i:02d}") for i in range(30)]
    entries.append(npai_entry("none", destination="33699999999", campaign=None))  # type: ignore[arg-type]
    listing = npai(entries)
    filters = {campaign: NpaiFilter.build(campaign_id=campaign) for campaign in (0, 1, 2, 3)}

    assert not listing.grouped_by_campaign
    # Before grouping, an estimate counts every entry; after, the campaign's only.
    assert filters[1].seconds(listing) == pytest.approx(31 * ENTRY_CHECK_SECONDS)
    found = {campaign: [e.id for e in f.matching(listing)] for campaign, f in filters.items()}

    assert listing.grouped_by_campaign
    for campaign, ids in found.items():
        assert ids == [e["id"] for e in entries if e["campaign_id"] == campaign]  # a plain scan
    assert found[3] == []
    assert filters[1].seconds(listing) == pytest.approx(10 * ENTRY_CHECK_SECONDS)
    with_dates = NpaiFilter.build(campaign_id=1, since="2026-01-01 00:00:00")
    assert with_dates.seconds(listing) == pytest.approx(10 * DATE_READ_SECONDS)
    # Without a campaign, every entry is looked at.
    assert NpaiFilter.build(destinations="33699999999").seconds(listing) == pytest.approx(
        31 * ENTRY_CHECK_SECONDS
    )
    assert [e.id for e in NpaiFilter.build(destinations="33699999999").matching(listing)] == ["none"]


def test_the_campaign_grouping_is_a_cache_not_content():
    listing = npai([npai_entry("a", campaign=1), npai_entry("b", campaign=2)])
    same = npai([npai_entry("a", campaign=1), npai_entry("b", campaign=2)])

    assert [e.id for e in listing.of_campaign(1)] == ["a"]
    assert listing == same  # one grouped, the other not
    # A copy with other entries is grouped again, not read from the original's groups.
    other = listing.model_copy(update={"entries": [NpaiEntry(id="c", destination="33611111111", date="")]})
    assert not other.grouped_by_campaign
    assert other.of_campaign(1) == []
    assert listing != other


def test_an_entry_with_an_unreadable_date_does_not_match_since():
    entries = [npai_entry("gap", date="2026-03-29 02:30:00"), npai_entry("ok", date="2026-03-29 03:30:00")]

    assert [e.id for e in NpaiFilter.build(since="2026-03-01 00:00:00").matching(npai(entries))] == ["ok"]
    assert len(NpaiFilter.build().matching(npai(entries))) == 2


def test_filter_survives_its_own_serialization():
    npai_filter = NpaiFilter.build("12", ["+33 6 12 34 56 78"], "2026-10-25T02:15:00+01:00", 3)

    rebuilt = NpaiFilter.build(**npai_filter.to_kwargs())

    assert rebuilt == npai_filter
    # The second 02:15 of the night (CET) must stay the second one: == alone ignores `fold`.
    assert rebuilt.since.timestamp() == pendulum.datetime(2026, 10, 25, 1, 15, tz="UTC").timestamp()


# ----------------------------------------------------------------------------------- deferrable mode


def test_deferrable_webhook_sensor_defers_at_once_with_the_timeout(conn, requests_mock):
    sensor = SmsWebhookSensor(
        task_id="w",
        webhook_id=1839,
        deferrable=True,
        poke_interval=30,
        timeout=900,
        exponential_backoff=True,
        max_wait=300,
        sms_conn_id="sms_default",
    )

    with pytest.raises(TaskDeferred) as info:
        sensor.execute({"ti": mock.Mock(start_date=pendulum.datetime(2026, 11, 25, 8, tz="UTC"))})

    assert requests_mock.call_count == 0  # all the waiting happens in the triggerer
    deferred = info.value
    assert deferred.method_name == "execute_complete"
    # The trigger ends the wait at the timeout; Airflow's own deferral timeout is the later backstop.
    assert deferred.timeout == dt.timedelta(seconds=900) + DEFERRAL_TIMEOUT_GRACE
    assert isinstance(deferred.trigger, SmsWebhookTrigger)
    assert deferred.trigger.serialize()[1] == {
        "webhook_id": "1839",
        "expected_status": "live",
        "require_healthy": False,
        "sms_conn_id": "sms_default",
        "poke_interval": 30.0,
        "exponential_backoff": True,
        "max_wait": 300.0,
        "timeout_at": "2026-11-25T08:15:00+00:00",
    }


def test_deferrable_npai_sensor_hands_the_checked_filters_to_the_trigger(conn, requests_mock):
    sensor = npai_sensor(
        campaign_id="42", destinations="+33612345678", since="2026-10-25 03:30:00", deferrable=True
    )

    with pytest.raises(TaskDeferred) as info:
        sensor.execute({})

    trigger = info.value.trigger
    assert isinstance(trigger, SmsNpaiTrigger)
    kwargs = trigger.serialize()[1]
    assert kwargs["campaign_id"] == 42
    assert kwargs["destinations"] == ["33612345678"]
    assert pendulum.parse(kwargs["since"]) == pendulum.datetime(2026, 10, 25, 2, 30, tz="UTC")
    assert requests_mock.call_count == 0


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        # From the task's start, as Airflow counts a poking sensor's timeout.
        ("poke", pendulum.datetime(2026, 11, 25, 8, 0, 20, tz="UTC")),
        # In reschedule mode each poke is a new start: from the first one's.
        ("reschedule", pendulum.datetime(2026, 11, 25, 7, 0, 20, tz="UTC")),
    ],
)
def test_the_trigger_is_given_the_instant_the_timeout_falls_at(conn, mode, expected):
    ti = mock.Mock(start_date=pendulum.datetime(2026, 11, 25, 8, tz="UTC"))
    ti.get_first_reschedule_date.return_value = pendulum.datetime(2026, 11, 25, 7, tz="UTC")

    with pytest.raises(TaskDeferred) as info:
        SmsNpaiSensor(task_id="n", campaign_id=42, deferrable=True, timeout=20, mode=mode).execute({"ti": ti})

    timeout_at = info.value.trigger.serialize()[1]["timeout_at"]
    assert pendulum.parse(timeout_at) == expected


def test_deferrable_sensor_with_bad_input_fails_instead_of_deferring(conn):
    with pytest.raises(AirflowFailException, match="campaign_id"):
        npai_sensor(campaign_id="abc", deferrable=True).execute({})


def test_execute_complete_turns_events_into_results_or_clear_failures():
    sensor = webhook_sensor(deferrable=True)
    record = {"webhook_id": "1839", "status": "live"}

    assert sensor.execute_complete({}, {"status": "success", "webhook": record}) == record
    with pytest.raises(AirflowFailException, match="Webhook not found"):
        sensor.execute_complete({}, {"status": "error", "error": "not_found", "message": "Webhook not found"})
    with pytest.raises(AirflowFailException, match="isn't defined"):
        sensor.execute_complete({}, {"status": "error", "error": "connection", "message": "isn't defined"})
    with pytest.raises(SmsError, match="unknown error") as info:
        sensor.execute_complete({}, {"status": "error", "error": "api", "message": "unknown error"})
    assert not isinstance(info.value, AirflowFailException)
    npai_result = {"count": 1, "destinations": ["33612345678"], "entries": []}
    assert npai_sensor().execute_complete({}, {"status": "success", "npai": npai_result}) == npai_result


@pytest.mark.parametrize(
    ("campaign", "expected_deadline"),
    [
        # The send's result of a campaign delayed to tomorrow 10:00 Paris: 6 h from then.
        (
            {"tickets": ["5000001"], "sent": 3, "delivery_at": "2026-11-26T10:00:00+01:00"},
            pendulum.datetime(2026, 11, 26, 15, tz="UTC"),
        ),
        # Only an id: 6 h from the task's start.
        (5000001, pendulum.datetime(2026, 11, 25, 14, tz="UTC")),
    ],
)
def test_the_delivery_wait_counts_its_deadline_from_when_the_campaign_goes_out(
    monkeypatch, requests_mock, campaign, expected_deadline
):
    from airflow_provider_sms.sensors.sms import SmsDeliveryReportsSensor
    from airflow_provider_sms.triggers.sms import SmsDeliveryReportsTrigger

    monkeypatch.setenv(
        "AIRFLOW_CONN_SMS_DEFAULT", connection_json(dlr_webhook_id="1", dlr_api_url="http://127.0.0.1:8080")
    )
    sensor = SmsDeliveryReportsSensor(
        task_id="wait", campaign=campaign, expected=3, deferrable=True, deadline=dt.timedelta(hours=6)
    )
    started = mock.Mock(start_date=pendulum.datetime(2026, 11, 25, 8, tz="UTC"))

    with pytest.raises(TaskDeferred) as info:
        sensor.execute({"ti": started})

    trigger = info.value.trigger
    assert isinstance(trigger, SmsDeliveryReportsTrigger)
    assert pendulum.parse(trigger.serialize()[1]["deadline"]) == expected_deadline
    assert requests_mock.call_count == 0


def test_in_reschedule_mode_the_deadline_counts_from_the_first_poke(monkeypatch):
    from airflow.providers.common.compat.sdk import BaseSensorOperator

    from airflow_provider_sms.sensors.sms import SmsDeliveryReportsSensor

    monkeypatch.setattr(BaseSensorOperator, "execute", lambda self, context: None)  # no poke here
    sensor = SmsDeliveryReportsSensor(
        task_id="wait", campaign=5000001, expected=3, mode="reschedule", deadline=dt.timedelta(hours=6)
    )
    # Each reschedule starts the task again: start_date is this poke's, the first one's is older.
    ti = mock.Mock(start_date=pendulum.datetime(2026, 11, 25, 13, tz="UTC"))
    ti.get_first_reschedule_date.return_value = pendulum.datetime(2026, 11, 25, 8, tz="UTC")

    sensor.execute({"ti": ti})

    assert sensor._deadline_at == pendulum.datetime(2026, 11, 25, 14, tz="UTC")


def test_the_delivery_wait_hands_the_sends_time_to_its_trigger(monkeypatch, requests_mock):
    from airflow_provider_sms.sensors.sms import SmsDeliveryReportsSensor
    from airflow_provider_sms.triggers.sms import SmsDeliveryReportsTrigger

    monkeypatch.setenv(
        "AIRFLOW_CONN_SMS_DEFAULT", connection_json(dlr_webhook_id="1", dlr_api_url="http://127.0.0.1:8080")
    )
    # The send's result as XCom gives it; any offset reads as the same instant.
    campaign = {"tickets": ["5000001"], "sent": 3, "sent_at": "2026-11-25T10:00:00.250000+01:00"}
    sensor = SmsDeliveryReportsSensor(task_id="wait", campaign=campaign, deferrable=True)

    with pytest.raises(TaskDeferred) as info:
        sensor.execute({"ti": mock.Mock(start_date=pendulum.datetime(2026, 11, 25, 8, tz="UTC"))})

    trigger = info.value.trigger
    assert isinstance(trigger, SmsDeliveryReportsTrigger)
    kwargs = trigger.serialize()[1]
    assert kwargs["sent_at"] == "2026-11-25T09:00:00.250000+00:00"
    rebuilt = SmsDeliveryReportsTrigger(**kwargs)
    assert rebuilt.wait.sent_at == pendulum.datetime(2026, 11, 25, 9, 0, 0, 250000, tz="UTC")


def test_a_send_result_whose_sent_at_cannot_be_read_fails_the_wait_naming_it(monkeypatch):
    from airflow_provider_sms.sensors.sms import SmsDeliveryReportsSensor

    monkeypatch.setenv(
        "AIRFLOW_CONN_SMS_DEFAULT", connection_json(dlr_webhook_id="1", dlr_api_url="http://127.0.0.1:8080")
    )
    sensor = SmsDeliveryReportsSensor(
        task_id="wait", campaign={"tickets": ["5000001"], "sent": 3, "sent_at": "yesterday"}
    )
    with pytest.raises(AirflowFailException, match=r"campaign\['sent_at'\]"):
        sensor.execute({"ti": mock.Mock(start_date=pendulum.datetime(2026, 11, 25, 8, tz="UTC"))})


def delivery_sensor(**kwargs: Any) -> Any:
    from airflow_provider_sms.sensors.sms import SmsDeliveryReportsSensor

    return SmsDeliveryReportsSensor(task_id="wait_delivery", campaign=5000001, expected=3, **kwargs)


TIMEOUT_EVENT = {
    "status": "timeout",
    "timeout_at": "2026-11-25T08:00:20+00:00",
    "message": "Sensor has timed out: still waiting for webhook 1839 to be live at 2026-11-25T08:00:20+00:00",
}


@pytest.mark.parametrize("make_sensor", [webhook_sensor, npai_sensor, delivery_sensor])
@pytest.mark.parametrize(
    ("soft_fail", "ending"), [(False, AirflowSensorTimeout), (True, AirflowSkipException)]
)
def test_the_triggers_timeout_fails_or_skips_the_sensor_as_in_poke_mode(
    make_sensor, soft_fail, ending, capfd
):
    sensor = make_sensor(deferrable=True, soft_fail=soft_fail)

    # As Airflow resumes a deferred task: BaseSensorOperator.resume_execution calls execute_complete.
    with pytest.raises(ending) as info:
        sensor.resume_execution("execute_complete", {"event": TIMEOUT_EVENT}, {})

    if not soft_fail:
        assert str(info.value) == TIMEOUT_EVENT["message"]
    # The task log says why, also for a skip whose message Airflow replaces.
    output = capfd.readouterr()
    assert TIMEOUT_EVENT["message"] in output.out + output.err


def test_in_poke_mode_a_receiver_that_stays_unreadable_ends_the_wait_at_its_deadline(
    monkeypatch, busy_receiver
):
    from airflow_provider_sms.exceptions import SmsError

    monkeypatch.setenv(
        "AIRFLOW_CONN_SMS_DEFAULT",
        connection_json(
            dlr_webhook_id="1",
            dlr_api_url=busy_receiver.removesuffix("/sms/delivery-reports/sms_default/summary"),
        ),
    )
    sensor = delivery_sensor()
    sensor.check_inputs()
    now = pendulum.now("UTC")
    sensor._deadline_at = now.add(minutes=5)

    assert sensor.poke({}).is_done is False  # before the deadline: poked again

    sensor._deadline_at = now.subtract(seconds=1)
    with pytest.raises(SmsError, match="passed while the delivery-report receiver could not be read"):
        sensor.poke({})
