"""Validation rules of the models and edge cases of the codec."""

from __future__ import annotations

import pytest

from airflow_provider_sms import codec
from airflow_provider_sms._validation import build
from airflow_provider_sms.exceptions import SmsValidationError
from airflow_provider_sms.models import CampaignResult, ListRef, Message, Recipient
from airflow_provider_sms.phone_numbers import normalize_number
from airflow_provider_sms.recipients import parse_lists, parse_recipients
from airflow_provider_sms.sandbox import wire


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("33612345678", "33612345678"),
        ("+33 6 12 34 56 78", "33612345678"),
        ("+33 (0)6", None),
        ("0033 6.12.34.56.78", "33612345678"),
        ("+1 (415) 555-0100", "14155550100"),
        (33612345678, "33612345678"),
        ("0612345678", None),
        ("+33 6 12 AB 56 78", None),
        ("336", None),
        ("3361234567890123", None),
        ("", None),
        (True, None),
        (3.3e10, None),
    ],
)
def test_number_normalization(raw, expected):
    if expected is None:
        with pytest.raises(ValueError, match="number"):
            normalize_number(raw)
    else:
        assert normalize_number(raw) == expected


def test_parse_recipients_keeps_plain_numbers_as_strings_and_gsmsmsid_as_recipient():
    prepared = parse_recipients(
        ["33612345678", {"value": "+33611111111", "gsmsmsid": 7}, Recipient(value="33622222222")]
    )
    assert prepared == ["33612345678", Recipient(value="33611111111", gsmsmsid="7"), "33622222222"]


def test_parse_recipients_refuses_gsmsmsid_where_not_valid():
    with pytest.raises(SmsValidationError, match="gsmsmsid is only valid on /send"):
        parse_recipients([{"value": "33612345678", "gsmsmsid": "a"}], allow_gsmsmsid=False)


def test_single_string_is_one_recipient_not_characters():
    assert parse_recipients("33612345678") == ["33612345678"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [(12, 12), ("12", 12), (" 7 ", 7), ({"value": 3}, 3)],
)
def test_list_ids(value, expected):
    assert parse_lists([value]) == [ListRef(value=expected)]


@pytest.mark.parametrize("value", ["abc", 1.5, True, None, "1e3"])
def test_bad_list_ids_name_the_field(value):
    with pytest.raises(SmsValidationError, match=r"lists\[0\]"):
        parse_lists([value])


@pytest.mark.parametrize(
    ("message", "match"),
    [
        ({"text": "a <-short-> b"}, "1 '<-short->' marker"),
        ({"text": "a", "links": ["https://x.example.com"]}, "0 '<-short->' marker"),
        ({"text": "a <-short->", "links": ["ftp://x.example.com"]}, "not an absolute http"),
        ({"text": "a", "pushtype": "promo"}, "pushtype"),
        ({"text": "   "}, "blank"),
        ({"text": "bell \x07"}, "control character"),
        ({"text": "a", "delay": "tomorrow"}, "delay"),
        ({"text": "a", "delay": "2031-05-01T10:00:00"}, "no timezone"),
    ],
)
def test_message_rules_name_field_and_rule(message, match):
    with pytest.raises(SmsValidationError, match=match) as info:
        build(Message, message, "message")
    assert str(info.value).startswith("message")


def test_message_delay_is_converted_to_paris():
    message = build(Message, {"text": "a", "delay": "2031-07-01T08:00:00Z"}, "message")
    assert message.delay == "2031-07-01 10:00:00"


TRICKY_TEXT = "Fin ]]> & <tag> \"quoted\" 'single' 😀 שלום مرحبا\nline2\ttab"


@pytest.mark.parametrize("fmt", ["json", "xml"])
def test_tricky_text_and_links_round_trip(fmt):
    message = Message(
        text=TRICKY_TEXT + " <-short->",
        pushtype="alert",
        links=['https://shop.example.com/a?x=1&y=<2>&z="3"'],
    )
    body = codec.encode_send(message, ["33612345678", Recipient(value="33611111111", gsmsmsid='a"<&>')], fmt)

    request = wire.decode_request(body, fmt)

    assert Message.model_validate(request.message) == message
    assert [Recipient.model_validate(r) for r in request.recipients] == [
        Recipient(value="33612345678"),
        Recipient(value="33611111111", gsmsmsid='a"<&>'),
    ]


@pytest.mark.parametrize("fmt", ["json", "xml"])
def test_campaign_result_response_round_trip(fmt):
    result = CampaignResult(
        status=1, message="OK", ticket="99", cost=3, credits=7, total=5, sent=3, invalid=2
    )
    assert codec.decode_campaign_result(wire.encode_response(result, fmt), fmt) == result


def test_xml_numbers_become_ints():
    body = (
        b"<response><status>1</status><message>OK</message><cost>12</cost><credits>3</credits>"
        b"<total>1</total><sent>1</sent></response>"
    )
    result = codec.decode_campaign_result(body, "xml")
    assert (result.cost, result.credits) == (12, 3)
