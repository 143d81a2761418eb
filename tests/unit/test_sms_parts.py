"""SMS parts: GSM-7 160/153, Unicode 70/67, extension characters, short-URL markers."""

from __future__ import annotations

import pytest

from airflow_provider_sms.short_urls import marker_mismatch
from airflow_provider_sms.sms_parts import SHORT_URL_LENGTH, count_parts


@pytest.mark.parametrize(
    ("text", "encoding", "length", "parts"),
    [
        ("a" * 160, "GSM-7", 160, 1),
        ("a" * 161, "GSM-7", 161, 2),
        ("a" * 306, "GSM-7", 306, 2),
        ("a" * 307, "GSM-7", 307, 3),
        ("€" * 80, "GSM-7", 160, 1),  # extension characters take two septets
        ("€" * 81, "GSM-7", 162, 2),
        ("é" * 160, "GSM-7", 160, 1),  # in the GSM basic set
        ("ê" * 70, "UCS-2", 70, 1),  # not in it: the whole text goes Unicode
        ("ê" * 71, "UCS-2", 71, 2),
        ("a" * 134 + "\u2019", "UCS-2", 135, 3),
        ("😀" * 35, "UCS-2", 70, 1),  # an emoji is two UTF-16 units
    ],
)
def test_parts(text, encoding, length, parts):
    counted = count_parts(text)
    assert (counted.encoding, counted.length, counted.parts) == (encoding, length, parts)


def test_short_url_markers_count_as_a_short_url():
    counted = count_parts("a" * 140 + "<-short->")
    assert counted.length == 140 + SHORT_URL_LENGTH
    assert counted.parts == 2


def test_description_names_the_characters_that_force_unicode():
    text = count_parts("Don\u2019t miss it 😀").describe()
    assert "UCS-2" in text
    assert "U+2019" in text
    assert "U+1F600" in text


@pytest.mark.parametrize(
    ("pushtype", "sender", "parts"),
    [("marketing", "MyShop", 2), ("marketing", None, 1), ("alert", "MyShop", 1)],
)
def test_the_estimate_counts_the_stop_mention_of_a_marketing_sms_with_a_sender(
    requests_mock, monkeypatch, pushtype, sender, parts
):
    """A 150-character marketing text with a custom sender: 150 + 16 > 160, so two parts per recipient."""
    from airflow_provider_sms.operators.sms import SmsSimulateOperator

    from .conftest import BASE_URL, connection_json

    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", connection_json())
    requests_mock.post(
        f"{BASE_URL}/send/simulate",
        json={"status": 1, "message": "OK", "cost": parts, "credits": 99, "total": 1, "sent": 1},
    )
    message = {"text": "a" * 150, "pushtype": pushtype, "delay": "2030-06-04 10:00:00"}
    if sender:
        message["sender"] = sender

    result = SmsSimulateOperator(task_id="sim", message=message, recipients=["33612000001"]).execute({})

    assert result["estimate"]["parts"] == parts
    assert result["estimate"]["length"] == 150 + (16 if parts == 2 else 0)


def test_a_marker_mismatch_names_both_ways_to_fix_it():
    assert marker_mismatch("Sale tonight: <-short->", 0) == (
        "text has 1 '<-short->' marker(s) but 0 link(s) are given: add the missing URL(s) to links, one "
        "per marker in order (each marker becomes a short URL to its link), or remove the marker(s) "
        "without a link from the text"
    )
    assert marker_mismatch("Sale tonight", 1) == (
        "text has 0 '<-short->' marker(s) but 1 link(s) are given: put a <-short-> marker in the text "
        "where each link's short URL goes, or remove the link(s) without a marker from links"
    )
    assert marker_mismatch("Sale tonight: <-short->", 1) is None
