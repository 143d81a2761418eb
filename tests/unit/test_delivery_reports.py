"""Delivery reports without a server: the connection's settings, the wait's arguments, the asset helpers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pendulum
import pytest

from airflow_provider_sms._wait_conditions import DeliveryWait
from airflow_provider_sms.delivery_reports import delivery_reports_asset, reports_from_events
from airflow_provider_sms.delivery_reports.client import judge_summary
from airflow_provider_sms.delivery_reports.settings import (
    BATCH_PATH,
    DEFAULT_MAX_BODY,
    SUMMARY_PATH,
    read_key,
    receiver_settings,
    receiver_url,
)
from airflow_provider_sms.delivery_reports.summary import DeliverySummary
from airflow_provider_sms.exceptions import (
    SmsApiError,
    SmsAuthError,
    SmsNotFoundError,
    SmsTransportError,
    SmsValidationError,
)


def test_a_connection_without_a_webhook_id_receives_nothing() -> None:
    assert receiver_settings({}, conn_id="c") is None
    assert receiver_settings({"dlr_webhook_id": ""}, conn_id="c") is None


def test_the_service_addresses_are_always_allowed_and_the_users_are_added() -> None:
    settings = receiver_settings(
        {"dlr_webhook_id": 7, "dlr_allowed_callers": "127.0.0.1, 10.0.0.0/8"}, conn_id="c"
    )
    assert settings is not None
    assert settings.webhook_id == "7"
    assert settings.max_body == DEFAULT_MAX_BODY
    allowed = ["51.159.7.123", "51.159.21.54", "127.0.0.1", "10.20.30.40"]
    refused = ["51.159.7.124", "8.8.8.8", "::1", "", None, "testclient"]
    assert [settings.allows(a) for a in allowed] == [True] * 4
    assert [settings.allows(a) for a in refused] == [False] * len(refused)


def test_any_turns_the_caller_check_off() -> None:
    settings = receiver_settings({"dlr_webhook_id": "1", "dlr_allowed_callers": "ANY"}, conn_id="c")
    assert settings is not None
    assert settings.allowed_callers is None
    assert settings.allows("8.8.8.8")


@pytest.mark.parametrize(
    ("extra", "field", "words"),
    [
        ({"dlr_webhook_id": True}, "dlr_webhook_id", "must be the webhook's id"),
        (
            {"dlr_webhook_id": "1", "dlr_allowed_callers": ["127.0.0.1", "not-an-ip"]},
            "dlr_allowed_callers",
            "'not-an-ip' is not an IP",
        ),
        ({"dlr_webhook_id": "1", "dlr_allowed_callers": 5}, "dlr_allowed_callers", "must be a list"),
        ({"dlr_webhook_id": "1", "dlr_max_body": "10"}, "dlr_max_body", "at least 512"),
        ({"dlr_webhook_id": "1", "dlr_max_body": "big"}, "dlr_max_body", "number of bytes"),
    ],
)
def test_bad_settings_name_the_field_and_the_rule(extra: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(SmsValidationError, match=words) as caught:
        receiver_settings(extra, conn_id="sms_x")
    assert caught.value.errors[0][0] == field
    assert "connection 'sms_x'" in str(caught.value)


def test_the_receivers_urls_prefer_the_connections_and_need_a_scheme() -> None:
    extra = {"dlr_api_url": "http://api:8080/"}
    assert (
        receiver_url(extra, conn_id="sms default", default_api_url="http://other", path=SUMMARY_PATH)
        == "http://api:8080/sms/delivery-reports/sms%20default/summary"
    )
    assert (
        receiver_url(extra, conn_id="sms/x", default_api_url="", path=BATCH_PATH, batch=12)
        == "http://api:8080/sms/delivery-reports/sms%2Fx/batches/12"
    )
    assert receiver_url(
        {}, conn_id="c", default_api_url="https://airflow.example.com", path=SUMMARY_PATH
    ).startswith("https://airflow.example.com/sms/")
    with pytest.raises(SmsValidationError, match="dlr_api_url"):
        receiver_url({}, conn_id="c", default_api_url="", path=SUMMARY_PATH)


def test_the_read_key_is_derived_not_the_token() -> None:
    key = read_key("a-token-of-some-length")
    assert key != "a-token-of-some-length"
    assert len(key) == 64
    assert key == read_key("a-token-of-some-length")
    assert key != read_key("another-token")


def test_the_summary_answer_is_judged_by_status() -> None:
    body = DeliverySummary(campaign_ids=[1], reported=1, by_status={"delivered": 1}, final=1, failed_count=0)
    assert judge_summary(200, body.model_dump_json().encode(), "u").final == 1
    with pytest.raises(SmsAuthError, match=r"^the Airflow API server answered HTTP 401: it refused the key"):
        judge_summary(401, b"", "u")
    with pytest.raises(SmsNotFoundError, match="dlr_webhook_id") as caught:
        judge_summary(404, b'{"detail": "no delivery reports are received for this connection"}', "u")
    # The API server's own words as text, not a bytes repr; not "the service".
    assert str(caught.value).startswith(
        "the Airflow API server answered HTTP 404: no delivery reports are received for this connection (u)"
    )
    for status in (429, 502, 503):
        with pytest.raises(SmsTransportError, match=f"^the Airflow API server answered HTTP {status} at u"):
            judge_summary(status, b"", "u")
    # The tables missing: the try fails (a retry after `airflow db migrate` finds them), not "polling again".
    body = b'{"detail": "the delivery-report tables are missing: run `airflow db migrate`"}'
    with pytest.raises(SmsApiError) as missing:
        judge_summary(500, body, "u")
    assert not isinstance(missing.value, SmsTransportError)
    assert str(missing.value) == (
        "the Airflow API server answered HTTP 500: the delivery-report tables are missing: run "
        "`airflow db migrate` (u)"
    )
    with pytest.raises(SmsApiError, match="not readable"):
        judge_summary(200, b"<html>", "u")


def test_the_wait_reads_the_send_result_or_ids() -> None:
    result = {"ticket": "5000001", "tickets": ["5000001", "5000002"], "sent": 2000}
    wait = DeliveryWait.build(result, None, 0.9)
    assert (wait.campaign_ids, wait.expected, wait.min_final_share) == ((5000001, 5000002), 2000, 0.9)
    assert DeliveryWait.build("42", "10", "1").to_kwargs() == {
        "campaign_ids": [42],
        "expected": 10,
        "min_final_share": 1.0,
        "sent_at": None,  # bare ids: no send time, every stored report of the ids counts
    }
    assert DeliveryWait.build([1, "2"], 5, 0.5).campaign_ids == (1, 2)


def test_the_wait_knows_when_the_campaign_goes_out_from_the_send_result() -> None:
    delayed = {"tickets": ["5000001"], "sent": 10, "delivery_at": "2026-11-26T10:00:00+01:00"}
    assert DeliveryWait.build(delayed, None, 0.9).delivery_at == pendulum.datetime(2026, 11, 26, 9, tz="UTC")
    # A hand-made result without it, and bare ids: no delivery time (the deadline counts from the start).
    assert DeliveryWait.build({"tickets": ["5000001"], "sent": 10}, None, 0.9).delivery_at is None
    assert DeliveryWait.build(5000001, 10, 0.9).delivery_at is None


@pytest.mark.parametrize(
    ("campaign", "expected", "share", "field"),
    [
        (None, 10, 0.9, "campaign"),
        ("abc", 10, 0.9, "campaign"),
        ([], 10, 0.9, "campaign"),
        ({"tickets": [], "sent": 3}, None, 0.9, "campaign"),
        (1, None, 0.9, "expected"),
        (1, -1, 0.9, "expected"),
        (1, 10, 0, "min_final_share"),
        (1, 10, "most", "min_final_share"),
        ({"tickets": [1], "sent": 3, "delivery_at": "tomorrow"}, None, 0.9, "campaign['delivery_at']"),
    ],
)
def test_bad_wait_arguments_name_the_field(campaign: Any, expected: Any, share: Any, field: str) -> None:
    with pytest.raises(SmsValidationError) as caught:
        DeliveryWait.build(campaign, expected, share)
    assert caught.value.errors[0][0] == field


def test_the_share_and_the_result() -> None:
    wait = DeliveryWait.build(7, 4, 0.75)
    summary = DeliverySummary(
        campaign_ids=[7],
        reported=4,
        by_status={"delivered": 2, "expired": 1, "sent": 1},
        final=3,
        failed_count=1,
        failed=["33600000003"],
    )
    assert wait.reached(summary)
    assert "3 of 4 messages have a final status (75.0%, 75% needed)" in wait.describe(summary)
    assert wait.result(summary, complete=True)["failed"] == ["33600000003"]
    assert DeliveryWait.build(7, 0, 1).reached(summary)  # nothing expected: nothing to wait for


@dataclass
class Event:
    extra: Any


def test_reports_are_read_from_triggering_events_of_any_shape() -> None:
    ours = {
        "date": "2026-11-24T10:00:00+01:00",
        "status": 3,
        "destination": "+33 6 12 34 56 78",
        "campaign_id": 5,
        "conn_id": "sms_default",
        "message_id": 12,
    }
    other = {"rows": 10}
    by_asset = {
        "sms_delivery_reports/sms_default": [Event(ours)],
        "warehouse/orders": [Event(other), Event(None)],
    }
    (report,) = reports_from_events(by_asset)
    assert (report.destination, report.message_id, report.status_name) == ("33612345678", "12", "delivered")
    assert reports_from_events([Event(ours), Event(ours)]) == [report, report]
    assert reports_from_events(None) == []


def test_the_asset_is_per_connection() -> None:
    asset = delivery_reports_asset("sms_eu")
    assert (asset.name, asset.uri) == ("sms_delivery_reports/sms_eu", "sms_delivery_reports/sms_eu")
    assert delivery_reports_asset().name == "sms_delivery_reports/sms_default"
