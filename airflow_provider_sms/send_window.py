"""The marketing send window: the one place that decides when a ``marketing`` SMS may be sent.

The rule (docs/service-facts.md, "Marketing rules"): marketing SMS only from 08:00 to 20:00
Europe/Paris wall-clock time, Monday to Saturday, never on Sundays or French public holidays (from
the ``holidays`` package); 20:00 itself is outside. Alerts may be sent at any time and are never moved.

It applies to the *effective send time*: the message's ``delay``, or now when there is none. The
operators and the notifier call :func:`apply_marketing_rules` on the final message before any request;
the sandbox calls :func:`next_allowed` to refuse what breaks the rule, as the service would.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
from typing import TYPE_CHECKING, Any

import pendulum

from airflow_provider_sms._task_arguments import check_send_window
from airflow_provider_sms.delay import API_FORMAT, PARIS, format_delay
from airflow_provider_sms.exceptions import SmsValidationError
from airflow_provider_sms.sms_parts import (
    PER_PART,
    SINGLE,
    STOP_MENTION_LENGTH,
    count_parts,
    has_stop_mention,
)

if TYPE_CHECKING:
    from collections.abc import Container

    from airflow_provider_sms.models import Message

OPENS = dt.time(8, 0)
CLOSES = dt.time(20, 0)
RULE = (
    "marketing SMS may only be sent 08:00-20:00 Europe/Paris time, Monday to Saturday, "
    "never on Sundays or French public holidays"
)
# Sundays and public holidays never make more than a few closed days in a row; a bound keeps the
# search finite whatever the holiday data says.
_MAX_CLOSED_DAYS = 14

log = logging.getLogger(__name__)
# The task's logger (a Logger or, in the Task SDK, a structlog-style bound logger) or this module's.
Logger = Any


@functools.lru_cache(maxsize=32)
def _french_holidays(year: int) -> Container[dt.date]:
    # Imported here: ``holidays`` is slow to import, which every DAG file using the operators would pay
    # at parse time; only a marketing message's check needs it.
    import holidays

    # One table per year (metropolitan France: the package's default subdivision). The language is
    # given: left to the library, the names follow the interpreter and locale ("Noël" on Python 3.13,
    # "Christmas Day" on 3.11), and a reason logged or returned must not.
    return holidays.country_holidays("FR", years=year, language="en_US")


def is_sending_day(day: dt.date) -> bool:
    """Whether marketing SMS may be sent on ``day``: Monday to Saturday, not a French public holiday."""
    return day.weekday() != 6 and day not in _french_holidays(day.year)


def is_allowed(moment: dt.datetime) -> bool:
    """Whether a marketing SMS may be sent at ``moment`` (an aware datetime, any zone)."""
    paris = pendulum.instance(moment).in_timezone(PARIS)
    return is_sending_day(paris.date()) and OPENS <= paris.time() < CLOSES


def next_allowed(moment: dt.datetime) -> pendulum.DateTime:
    """``moment`` itself when it is inside the window, else the next opening (08:00 Paris wall clock).

    08:00 is never in a DST change (those happen at 02:00-03:00), so the opening always exists once.

    :param moment: an aware datetime, any zone.
    """
    paris = pendulum.instance(moment).in_timezone(PARIS)
    if is_allowed(paris):
        return paris
    day = paris.date() if paris.time() < OPENS else paris.date() + dt.timedelta(days=1)
    for _ in range(_MAX_CLOSED_DAYS):
        if is_sending_day(day):
            return pendulum.datetime(day.year, day.month, day.day, OPENS.hour, OPENS.minute, tz=PARIS)
        day += dt.timedelta(days=1)
    raise RuntimeError(f"no day open to marketing SMS within {_MAX_CLOSED_DAYS} days of {day}")


def why_closed(moment: dt.datetime) -> str:
    """Why marketing SMS may not be sent at ``moment`` (outside the window), in a few words."""
    paris = pendulum.instance(moment).in_timezone(PARIS)
    holiday = _french_holidays(paris.year).get(paris.date()) if paris.weekday() != 6 else None  # type: ignore[attr-defined]
    if paris.weekday() == 6:
        return "it is a Sunday"
    if holiday:
        return f"it is a French public holiday ({holiday})"
    return "it is before 08:00" if paris.time() < OPENS else "it is 20:00 or later"


def postponement(
    requested: Message, sent: Message, *, now: dt.datetime | None = None
) -> dict[str, str] | None:
    """What the send window changed between the ``requested`` message and the one ``sent``, if anything.

    :return: ``{"requested", "moved_to", "reason"}`` (times as ``Y-m-d H:i:s``, Paris) when the
        delay was moved, else None. What the operators return in XCom as ``send_window``.
    """
    if sent.delay == requested.delay or sent.delay is None:
        return None
    asked = effective_send_time(requested, now=now)
    return {
        "requested": asked.strftime(API_FORMAT) if requested.delay else f"now ({asked.strftime(API_FORMAT)})",
        "moved_to": sent.delay,
        "reason": f"{why_closed(asked)}: {RULE} (send_window='postpone')",
    }


def describe(moment: dt.datetime) -> str:
    """A moment as a log reads it: ``Saturday 2030-06-01 20:30:00 Europe/Paris``."""
    paris = pendulum.instance(moment).in_timezone(PARIS)
    return f"{paris.format('dddd')} {paris.strftime(API_FORMAT)} Europe/Paris"


def _now() -> pendulum.DateTime:
    # The clock, in one place: tests of callers that take no ``now`` (the notifier) replace it.
    return pendulum.now(PARIS)


def effective_send_time(message: Message, *, now: dt.datetime | None = None) -> pendulum.DateTime:
    """When ``message`` would go out: its ``delay`` (Paris wall clock), or ``now`` when it has none.

    :param message: a validated message (``delay`` as the API's ``Y-m-d H:i:s``, or None).
    :param now: the current time (injected by tests); defaults to the clock.
    """
    if message.delay:
        # Already checked by Message (a real Paris time); an autumn-overlap time was reported there.
        return pendulum.from_format(message.delay, "YYYY-MM-DD HH:mm:ss", tz=PARIS)
    return pendulum.instance(now or _now()).in_timezone(PARIS)


def apply_send_window(
    message: Message,
    mode: object,
    *,
    now: dt.datetime | None = None,
    logger: Logger | None = None,
) -> Message:
    """Return the message to send: a marketing one outside the window postponed, refused or kept.

    Alerts, and marketing messages whose effective send time (``delay``, or ``now`` when there is
    none) is inside the window, are returned unchanged. Otherwise, by ``mode``: ``postpone`` returns a
    copy whose ``delay`` is the next allowed instant and logs the old and new times; ``fail`` raises
    SmsValidationError naming the rule and the next allowed time; ``ignore`` returns it unchanged
    (for accounts with another agreement), saying so in the log.

    :param message: the validated message (its ``delay`` is the API's string, Paris time).
    :param mode: ``postpone``, ``fail`` or ``ignore`` (checked here, as it may come from a template).
    :param now: the current time (injected by tests); defaults to the clock.
    :param logger: where to log (the task's logger); defaults to this module's.
    """
    mode = check_send_window(mode)
    logger = logger or log
    if message.pushtype != "marketing":
        return message
    requested = effective_send_time(message, now=now)
    allowed = next_allowed(requested)
    if allowed == requested:
        return message
    when = f"delay {describe(requested)}" if message.delay else f"sending now ({describe(requested)})"
    if mode == "fail":
        text = (
            f"send_window='fail': {when} is outside the marketing send window ({RULE}); the next allowed "
            f"time is {describe(allowed)}: set delay to it or later, or send_window='postpone'"
        )
        raise SmsValidationError.for_field("delay", text)
    if mode == "ignore":
        logger.info("Marketing SMS: %s is outside the send window; sent as is (send_window='ignore')", when)
        return message
    logger.warning(
        "Marketing SMS: %s is outside the send window (%s); postponed to %s (send_window='postpone')",
        when,
        RULE,
        describe(allowed),
    )
    return message.model_copy(update={"delay": format_delay(allowed)})


def unsubscribe_length_warning(message: Message) -> str | None:
    """The warning to log when the STOP mention adds an SMS part to a marketing message, else None.

    With a custom sender the service appends a mention of :data:`STOP_MENTION_LENGTH`
    characters to a marketing SMS; when the text then needs more parts than it does alone, each
    recipient costs more than the author's count suggests.

    :param message: the validated message, ``sender`` filled from the connection's default if any.
    """
    if not has_stop_mention(message.pushtype, message.sender):
        return None
    alone = count_parts(message.text)
    with_mention = count_parts(message.text, stop_mention=True)
    if with_mention.parts == alone.parts:
        return None
    capacity = SINGLE[alone.encoding] if alone.parts == 1 else PER_PART[alone.encoding] * alone.parts
    return (
        f"Marketing SMS with custom sender {message.sender!r}: the service appends a "
        f"{STOP_MENTION_LENGTH}-character unsubscribe (STOP) mention, so each recipient gets "
        f"{with_mention.parts} SMS parts, not {alone.parts} ({alone.encoding}, {alone.length} + "
        f"{STOP_MENTION_LENGTH} characters); shorten the text by {with_mention.length - capacity} "
        f"characters to keep {alone.parts}"
    )


def apply_marketing_rules(
    message: Message,
    send_window: object,
    *,
    now: dt.datetime | None = None,
    logger: Logger | None = None,
) -> Message:
    """What the operators and the notifier call on the final message, before any request.

    Applies the send window (:func:`apply_send_window`) and logs the unsubscribe-mention length hint
    (:func:`unsubscribe_length_warning`). Alerts pass through unchanged.

    :param message: the validated message.
    :param send_window: ``postpone``, ``fail`` or ``ignore``.
    :param now: the current time (injected by tests); defaults to the clock.
    :param logger: where to log (the task's logger); defaults to this module's.
    """
    message = apply_send_window(message, send_window, now=now, logger=logger)
    hint = unsubscribe_length_warning(message)
    if hint:
        (logger or log).warning("%s", hint)
    return message
