"""SmsNotifier: an alert SMS from a task's or DAG's success/failure callback."""

from __future__ import annotations

import asyncio
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import BaseNotifier

from airflow_provider_sms import DEFAULT_CONN_ID
from airflow_provider_sms._task_arguments import check_send_window

if TYPE_CHECKING:
    from collections.abc import Sequence

    from airflow.providers.common.compat.sdk import Context

    from airflow_provider_sms._task_arguments import SendWindowMode
    from airflow_provider_sms.exceptions import SmsError
    from airflow_provider_sms.hooks.sms import SmsHook
    from airflow_provider_sms.models import PushType

# The text of an approval notifier (``approval_notifiers=[SmsNotifier(text=APPROVAL_TEXT, ...)]`` on a
# send operator with on_cost_exceeded="ask"): the cost, the gate and the link to the Required actions
# page, where the answer needs an Airflow login.
APPROVAL_TEXT = (
    "SMS campaign {{ ti.dag_id }}.{{ ti.task_id }} waits for your approval: {{ sms_approval.cost }} "
    "credits ({{ sms_approval.gate }}). Answer in Airflow: {{ sms_approval.link }}"
)

# What a notification that reached nobody suggests, after each filter's own fix.
NOBODY_ADVICE = (
    "An alert to one number is lost whenever that number is filtered: give the notifier a second "
    "recipient (another person on call)."
)

# DAG files import this module: the hook, the models and the send window are imported when a
# notification is sent, not when the file is parsed (see airflow_provider_sms._task_arguments).


class SmsNotifier(BaseNotifier):
    """Send an SMS (by default an ``alert``) when a task or DAG succeeds or fails.

    The SMS is sent once with the hook's :meth:`~airflow_provider_sms.hooks.sms.SmsHook.send`, which
    never repeats a POST /send: a notification whose outcome is unknown is reported in the log, never
    sent twice. Callbacks call :meth:`notify`; the triggerer (e.g. a deadline alert) awaits
    :meth:`async_notify`, which makes the same single send in a thread. One that reached nobody (the
    service filtered every number, e.g. by anti-flood after a few alerts to the same number) is never
    called sent: the callback fails, naming each filter's count and what to do
    (:class:`~airflow_provider_sms.exceptions.SmsNothingSentError`), and Airflow logs it at error
    level. Give it a second recipient for alerts that must reach someone. Example::

        SmsSendOperator(
            task_id="send_campaign",
            ...,
            on_failure_callback=SmsNotifier(
                text="{{ dag.dag_id }}.{{ ti.task_id }} failed ({{ ds }})",
                recipients=["33612345678"],
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
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_send_window(send_window)
        self.text = text
        self.recipients = recipients
        self.pushtype = pushtype
        self.sms_conn_id = sms_conn_id
        self.sender = sender
        self.send_window = send_window

    @cached_property
    def hook(self) -> SmsHook:
        """The hook on ``sms_conn_id``."""
        from airflow_provider_sms.hooks.sms import SmsHook

        return SmsHook(sms_conn_id=self.sms_conn_id)

    def notify(self, context: Context) -> None:
        """Send the SMS (once); an error, or a notification that reached nobody, fails the callback.

        Airflow logs a failed callback at error level, with a traceback: raised from here, it holds
        Airflow's frames and this one, not the hook's.

        :raises SmsNothingSentError: the service filtered every number (the message says why and what
            to do).
        """
        failure = self._send()
        if failure is not None:
            raise failure from None

    async def async_notify(self, context: Context) -> None:
        """:meth:`notify` for the triggerer: the same single send, in a thread so that the event loop
        goes on meanwhile; it fails as :meth:`notify` does.

        The send is never repeated: a cancelled wait leaves the thread's one POST to finish or fail.
        """
        failure = await asyncio.to_thread(self._send)
        if failure is not None:
            raise failure from None

    def _send(self) -> SmsError | None:
        """Send the rendered SMS once and log it; the error that fails the notification, if any, with
        no frame of the hook's (the caller raises it)."""
        from airflow_provider_sms.exceptions import SmsError, SmsNothingSentError
        from airflow_provider_sms.send_window import apply_marketing_rules

        data: dict[str, Any] = {"text": self.text, "pushtype": self.pushtype}
        if self.sender:
            data["sender"] = self.sender
        try:
            message = apply_marketing_rules(
                self.hook.prepare_message(data), self.send_window, logger=self.log
            )
            result = self.hook.send(message, self.recipients)
        except SmsError as exc:
            return exc.with_traceback(None)
        if result.sent == 0:
            return SmsNothingSentError(result.model_dump(), "The SMS notification", advice=NOBODY_ADVICE)
        delay = f", delayed to {message.delay} Europe/Paris" if message.delay else ""
        self.log.info("SMS notification sent: %s%s", result.summary(), delay)
        return None


send_sms_notification = SmsNotifier
