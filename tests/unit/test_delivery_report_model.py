"""DeliveryReport: one delivery report (DLR) as the service posts it; codec both ways."""

from __future__ import annotations

import json

import pytest

from airflow_provider_sms import codec
from airflow_provider_sms.exceptions import SmsValidationError
from airflow_provider_sms.models import DELIVERY_STATUSES, DeliveryReport

REPORT = {
    "date": "2026-11-24T10:00:03+01:00",
    "status": 3,
    "destination": "33612345678",
    "message_id": "order-42",
    "campaign_id": 5000001,
    "country_code": "FR",
}


def test_a_report_as_the_service_posts_it_is_read_with_its_status_named():
    report = codec.decode_delivery_report(json.dumps(REPORT).encode())

    assert (report.status_name, report.final, report.message_id, report.campaign_id) == (
        "delivered",
        True,
        "order-42",
        5000001,
    )
    assert report.date.utcoffset().total_seconds() == 3600
    assert codec.decode_delivery_report(codec.encode_delivery_report(report)) == report


@pytest.mark.parametrize(
    ("status", "name", "final"), [(1, "sent", False), (12, "expired", True), (8, "status 8", True)]
)
def test_status_names_and_which_are_final(status, name, final):
    report = DeliveryReport.model_validate({**REPORT, "status": status})

    assert (report.status_name, report.final) == (name, final)


def test_every_documented_status_has_a_name():
    assert sorted(DELIVERY_STATUSES) == [0, 1, 2, 3, 4, 5, 6, 7, 9, 11, 12]


def test_the_number_is_normalized_and_an_empty_message_id_is_none():
    report = DeliveryReport.model_validate({**REPORT, "destination": "+33 6 12 34 56 78", "message_id": ""})

    assert (report.destination, report.message_id) == ("33612345678", None)


@pytest.mark.parametrize(
    ("body", "named"),
    [
        (
            json.dumps({**REPORT, "date": "2026-11-24T10:00:03"}).encode(),
            "report.date: the date has no offset",
        ),
        (
            json.dumps({k: v for k, v in REPORT.items() if k != "campaign_id"}).encode(),
            "report.campaign_id: Field required",
        ),
        (json.dumps({**REPORT, "destination": "0612345678"}).encode(), "report.destination"),
        (b"{not json", "report: Invalid JSON"),
    ],
    ids=["naive-date", "no-campaign", "national-number", "malformed"],
)
def test_a_bad_report_is_refused_naming_the_field(body, named):
    with pytest.raises(SmsValidationError) as info:
        codec.decode_delivery_report(body)

    assert named in str(info.value)
    assert info.value.errors[0][0].startswith("report")


@pytest.mark.parametrize("code", ["FR", "GB", "", None])
def test_a_country_code_is_two_capital_letters_or_none(code):
    report = codec.decode_delivery_report(json.dumps({**REPORT, "country_code": code}).encode())

    assert report.country_code == code


@pytest.mark.parametrize("code", ["=2+3", "fr", "Fr", "F", "FRA", "F1", "ÉS", " FR", "FR\n", "-1", "@A"])
def test_any_other_country_code_is_refused_naming_the_field_and_the_rule_not_the_value(code):
    with pytest.raises(SmsValidationError) as info:
        codec.decode_delivery_report(json.dumps({**REPORT, "country_code": code}).encode())

    assert info.value.errors == [
        (
            "report.country_code",
            "must be two capital letters A-Z (an ISO 3166-1 alpha-2 code, e.g. FR), or empty",
        )
    ]
