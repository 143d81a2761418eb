"""delay: any accepted form -> the API's 'Y-m-d H:i:s' in Europe/Paris (docs/hook.md, "Delay")."""

from __future__ import annotations

import datetime as dt
import logging
from zoneinfo import ZoneInfo

import jinja2
import pendulum
import pytest

from airflow_provider_sms.delay import parse_delay, to_api_delay
from airflow_provider_sms.exceptions import SmsValidationError
from airflow_provider_sms.models import Message

# A fixed "now" so that 2026 dates stay in the future whatever day the suite runs.
NOW = pendulum.datetime(2026, 1, 1, tz="UTC")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        # Summer time in Paris: UTC+02:00.
        ("2026-07-01T10:00:00+00:00", "2026-07-01 12:00:00"),
        (dt.datetime(2026, 7, 1, 10, 0, tzinfo=dt.timezone.utc), "2026-07-01 12:00:00"),
        # Winter time in Paris: UTC+01:00.
        ("2026-01-15T10:00:00Z", "2026-01-15 11:00:00"),
        (pendulum.datetime(2026, 1, 15, 10, tz="UTC"), "2026-01-15 11:00:00"),
        # New York (UTC-04:00 in July, UTC-05:00 in January).
        (dt.datetime(2026, 7, 1, 8, 0, tzinfo=ZoneInfo("America/New_York")), "2026-07-01 14:00:00"),
        (pendulum.datetime(2026, 1, 15, 5, tz="America/New_York"), "2026-01-15 11:00:00"),
        ("2026-01-15T05:00:00-05:00", "2026-01-15 11:00:00"),
        # The API's own form is Paris wall-clock time, kept as is.
        ("2026-07-01 12:00:00", "2026-07-01 12:00:00"),
        # Between the two DST changes of the New York and Paris springs (offsets differ by 5 h, not 6).
        (pendulum.datetime(2026, 3, 20, 10, tz="America/New_York"), "2026-03-20 15:00:00"),
    ],
)
def test_delay_is_converted_to_paris_wall_clock_time(value, expected):
    assert to_api_delay(value, now=NOW) == expected


def test_spring_gap_is_rejected_with_the_rule():
    with pytest.raises(SmsValidationError, match="does not exist in Europe/Paris") as info:
        to_api_delay("2026-03-29 02:30:00", now=NOW)
    assert info.value.errors[0][0] == "delay"


def test_autumn_overlap_is_resolved_to_the_first_occurrence_and_logged(caplog):
    caplog.set_level(logging.WARNING, logger="airflow_provider_sms.delay")

    moment = parse_delay("2026-10-25 02:30:00", now=NOW)

    assert moment.in_timezone("UTC") == pendulum.datetime(2026, 10, 25, 0, 30, tz="UTC")
    assert moment.utcoffset() == dt.timedelta(hours=2)
    assert "occurs twice" in caplog.text
    assert "00:30:00 UTC" in caplog.text


def test_an_exact_instant_in_the_autumn_overlap_is_kept_and_logged(caplog):
    caplog.set_level(logging.WARNING, logger="airflow_provider_sms.delay")
    # 01:30 UTC is the second 02:30 in Paris (winter time).
    assert to_api_delay("2026-10-25T01:30:00+00:00", now=NOW) == "2026-10-25 02:30:00"
    assert "autumn DST overlap" in caplog.text
    assert "01:30:00 UTC" in caplog.text


def test_naive_datetime_is_rejected():
    with pytest.raises(SmsValidationError, match="naive datetime"):
        to_api_delay(dt.datetime(2026, 7, 1, 10, 0), now=NOW)


@pytest.mark.parametrize("value", ["2026-07-01T10:00:00", "tomorrow", "2026-02-30 10:00:00", 1751364000])
def test_strings_without_zone_or_not_dates_are_rejected(value):
    with pytest.raises(SmsValidationError, match="delay="):
        to_api_delay(value, now=NOW)


@pytest.mark.parametrize("value", ["2025-12-31 23:59:59", "2025-12-31T22:00:00+00:00"])
def test_past_times_are_rejected(value):
    with pytest.raises(SmsValidationError, match="in the past"):
        to_api_delay(value, now=NOW)


def test_a_jinja_rendered_data_interval_end_is_accepted():
    # Jinja renders a pendulum DateTime with its offset (str()): what a templated delay receives.
    rendered = jinja2.Template("{{ data_interval_end }}").render(
        data_interval_end=pendulum.datetime(2026, 6, 1, 6, 0, tz="UTC")
    )
    assert rendered == "2026-06-01 06:00:00+00:00"
    assert to_api_delay(rendered, now=NOW) == "2026-06-01 08:00:00"
    shifted = jinja2.Template("{{ data_interval_end.add(hours=2) }}").render(
        data_interval_end=pendulum.datetime(2026, 12, 1, 6, 0, tz="UTC")
    )
    assert to_api_delay(shifted, now=NOW) == "2026-12-01 09:00:00"


@pytest.mark.parametrize("value", [None, ""])
def test_no_delay(value):
    assert to_api_delay(value, now=NOW) is None


def test_message_validates_its_delay_with_the_same_rules():
    assert Message(text="Hi", delay="2099-07-01T10:00:00+00:00").delay == "2099-07-01 12:00:00"
    with pytest.raises(ValueError, match="naive datetime"):
        Message(text="Hi", delay=dt.datetime(2099, 7, 1, 10, 0))
