"""The task arguments' types, defaults and checks. Not public API.

Used when a DAG file is parsed (the operators, sensors and notifier check their literal arguments in
``__init__``) and when a task runs (the rendered templates; the send window checks its mode, the
transport a webhook id). DAG files import the task classes, which import this module and nothing else
of the provider, so that parsing a DAG file does not load the models, the codec or the HTTP client,
nor even the exceptions while the arguments are right. Keep it that way: at module level, no import
of the provider's other modules here; the checks of literal messages and delays import the two light
ones they need (``short_urls``, ``delay``) when a DAG file gives such a literal, and a wrong argument
imports the exceptions (:func:`invalid_value`, :func:`invalid_field`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Mapping
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    # The arguments' types exist for the type checker only: DAG files never pay for building them.
    from typing import Literal

    from airflow_provider_sms.exceptions import SmsValidationError

    SendWindowMode = Literal["postpone", "fail", "ignore"]
    OnCostExceeded = Literal["fail", "skip", "ask"]
    InvalidNumbers = Literal["fail", "skip"]
    OnDuplicate = Literal["fail", "skip", "send"]
    OnNothingSent = Literal["fail", "warn"]

SEND_WINDOW_MODES: tuple[str, ...] = ("postpone", "fail", "ignore")
# Numbers per POST /send. Large enough that 200,000 numbers take 20 requests, small enough that one
# request body stays near 300 KB (JSON) and a failed batch leaves little to check by hand.
DEFAULT_BATCH_SIZE = 10_000
# How long on_cost_exceeded="ask" waits for a person's answer before it takes "Do not send".
DEFAULT_APPROVAL_TIMEOUT = dt.timedelta(hours=24)
# SmsNotifier: an alert within this interval after the last one to a number is held for it and folded
# into the next. At most four SMS per number per hour: under the sandbox's anti-flood limit (five), the
# service's own being unpublished.
DEFAULT_FOLD_INTERVAL = dt.timedelta(minutes=15)
MAX_FOLD_INTERVAL = dt.timedelta(days=1)


def invalid_value(field: str, value: object, rule: str) -> SmsValidationError:
    """The error for ``field``'s bad ``value``, which names the field, the value and the ``rule``.

    The exceptions' module is imported here, once an argument is wrong: DAG files import the task
    classes, and the DAG processor imports them again at every parse, where nothing is wrong.
    """
    from airflow_provider_sms.exceptions import SmsValidationError

    return SmsValidationError.for_value(field, value, rule)


def invalid_field(field: str, message: str) -> SmsValidationError:
    """The error for a bad ``field``, whose ``message`` says the value and the rule (imported as above)."""
    from airflow_provider_sms.exceptions import SmsValidationError

    return SmsValidationError.for_field(field, message)


def is_template(value: object) -> bool:
    """Whether ``value`` is a Jinja template, checked once rendered (in ``execute()``) rather than now."""
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def check_literal_message(message: object, delay: object) -> None:
    """The checks of ``message`` and ``delay`` that need no rendering, made when the DAG file is parsed.

    A mistake in a literal (one marker per link, the delay's form) then shows as an import error of
    the DAG file instead of a failed run; templates, and values from XCom, are checked once rendered.
    The "not in the past" rule of ``delay`` waits for the run: it depends on when the task runs.

    :param message: the operator's ``message`` (a text, a dict or a ``Message``).
    :param delay: the operator's ``delay``.
    """
    text: object = message
    links: object = []
    message_delay: object = None
    if isinstance(message, Mapping):
        text, links, message_delay = message.get("text"), message.get("links") or [], message.get("delay")
    if (
        isinstance(text, str)
        and not is_template(text)
        and isinstance(links, (list, tuple))
        and all(isinstance(link, str) and not is_template(link) for link in links)
    ):
        from airflow_provider_sms.short_urls import marker_mismatch

        problem = marker_mismatch(text, len(links))
        if problem:
            field = "message.links" if links else "message.text"
            raise invalid_field(field, f"{field}: {problem}")
    for field, value in (("delay", delay), ("message.delay", message_delay)):
        if value not in (None, "") and (isinstance(value, (str, dt.datetime))) and not is_template(value):
            from airflow_provider_sms.delay import parse_instant

            parse_instant(value, field=field)


def check_send_window(value: object) -> SendWindowMode:
    """``value`` as a send-window mode, or SmsValidationError naming ``send_window``."""
    if value not in SEND_WINDOW_MODES:
        raise invalid_value("send_window", value, "use 'postpone', 'fail' or 'ignore'")
    return cast("SendWindowMode", value)


def check_fold_interval(value: object) -> dt.timedelta | None:
    """``value`` as SmsNotifier's fold interval (None when alerts are not folded: None or 0), or
    SmsValidationError naming ``fold_interval``."""
    if value is None or (isinstance(value, (int, dt.timedelta)) and not value):
        return None
    if not isinstance(value, dt.timedelta) or not dt.timedelta(0) < value <= MAX_FOLD_INTERVAL:
        raise invalid_value(
            "fold_interval",
            value,
            "use a datetime.timedelta of at most one day, or None (or 0) to send every alert unfolded",
        )
    return value


def check_fallback(value: object) -> None:
    """SmsValidationError naming ``fallback`` unless ``value`` is None or callable (an Airflow notifier, or
    a function taking the context)."""
    if value is not None and not callable(value):
        raise invalid_value(
            "fallback",
            value,
            "use an Airflow notifier (e.g. SlackNotifier(...)) or a callable taking the context",
        )


def check_on_cost_exceeded(value: object) -> OnCostExceeded:
    """``value`` as what a send does when a gate refuses it, or SmsValidationError (``on_cost_exceeded``).

    ``ask`` needs Airflow's human-in-the-loop (Airflow 3.1 and later): on Airflow 3.0 it is refused
    here, so a literal ``"ask"`` is an import error of the DAG file and a templated one fails the task
    before any request, with the same text.
    """
    if value not in ("fail", "skip", "ask"):
        raise invalid_value("on_cost_exceeded", value, "use 'fail', 'skip' or 'ask'")
    if value == "ask":
        from airflow_provider_sms._compat import airflow_3_1_or_later

        if not airflow_3_1_or_later():
            from airflow import __version__

            raise invalid_value(
                "on_cost_exceeded",
                value,
                "'ask' waits for a person's answer through Airflow's human-in-the-loop, which needs "
                f"Airflow 3.1 or later (this is Airflow {__version__}); use 'fail' or 'skip'",
            )
    return value  # narrowed to OnCostExceeded by the tests above


def check_approvers(value: object) -> list[dict[str, str]] | None:
    """``value`` as the Airflow users who may answer an approval, or SmsValidationError (``approvers``).

    Each approver is a user as Airflow's auth manager knows it: ``{"id": ..., "name": ...}`` (the
    FAB auth manager's id is the user's number), or a user name alone, which is the id with the simple
    auth manager. None or an empty list: anyone who may answer the DAG's required actions.
    """
    if value is None or value == [] or value == ():
        return None
    items = [value] if isinstance(value, (str, Mapping)) else value
    users: list[dict[str, str]] = []
    for item in items if isinstance(items, (list, tuple)) else [items]:
        if isinstance(item, str) and item.strip():
            users.append({"id": item.strip(), "name": item.strip()})
        elif isinstance(item, Mapping) and str(item.get("id") or "").strip():
            user_id = str(item["id"]).strip()
            users.append({"id": user_id, "name": str(item.get("name") or user_id)})
        else:
            raise invalid_value(
                "approvers",
                item,
                "each approver is an Airflow user: a user name (simple auth manager) or a dict "
                "{'id': ..., 'name': ...} with the id the auth manager gives the user",
            )
    return users


def check_approval_timeout(value: object) -> dt.timedelta | None:
    """``value`` as how long an approval waits (a positive timedelta, or None: no limit)."""
    if value is None:
        return None
    if not isinstance(value, dt.timedelta) or value <= dt.timedelta(0):
        raise invalid_value(
            "approval_timeout", value, "must be a positive datetime.timedelta, or None to wait without limit"
        )
    return value


def check_on_duplicate(value: object) -> OnDuplicate:
    """``value`` as what a send does when the same campaign was already sent, or SmsValidationError."""
    if value not in ("fail", "skip", "send"):
        raise invalid_value("on_duplicate", value, "use 'fail', 'skip' or 'send'")
    return value  # narrowed to OnDuplicate by the test above


def check_on_nothing_sent(value: object) -> OnNothingSent:
    """``value`` as what a send does when the service sent to no number, or SmsValidationError.

    Checked before any request, like a gate: a value that rendered to anything else (``""``, ``None``)
    refuses to send rather than dropping the check.
    """
    if value not in ("fail", "warn"):
        raise invalid_value("on_nothing_sent", value, "use 'fail' or 'warn'")
    return value  # narrowed to OnNothingSent by the test above


def check_batch_size(value: object) -> int:
    """``value`` as a batch size (an integer >= 1), or SmsValidationError naming ``batch_size``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise invalid_value("batch_size", value, "must be an integer >= 1")
    return value


