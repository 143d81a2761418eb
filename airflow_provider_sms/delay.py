"""Turn whatever a DAG author gives as ``delay`` into the API's ``Y-m-d H:i:s`` in Europe/Paris.

Accepted: a timezone-aware ``datetime`` (any zone), a pendulum ``DateTime``, an ISO-8601 string with
an offset (what ``{{ data_interval_end }}`` renders to), or the API's own ``Y-m-d H:i:s`` string,
taken as Paris wall-clock time. Naive datetimes, Paris times that do not exist (spring DST gap) and
times in the past are errors. A Paris time that occurs twice (autumn overlap) is read as its first
occurrence (summer time, UTC+02:00), and a warning says so.
"""

from __future__ import annotations

import datetime as dt
import logging
import re

import pendulum

from airflow_provider_sms.exceptions import SmsValidationError

PARIS = pendulum.timezone("Europe/Paris")
API_FORMAT = "%Y-%m-%d %H:%M:%S"
_API_PATTERN = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}")

log = logging.getLogger(__name__)
# Read as "when in Paris?": the service sends at Paris wall-clock times, so that is the zone to name.
NAIVE_HINT = (
    "naive datetime (no time zone), so the time it means is unknown; give an aware datetime in "
    "Europe/Paris, e.g. pendulum.datetime(2026, 12, 1, 10, 0, tz='Europe/Paris'), or the string "
    "'2026-12-01 10:00:00' (Y-m-d H:i:s), which is read as Paris time"
)


def paris_wall_time(naive: dt.datetime, *, field: str = "delay") -> pendulum.DateTime:
    """Read a naive wall-clock time as Europe/Paris, refusing the DST gap and resolving the overlap."""
    first = naive.replace(tzinfo=PARIS, fold=0)
    second = naive.replace(tzinfo=PARIS, fold=1)
    round_trip = first.astimezone(dt.timezone.utc).astimezone(PARIS).replace(tzinfo=None)
    if round_trip != naive:
        message = (
            f"{field}={naive.strftime(API_FORMAT)!r}: this time does not exist in Europe/Paris "
            "(clocks jump forward at the spring DST change); pick a time outside the gap"
        )
        raise SmsValidationError.for_field(field, message)
    if first.utcoffset() != second.utcoffset():
        log.warning(
            "%s %s occurs twice in Europe/Paris (autumn DST change); using the first occurrence, "
            "%s UTC (summer time), not %s UTC",
            field,
            naive.strftime(API_FORMAT),
            first.astimezone(dt.timezone.utc).strftime(API_FORMAT),
            second.astimezone(dt.timezone.utc).strftime(API_FORMAT),
        )
    return pendulum.instance(first.astimezone(dt.timezone.utc)).in_timezone(PARIS)


def parse_instant(value: object, *, field: str = "delay") -> pendulum.DateTime:
    """Return ``value`` as an aware pendulum DateTime in Europe/Paris, past or future alike.

    The forms and rules of ``delay`` without the "not in the past" one: also what ``since`` of the
    NPAI sensor takes. Raises SmsValidationError naming ``field``.

    :param value: a datetime, a pendulum DateTime, an ISO-8601 string with offset, or ``Y-m-d H:i:s``.
    :param field: the parameter's name, for error messages and the DST-overlap warning.
    """
    if isinstance(value, dt.datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise SmsValidationError.for_value(field, value, NAIVE_HINT)
        moment = pendulum.instance(value.astimezone(dt.timezone.utc)).in_timezone(PARIS)
    elif isinstance(value, str):
        text = value.strip()
        if _API_PATTERN.fullmatch(text):
            try:
                naive = dt.datetime.strptime(text, API_FORMAT)
            except ValueError as exc:
                raise SmsValidationError.for_value(
                    field, value, f"not a real date and time ({exc})"
                ) from None
            moment = paris_wall_time(naive, field=field)
        else:
            try:
                parsed = pendulum.parse(text, tz=None, strict=False)
            except (ValueError, pendulum.parsing.exceptions.ParserError) as exc:
                raise SmsValidationError.for_value(
                    field, value, f"not a date; use ISO-8601 with an offset or 'Y-m-d H:i:s' ({exc})"
                ) from None
            if not isinstance(parsed, dt.datetime) or parsed.tzinfo is None:
                raise SmsValidationError.for_value(
                    field,
                    value,
                    "no timezone; use ISO-8601 with an offset (2026-05-01T10:00:00+02:00) "
                    "or 'Y-m-d H:i:s', which is read as Europe/Paris",
                )
            moment = pendulum.instance(parsed).in_timezone(PARIS)
    else:
        raise SmsValidationError.for_value(field, value, "expected a timezone-aware datetime or a string")
    return moment


def parse_delay(value: object, *, now: dt.datetime | None = None, field: str = "delay") -> pendulum.DateTime:
    """Return ``value`` as an aware pendulum DateTime in Europe/Paris, or raise SmsValidationError.

    :param value: a datetime, a pendulum DateTime, an ISO-8601 string with offset, or ``Y-m-d H:i:s``.
    :param now: the reference for the "not in the past" rule (defaults to the current time).
    :param field: the argument's name, as the user gave it, for error messages.
    """
    moment = parse_instant(value, field=field)
    if not (isinstance(value, str) and _API_PATTERN.fullmatch(value.strip())):
        # An exact instant whose Paris wall-clock string (what the API takes) is ambiguous;
        # a 'Y-m-d H:i:s' given as such was already resolved and reported by paris_wall_time.
        _warn_if_ambiguous(moment)
    reference = now or pendulum.now("UTC")
    if moment < reference:
        raise SmsValidationError.for_value(
            field,
            value,
            f"in the past ({moment.strftime(API_FORMAT)} Europe/Paris is before now, "
            f"{pendulum.instance(reference).in_timezone(PARIS).strftime(API_FORMAT)})",
        )
    return moment


def format_delay(moment: dt.datetime) -> str:
    """Format an aware datetime as the API's ``Y-m-d H:i:s`` in Europe/Paris."""
    return pendulum.instance(moment).in_timezone(PARIS).strftime(API_FORMAT)


def _warn_if_ambiguous(moment: pendulum.DateTime) -> None:
    # An instant given with an offset is exact, but the wall-clock string the API takes is not.
    if moment.replace(fold=0).utcoffset() != moment.replace(fold=1).utcoffset():
        log.warning(
            "delay %s Europe/Paris falls in the autumn DST overlap: the service receives a wall-clock "
            "time that occurs twice (you meant %s UTC)",
            moment.strftime(API_FORMAT),
            moment.in_timezone("UTC").strftime(API_FORMAT),
        )


def to_api_delay(value: object, *, now: dt.datetime | None = None, field: str = "delay") -> str | None:
    """Convert any accepted ``delay`` value to the API's string; ``None`` and ``""`` mean no delay.

    :param field: the argument's name, as the user gave it, for error messages.
    """
    if value is None or value == "":
        return None
    return format_delay(parse_delay(value, now=now, field=field))
