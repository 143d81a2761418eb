"""SmsNotifier: an alert SMS from a task's or DAG's success/failure callback."""

from __future__ import annotations

import asyncio
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import BaseNotifier

from airflow_provider_sms import DEFAULT_CONN_ID
from airflow_provider_sms._task_arguments import (
    DEFAULT_FOLD_INTERVAL,
    check_fallback,
    check_fold_interval,
    check_send_window,
)

if TYPE_CHECKING:
    import datetime as dt
    from collections.abc import Callable, Sequence

    from airflow.providers.common.compat.sdk import Context

    from airflow_provider_sms._task_arguments import SendWindowMode
    from airflow_provider_sms.hooks.sms import SmsHook
    from airflow_provider_sms.models import PushType

# The text of an approval notifier (``approval_notifiers=[SmsNotifier(text=APPROVAL_TEXT, ...)]`` on a
# send operator with on_cost_exceeded="ask"): the cost, the gate and the link to the Required actions
# page, where the answer needs an Airflow login.
APPROVAL_TEXT = (
    "SMS campaign {{ ti.dag_id }}.{{ ti.task_id }} waits for your approval: {{ sms_approval.cost }} "
    "credits ({{ sms_approval.gate }}). Answer in Airflow: {{ sms_approval.link }}"
)

# DAG files import this module: the hook, the models and the send window are imported when a
# notification is sent, not when the file is parsed (see airflow_provider_sms._task_arguments).


class SmsNotifier(BaseNotifier):
    """Send an SMS (by default an ``alert``) when a task or DAG succeeds or fails.

    The SMS is sent once with the hook's :meth:`~airflow_provider_sms.hooks.sms.SmsHook.send`, which
    never repeats a POST /send: a notification whose outcome is unknown is never sent twice. Callbacks
    call :meth:`notify`; the triggerer (e.g. a deadline alert) awaits :meth:`async_notify`, which does
    the same in a thread.

    **Folding.** An alert to a number that got one within ``fold_interval`` is held for that number
    (counted, logged), and the next alert to it after the interval carries it: ``<text> (+3 more alerts
    since 02:14 UTC: <start of each>)``. A burst of failures is one SMS, not a burst the service's
    anti-flood filters. The decision is one transaction in the provider's tables (the claim store);
    a store that does not answer never holds an alert: it is sent unfolded.

    **Not delivered.** One that reached nobody (every number filtered, refused, the service unreachable,
    bad input, or its outcome unknown) is never called sent: it goes to ``fallback`` with the same
    context, and one warning says so; the callback does not fail when the fallback took it. Without a
    fallback, or when the fallback fails too, the callback fails, naming what happened and what to do
    (e.g. :class:`~airflow_provider_sms.exceptions.SmsNothingSentError`), and Airflow logs it at error
    level. Example::

        SmsSendOperator(
            task_id="send_campaign",
            ...,
            on_failure_callback=SmsNotifier(
                text="{{ dag.dag_id }}.{{ ti.task_id }} failed ({{ ds }})",
                recipients=["33612345678", "33698765432"],
                fallback=SlackNotifier(text="{{ sms_alert.text }} (by Slack: {{ sms_alert.what }})"),
            ),
        )

    It also tells an approver that a campaign waits for their answer (``on_cost_exceeded="ask"``):
    ``approval_notifiers=[SmsNotifier(text=APPROVAL_TEXT, recipients=[...])]`` on the send operator,
    where the text's templates see ``sms_approval`` (``cost``, ``gate``, ``credits_after``, ``link``).

    :param text: the SMS text. Templated (the callback's context: ``ti``, ``dag``, ``ds``...).
    :param recipients: telephone numbers, international format. Templated.

    The other parameters are keyword-only:

    :param pushtype: ``alert`` (default; may be sent at any hour) or ``marketing``.
    :param send_window: for a ``marketing`` notification sent outside the marketing window (08:00-20:00
        Europe/Paris, Monday to Saturday, no French public holidays): ``postpone`` (default: it is
        delayed to the next allowed time), ``fail`` (not sent; the error names the next allowed time)
        or ``ignore``. Alerts are never moved.
    :param sms_conn_id: the Airflow connection of type ``sms``.
    :param sender: custom sender; defaults to the connection's ``default_sender``.
    :param fallback: what gets a notification that reached nobody: any Airflow notifier (its templates
        render with the callback's context) or a callable taking the context. Its context also holds
        ``sms_alert``: ``text`` (the SMS, with the alerts it carried), ``reason`` (``filtered``,
        ``flood``, ``refused``, ``unreachable``, ``maybe_sent``, ``invalid`` or ``error``) and ``what``
        (what happened, in words). A notification whose outcome is unknown goes to it too: told twice
        rather than lost.
    :param fold_interval: a ``timedelta`` (default 15 minutes, at most a day): an alert within it after
        the last one to a number is held for that number and carried by the next. ``None`` or ``0``
        sends every alert. Marketing notifications and approval questions are never held.
    """

    template_fields: Sequence[str] = ("sms_conn_id", "text", "recipients", "sender")

    def __init__(
        self,
        text: str,
        recipients: str | Sequence[str],
        *,
        pushtype: PushType = "alert",
        sms_conn_id: str = DEFAULT_CONN_ID,
        sender: str | None = None,
        send_window: SendWindowMode = "postpone",
        fallback: Callable[[Context], Any] | None = None,
        fold_interval: dt.timedelta | None = DEFAULT_FOLD_INTERVAL,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_send_window(send_window)
        check_fallback(fallback)
        self.text = text
        self.recipients = recipients
        self.pushtype = pushtype
        self.sms_conn_id = sms_conn_id
        self.sender = sender
        self.send_window = send_window
        self.fallback = fallback
        self.fold_interval = check_fold_interval(fold_interval)

    @cached_property
    def hook(self) -> SmsHook:
        """The hook on ``sms_conn_id``."""
        from airflow_provider_sms.hooks.sms import SmsHook

        return SmsHook(sms_conn_id=self.sms_conn_id)

    def notify(self, context: Context) -> None:
        """Send the SMS (once), or hold it to be folded; a notification that reached nobody goes to the
        fallback, and fails the callback when there is none or the fallback fails too.

        Airflow logs a failed callback at error level, with a traceback: raised from here, it holds
        Airflow's frames and this one, not the hook's.

        :raises SmsNothingSentError: the service filtered every number (the message says why and what
            to do).
        """
        from airflow_provider_sms.notifications._alerts import deliver

        failure = deliver(self, context)
        if failure is not None:
            raise failure from None

    async def async_notify(self, context: Context) -> None:
        """:meth:`notify` for the triggerer: the same single send, in a thread so that the event loop
        goes on meanwhile; it fails as :meth:`notify` does.

        The send is never repeated: a cancelled wait leaves the thread's one POST to finish or fail. The
        fold store and the fallback are called in that thread too (a fallback's ``notify``).
        """
        from airflow_provider_sms.notifications._alerts import deliver

        failure = await asyncio.to_thread(deliver, self, context)
        if failure is not None:
            raise failure from None


send_sms_notification = SmsNotifier