def check_min_entries(value: object) -> int:
    """``value`` as the NPAI sensor's ``min_entries`` (an integer >= 1), or SmsValidationError."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise invalid_value("min_entries", value, "must be an integer of at least 1")
    return value


def check_webhook_id(value: object) -> str:
    """``value`` as a webhook id (not blank, no ``/``), or SmsValidationError naming ``webhook_id``."""
    text = str(value).strip()
    if not text or "/" in text:
        raise invalid_value("webhook_id", text, "give the webhook's id")
    return text


def check_audience(operator: str, audience: str | None, *, recipients: object, lists: object) -> None:
    """An operator addressed to ``audience`` (``recipients``, ``lists`` or either) got exactly that.

    :param operator: the operator's class name, for the message.
    """
    given = {"recipients": recipients is not None, "lists": lists is not None}
    if audience is None:
        return  # either one: checked once rendered, with the values
    other = "lists" if audience == "recipients" else "recipients"
    if given[other]:
        hint = "SmsSendListsOperator" if other == "lists" else "SmsSendOperator"
        raise invalid_field(
            other, f"{other}: {operator} sends to {audience} only; use {hint} to send to {other}"
        )
    if not given[audience]:
        raise invalid_field(audience, f"{audience}: {operator} needs {audience}; none given")


def check_invalid_numbers(value: object) -> InvalidNumbers:
    """``value`` as what to do with numbers failing local validation, or SmsValidationError."""
    if value not in ("fail", "skip"):
        raise invalid_value("invalid_numbers", value, "use 'fail' or 'skip'")
    return value  # narrowed to InvalidNumbers by the test above


def check_final_share(value: object) -> float:
    """``value`` as the delivery sensor's ``min_final_share`` (0 < share <= 1), or SmsValidationError."""
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise invalid_value(
            "min_final_share", value, "must be a share of the messages, above 0 and at most 1 (e.g. 0.95)"
        )
    return float(value)


def check_wait_has_count(campaign: object, expected: object) -> None:
    """Refuse, when the DAG is parsed, a delivery wait that can never know how many messages were sent.

    With ``expected`` None the count comes from the send's result (``campaign=send.output``). A literal
    id or list of ids, or one XCom of the send such as ``send.output["ticket"]``, carries none; a
    template is only known when the task runs (then the wait fails before its first request).
    """
    if expected is not None:
        return
    from airflow.sdk import XComArg

    if isinstance(campaign, XComArg):
        key = getattr(campaign, "key", "return_value")
        if key == "return_value":
            return
        given = f"an XCom of key {key!r} (e.g. send.output[{key!r}])"
    elif isinstance(campaign, (int, list, tuple)) or (isinstance(campaign, str) and "{{" not in campaign):
        given = f"campaign={campaign!r}"
    else:
        return
    raise invalid_field(
        "expected",
        f"expected: {given} gives campaign ids but not how many messages were sent; pass "
        "campaign=send.output (the send's result, which carries the count) or give expected",
    )
