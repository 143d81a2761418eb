"""A delivery report is bounded by what the table of reports holds, and a gsmsmsid by what its echo needs.

What the model refuses the receiver answers 422 (the service stops retrying); what it let through and
the database then refused was answered 503 for ever. The receiver's side of it, over HTTP on SQLite,
is tests/integration/test_hostile_reports.py; on PostgreSQL, tests/deployment/test_hostile_reports.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from airflow_provider_sms import codec
from airflow_provider_sms.delivery_reports.settings import receiver_settings
from airflow_provider_sms.exceptions import SmsValidationError
from airflow_provider_sms.models import (
    CAMPAIGN_ID_MAX,
    DESTINATION_MAX_LENGTH,
    MESSAGE_ID_MAX_LENGTH,
    REPORT_DATE_MAX,
    REPORT_DATE_MIN,
    STATUS_MAX,
    Recipient,
)
from airflow_provider_sms.phone_numbers import VALID_NUMBER
from airflow_provider_sms.recipients import parse_recipients

REPORT = {
    "date": "2026-11-24T10:00:03+01:00",
    "status": 3,
    "destination": "33612345678",
    "message_id": "order-42",
    "campaign_id": 5000001,
    "country_code": "FR",
}

# Each report the table cannot hold, with the field its error names and the rule's words. Shared with
# the receiver's tests (SQLite and PostgreSQL).
UNSTORABLE: dict[str, tuple[dict[str, Any], str, str]] = {
    "date-before-year-1-in-utc": (
        {"date": "0001-01-01T00:00:00+01:00"},
        "date",
        "from 1970-01-02 to 2038-01-18",
    ),
    "date-after-year-9999-in-utc": ({"date": "9999-12-31T23:59:59-01:00"}, "date", "in UTC"),
    "date-before-1970-01-02": ({"date": "1970-01-01T23:59:59+00:00"}, "date", "from 1970-01-02"),
    "date-after-2038-01-18": ({"date": "2038-01-19T00:00:00+00:00"}, "date", "to 2038-01-18"),
    "status-2-63": ({"status": 2**63}, "status", f"less than or equal to {STATUS_MAX}"),
    "status-2-31": ({"status": 2**31}, "status", f"less than or equal to {STATUS_MAX}"),
    "status-negative": ({"status": -1}, "status", "greater than or equal to 0"),
    "campaign-id-2-63": ({"campaign_id": 2**63}, "campaign_id", f"less than or equal to {CAMPAIGN_ID_MAX}"),
    "campaign-id-0": ({"campaign_id": 0}, "campaign_id", "greater than or equal to 1"),
    "message-id-129": ({"message_id": "m" * 129}, "message_id", "at most 128 characters"),
    "message-id-nul": ({"message_id": "order\x0042"}, "message_id", "NUL character at position 5"),
    "country-code-9": ({"country_code": "FRANCE-FR"}, "country_code", "at most 8 characters"),
    "country-code-nul": ({"country_code": "F\x00"}, "country_code", "NUL character"),
    "country-code-formula": ({"country_code": "=2+3"}, "country_code", "two capital letters"),
    "destination-33-digits": (
        {"destination": "3" * 33},
        "destination",
        "not an international telephone number",
    ),
}


def decode(**fields: Any) -> Any:
    return codec.decode_delivery_report(json.dumps({**REPORT, **fields}).encode())


@pytest.mark.parametrize(("fields", "field", "rule"), list(UNSTORABLE.values()), ids=list(UNSTORABLE))
def test_a_report_the_table_cannot_hold_is_invalid_naming_the_field_and_the_rule(
    fields: dict[str, Any], field: str, rule: str
) -> None:
    with pytest.raises(SmsValidationError) as caught:
        decode(**fields)

    assert [name for name, _ in caught.value.errors] == [f"report.{field}"]
    assert rule in str(caught.value)


@pytest.mark.parametrize(
    "fields",
    [
        {"date": "1970-01-02T00:00:00+00:00"},
        {"date": "1970-01-02T01:00:00+01:00"},
        {"date": "2038-01-18T23:59:59.999999+00:00"},
        {"date": "2038-01-19T00:30:00+01:00"},  # 2038-01-18 23:30 in UTC
        {"status": STATUS_MAX},
        {"status": 0},
        {"campaign_id": CAMPAIGN_ID_MAX},
        {"campaign_id": 1},
        {"message_id": "m" * MESSAGE_ID_MAX_LENGTH},
        {"country_code": "FR"},
        {"destination": "1" * 15},
    ],
    ids=lambda fields: next(iter(fields)),
)
def test_the_edges_themselves_are_valid_and_kept_as_given(fields: dict[str, Any]) -> None:
    report = decode(**fields)

    name, value = next(iter(fields.items()))
    kept = report.date.isoformat() if name == "date" else getattr(report, name)
    assert kept == value


def test_the_date_bounds_are_whole_days_within_mysqls_timestamp() -> None:
    # MySQL's TIMESTAMP, the narrowest of the databases Airflow supports: 1970-01-01 00:00:01 to
    # 2038-01-19 03:14:07 UTC.
    assert (REPORT_DATE_MIN.isoformat(), REPORT_DATE_MAX.isoformat()) == (
        "1970-01-02T00:00:00+00:00",
        "2038-01-18T23:59:59.999999+00:00",
    )


def test_no_number_the_rule_lets_through_is_longer_than_its_column() -> None:
    longest = int(VALID_NUMBER.pattern.rsplit(",", 1)[1].rstrip("}")) + 1
    assert longest <= DESTINATION_MAX_LENGTH
    assert len(decode(destination=f"+{'1' * longest}").destination) == longest
    with pytest.raises(SmsValidationError, match="8 to 15 digits"):
        decode(destination=" ".join(["1"] * (longest + 1)))


def test_a_gsmsmsid_longer_than_a_message_id_is_refused_naming_the_field_and_the_rule() -> None:
    assert Recipient(value="33612345678", gsmsmsid="g" * MESSAGE_ID_MAX_LENGTH).gsmsmsid == "g" * 128

    with pytest.raises(SmsValidationError) as caught:
        parse_recipients(
            [{"value": "33612345678", "gsmsmsid": "g" * 129}, {"value": "33612345679", "gsmsmsid": 10**130}]
        )

    text = str(caught.value)
    assert "2 of 2 recipients are not valid (by rule: 2 gsmsmsid invalid)" in text
    assert "recipients[0]: gsmsmsid: 129 characters, more than the 128 allowed" in text
    assert "recipients[1]: gsmsmsid: 131 characters" in text
    assert "message_id" in text


def test_a_recipient_built_without_validation_is_checked_before_any_request() -> None:
    unchecked = [
        Recipient.model_construct(value="33612345678", gsmsmsid="g" * 129),
        Recipient.model_construct(value="+33 6 12 34 56 79", gsmsmsid=None),
    ]
    changed = Recipient(value="33612345680", gsmsmsid="ok")
    changed.value = "0612345680"  # a national number, set after the checks

    with pytest.raises(SmsValidationError) as caught:
        parse_recipients([*unchecked, changed])

    text = str(caught.value)
    assert "recipients[0]: gsmsmsid: 129 characters, more than the 128 allowed" in text
    assert "recipients[2]" in text
    assert "national number" in text
    # The normalizable one is normalized, never sent with its '+'.
    assert parse_recipients([unchecked[1]]) == ["33612345679"]


def test_an_ipv4_mapped_caller_is_the_ipv4_address_it_is() -> None:
    settings = receiver_settings(
        {"dlr_webhook_id": "1", "dlr_allowed_callers": ["10.0.0.0/8", "::ffff:192.0.2.1"]}, conn_id="c"
    )
    assert settings is not None

    allowed = [
        "::ffff:51.159.7.123",
        "::ffff:51.159.21.54",
        "::ffff:10.1.2.3",
        "::ffff:192.0.2.1",
        "51.159.7.123",
    ]
    refused = ["::ffff:51.159.7.124", "::ffff:8.8.8.8", "::1", "::51.159.7.123", "2001:db8::51.159.7.123"]
    assert [settings.allows(address) for address in allowed] == [True] * len(allowed)
    assert [settings.allows(address) for address in refused] == [False] * len(refused)
