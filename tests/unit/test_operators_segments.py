"""SMS parts: GSM-7 160/153, Unicode 70/67, extension characters, short-URL markers."""

from __future__ import annotations

import pytest

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
