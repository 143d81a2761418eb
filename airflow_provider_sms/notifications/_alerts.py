"""What SmsNotifier does with a notification: fold an alert into the next one to the same numbers, send
it once, and hand one that reached nobody to the fallback. Internal.

- **Folding** (``fold_interval``): the claim store decides, in one transaction per alert, which of its
  numbers got an alert within the interval (:func:`airflow_provider_sms.api_server.claims.fold`). For
  those the alert is held; the others get it now, carrying the alerts held for them since. A store that
  does not answer never holds an alert: it is sent unfolded, and the log says why.
- **Not delivered**: a notification that reached nobody (every number filtered, refused, the service
  unreachable, the outcome unknown, bad input) is counted (``notifier.not_delivered``) and handed to the
  fallback with the same context, plus ``sms_alert`` (:data:`ALERT_CONTEXT_KEY`). One log line says what
  happened to it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from airflow_provider_sms import metrics

if TYPE_CHECKING:
    import datetime as dt
    from collections.abc import Callable, Mapping, Sequence

    from airflow.providers.common.compat.sdk import Context

    from airflow_provider_sms._task_arguments import SendWindowMode
    from airflow_provider_sms.api_server.claims import FoldAnswer, FoldGroup
    from airflow_provider_sms.hooks.sms import SmsHook
    from airflow_provider_sms.models import CampaignResult, Message, PushType, Recipient
    from airflow_provider_sms.send_window import Logger

# The context key a fallback's templates read: what happened to the SMS (``{{ sms_alert.text }}``...).
ALERT_CONTEXT_KEY = "sms_alert"
# The quotes of held alerts an SMS carries, all together at most this long (the rest are counted).
CARRIED_TEXT_LENGTH = 200
# What a notification that reached nobody is counted as, by the error that stopped it (the first
# match); any other error is "error".
_REASONS = (
    ("SmsMaybeSentError", "maybe_sent"),
    ("SmsTransportError", "unreachable"),
    ("SmsValidationError", "invalid"),
    ("SmsApiError", "refused"),
)


class SmsNotifier(Protocol):
    """What this module reads of an :class:`~airflow_provider_sms.notifications.sms.SmsNotifier`, its
    templates rendered (its attributes: see that class)."""

    @property
    def text(self) -> str: ...
    @property
    def recipients(self) -> Any: ...
    @property
    def pushtype(self) -> PushType: ...
    @property
    def sms_conn_id(self) -> str: ...
    @property
    def sender(self) -> str | None: ...
    @property
    def send_window(self) -> SendWindowMode: ...
    @property
    def fallback(self) -> Callable[[Context], Any] | None: ...
    @property
    def fold_interval(self) -> dt.timedelta | None: ...
    @property
    def hook(self) -> SmsHook: ...
    @property
    def log(self) -> Logger: ...


@dataclass
class Undelivered:
    """A notification that reached nobody.

    :param reason: as ``notifier.not_delivered`` counts it: ``filtered``, ``flood``, ``refused``,
        ``unreachable``, ``maybe_sent``, ``invalid`` or ``error``.
    :param what: what happened, for the log line (e.g. ``0 of 2 numbers sent, 2 filtered (flood 2)``).
    :param error: what fails the notification when no fallback takes it.
    :param text: the SMS text, with the held alerts it carried.
    :param advice: what to do about it, true for the case ("" when the error says it).
    """

    reason: str
    what: str
    error: BaseException
    text: str
    advice: str = ""


@dataclass
class _Batch:
    """Numbers an SMS goes to now, its text, and how many held alerts it carries."""

    items: list[str | Recipient]
    text: str
    carried: int = 0


def deliver(notifier: SmsNotifier, context: Context) -> BaseException | None:
    """Send (or hold) ``notifier``'s rendered notification; hand one that reached nobody to its fallback.

    :returns: the error that fails the notification (no fallback, or the fallback failed too), with no
        frame of the provider's: the caller raises it.
    """
    undelivered = _send(notifier, context)
    if undelivered is None:
        return None
    conn_id, fallback = notifier.sms_conn_id, notifier.fallback
    metrics.count(
        "notifier.not_delivered", conn_id=conn_id, pushtype=notifier.pushtype, reason=undelivered.reason
    )
    if fallback is None:
        metrics.count("notifier.fallback", conn_id=conn_id, outcome="none")
        return undelivered.error
    head = (
        f"The SMS notification's outcome is unknown ({undelivered.what}): it may have reached its numbers"
        if undelivered.reason == "maybe_sent"
        else f"The SMS notification reached nobody ({undelivered.what})"
    )
    name = getattr(fallback, "__qualname__", None) or type(fallback).__name__
    context[ALERT_CONTEXT_KEY] = {  # type: ignore[literal-required]  # the fallback's own key
        "text": undelivered.text,
        "reason": undelivered.reason,
        "what": undelivered.what,
    }
    failure = _call_fallback(fallback, context)
    advice = f" {undelivered.advice}" if undelivered.advice else ""
    if failure is None:
        metrics.count("notifier.fallback", conn_id=conn_id, outcome="sent")
        if undelivered.reason == "maybe_sent":
            # Its numbers may have it too: told twice rather than lost.
            advice = " An alert whose outcome is unknown is told twice rather than lost." + advice
        notifier.log.warning("%s; handed to the fallback %s: sent.%s", head, name, advice)
        return None
    metrics.count("notifier.fallback", conn_id=conn_id, outcome="failed")
    notifier.log.error(
        "%s; handed to the fallback %s: failed (%s: %s).%s",
        head,
        name,
        type(failure).__name__,
        failure,
        advice,
    )
    return undelivered.error


def _call_fallback(fallback: Any, context: Context) -> Exception | None:
    """Call ``fallback`` with ``context``; its error, if any.

    An Airflow notifier renders its templates first, as ``BaseNotifier.__call__`` does, but its failure
    is returned on every Airflow (3.0's ``__call__`` logs it and returns). It renders on a copy: rendering
    replaces the templates, and the next alert of the process renders them again.
    """
    from airflow.providers.common.compat.sdk import BaseNotifier

    try:
        if isinstance(fallback, BaseNotifier):
            notifier = copy.copy(fallback)
            notifier._update_context(context)
            notifier.render_template_fields(context)
            notifier.notify(context)
        else:
            fallback(context)
    except Exception as exc:
        return exc
    return None


def _send(notifier: SmsNotifier, context: Context) -> Undelivered | None:
    """Fold and send the notification once; log it when it reached someone or was held.

    :returns: what happened when it reached nobody.
    """
    from airflow_provider_sms.exceptions import SmsNothingSentError, nothing_sent
    from airflow_provider_sms.models import FILTER_FIELDS
    from airflow_provider_sms.recipients import parse_recipients
    from airflow_provider_sms.send_window import apply_marketing_rules

    data: dict[str, Any] = {"text": notifier.text, "pushtype": notifier.pushtype}
    if notifier.sender:
        data["sender"] = notifier.sender
    try:
        message = apply_marketing_rules(
            notifier.hook.prepare_message(data), notifier.send_window, logger=notifier.log
        )
        items = parse_recipients(notifier.recipients)
    except Exception as exc:
        return _failed(exc, str(notifier.text))
    batches = _fold(notifier, context, message, items)
    results: list[CampaignResult] = []
    failures: list[tuple[_Batch, Exception]] = []
    tags = metrics.task_tags(
        context.get("ti"), conn_id=notifier.sms_conn_id, operator="SmsNotifier", pushtype=notifier.pushtype
    )
    for batch in batches:
        try:
            results.append(notifier.hook.send(message.model_copy(update={"text": batch.text}), batch.items))
        except Exception as exc:
            failures.append((batch, exc))
        else:
            metrics.send_answer(results[-1], **tags)
    text = batches[0].text if batches else message.text
    if any(result.sent for result in results):
        _log_sent(notifier, message, batches, results, failures)
        return None
    if failures:
        batch, error = failures[0]
        return _failed(error, batch.text)
    if not results:  # held for every number (logged)
        return None
    figures = _figures(results)
    advice = nobody_advice(
        figures,
        numbers=len(items),
        fold_interval=notifier.fold_interval,
        fallback=notifier.fallback is not None,
    )
    filters = {name for name in FILTER_FIELDS if figures.get(name)}
    return Undelivered(
        reason="flood" if filters == {"flood"} else "filtered",
        what=nothing_sent(figures),
        error=SmsNothingSentError(figures, "The SMS notification", advice=advice),
        text=text,
        advice=advice,
    )


def _fold(
    notifier: SmsNotifier, context: Context, message: Message, items: list[str | Recipient]
) -> list[_Batch]:
    """What goes now: every number, unless the claim store holds the alert for some (logged, counted).

    Only alerts are folded, and never an approval's question (a person must answer it in time).
    """
    from airflow_provider_sms.operators._approval import CONTEXT_KEY as APPROVAL_CONTEXT_KEY

    interval = notifier.fold_interval
    if interval is None or message.pushtype != "alert" or APPROVAL_CONTEXT_KEY in context:
        return [_Batch(items, message.text)]
    from airflow_provider_sms.api_server.claims import HELD_TEXT_LENGTH, FoldRequest, NumberChunk
    from airflow_provider_sms.operators._claims import ClaimStoreError, NumberKeys, numbers_of, store_for

    numbers = numbers_of(items)
    try:
        hook = notifier.hook
        request = FoldRequest(
            numbers=NumberChunk.of(0, NumberKeys(hook.settings.token).digests(numbers)),
            interval_seconds=interval.total_seconds(),
            text=quote(message.text, HELD_TEXT_LENGTH),
        )
        # Asked once: asked again after a lost answer, the store would hold the alert it let go.
        answer = store_for(hook, tries=1).fold(request)
    except Exception as exc:
        problem = exc.problem if isinstance(exc, ClaimStoreError) else f"{type(exc).__name__}: {exc}"
        notifier.log.warning(
            "The SMS alert is sent unfolded: the store that folds alerts did not answer (%s).", problem
        )
        return [_Batch(items, message.text)]
    if answer.held:
        metrics.count("notifier.folded", conn_id=notifier.sms_conn_id)
        _log_held(notifier, answer, numbers, interval)
    return [
        _Batch([items[position] for position in group.positions], message.text + carried(group), group.held)
        for group in answer.send
    ]


def _log_held(
    notifier: SmsNotifier, answer: FoldAnswer, numbers: Sequence[str], interval: dt.timedelta
) -> None:
    """One line: the alert is held, for which numbers, and when it goes out."""
    from airflow_provider_sms.phone_numbers import mask_number

    which = (
        "its numbers"
        if len(answer.held) == len(numbers)
        else f"{len(answer.held)} of its {len(numbers)} numbers ("
        + ", ".join(mask_number(numbers[position]) for position in answer.held)
        + ")"
    )
    notifier.log.info(
        "SMS alert held (fold_interval %s): %s got an alert at %s; this one goes out, folded into it, with "
        "the next alert to them after %s.",
        duration(interval),
        which,
        _clock(answer.since),
        _clock(answer.until),
    )


def _log_sent(
    notifier: SmsNotifier,
    message: Message,
    batches: Sequence[_Batch],
    results: Sequence[CampaignResult],
    failures: Sequence[tuple[_Batch, Exception]],
) -> None:
    """The notification reached someone: one line (and one more for numbers another SMS did not reach)."""
    metrics.count("notifier.sent", conn_id=notifier.sms_conn_id, pushtype=notifier.pushtype)
    delay = f", delayed to {message.delay} Europe/Paris" if message.delay else ""
    carried_alerts = sum(batch.carried for batch in batches)
    carrying = (
        f", carrying {carried_alerts} held alert{'s' if carried_alerts > 1 else ''}" if carried_alerts else ""
    )
    notifier.log.info(
        "SMS notification sent: %s%s%s", "; ".join(r.summary() for r in results), delay, carrying
    )
    for batch, exc in failures:
        notifier.log.warning(
            "The SMS notification did not reach %s of its numbers (their SMS carried %s held alerts): %s: %s",
            len(batch.items),
            batch.carried,
            type(exc).__name__,
            exc,
        )


def _failed(exc: Exception, text: str) -> Undelivered:
    """A notification an error stopped; an error of the provider's without its frames (the caller
    raises it from its own)."""
    from airflow_provider_sms.exceptions import SmsError

    kinds = {cls.__name__ for cls in type(exc).__mro__}
    reason = next((reason for name, reason in _REASONS if name in kinds), "error")
    what = {
        "maybe_sent": "",
        "unreachable": "the service was unreachable or busy: ",
        "invalid": "not sent: ",
        "refused": "the service refused it: ",
    }.get(reason, f"not sent: {type(exc).__name__}: ")
    error = exc.with_traceback(None) if isinstance(exc, SmsError) else exc
    return Undelivered(reason=reason, what=f"{what}{exc}", error=error, text=text)


def _figures(results: Sequence[CampaignResult]) -> dict[str, Any]:
    """The figures of the SMS sent (one, or one per group of numbers), as SmsNothingSentError takes them."""
    from airflow_provider_sms.models import FILTER_FIELDS

    if len(results) == 1:
        return results[0].model_dump()
    names = (*FILTER_FIELDS, "total", "sent")
    figures: dict[str, Any] = {name: sum(getattr(result, name) for result in results) for name in names}
    figures["tickets"] = [r.ticket for r in results if r.ticket]
    return figures


def nobody_advice(
    figures: Mapping[str, Any], *, numbers: int, fold_interval: dt.timedelta | None, fallback: bool
) -> str:
    """What to do about a notification every number of which was filtered, true for the case: after
    each filter's own fix (which the error names), what the notifier's settings can change.

    :param figures: the send's figures (each filter's count).
    :param numbers: how many numbers the notifier has.
    :param fold_interval: its fold interval (None: alerts are not folded).
    :param fallback: whether it has a fallback.
    """
    advice = []
    if figures.get("flood"):
        if fold_interval is None:
            advice.append(
                "The anti-flood counts every SMS to a number, from any DAG: set fold_interval (e.g. "
                "timedelta(minutes=15)) so that a burst of alerts goes out as one SMS."
            )
        else:
            advice.append(
                "The anti-flood counts every SMS to a number, from any DAG: this notifier already folds "
                f"the alerts within {duration(fold_interval)} of each other into one SMS; a longer "
                "fold_interval sends fewer."
            )
    elif numbers == 1:
        advice.append(
            "An alert to one number is lost whenever that number is filtered: give the notifier a second "
            "recipient (another person on call)."
        )
    if not fallback:
        advice.append(
            "For alerts that must reach someone, give the notifier a fallback (e.g. "
            "fallback=SlackNotifier(...), an email notifier, or an SmsNotifier on another connection)."
        )
    return " ".join(advice)


def quote(text: str, length: int) -> str:
    """``text`` on one line, cut to ``length`` characters (``...`` ends a cut one: GSM characters only)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= length else flat[: length - 3].rstrip() + "..."


def carried(group: FoldGroup) -> str:
    """What an SMS adds for the alerts held for its numbers, e.g. `` (+3 more alerts since 02:14 UTC:
    load failed; report failed; +1)``: the start of the first few, at most :data:`CARRIED_TEXT_LENGTH`
    characters of them; "" when none was held."""
    if not group.held:
        return ""
    quoted: list[str] = []
    room = CARRIED_TEXT_LENGTH
    for alert in group.texts:
        if len(alert.text) > room:
            break
        quoted.append(alert.text)
        room -= len(alert.text) + 2
    rest = group.held - len(quoted)
    since = f" since {_clock(group.texts[0].at)}" if group.texts else ""
    listed = "; ".join([*quoted, *([f"+{rest}"] if rest and quoted else [])])
    alerts = "alert" if group.held == 1 else "alerts"
    return f" (+{group.held} more {alerts}{since}" + (f": {listed})" if quoted else ")")


def duration(interval: dt.timedelta) -> str:
    """``15 minutes``, ``20 seconds``."""
    seconds = interval.total_seconds()
    value, unit = (seconds / 60, "minute") if seconds >= 60 else (seconds, "second")
    return f"{value:g} {unit}{'' if value == 1 else 's'}"


def _clock(when: dt.datetime | None) -> str:
    """``02:14 UTC``."""
    import pendulum

    return pendulum.instance(when).in_tz("UTC").format("HH:mm") + " UTC" if when else "an unknown time"
