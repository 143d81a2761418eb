"""SmsNotifier: an alert SMS from a task's or DAG's success/failure callback."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import BaseNotifier

from airflow_provider_sms.hooks.sms import SmsHook
from airflow_provider_sms.models import PushType

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context


class SmsNotifier(BaseNotifier):
    """Send an SMS (by default an ``alert``) when a task or DAG succeeds or fails.

    The SMS is sent once with the hook's :meth:`~airflow_provider_sms.hooks.sms.SmsHook.send`, which
    never repeats a POST /send: a notification whose outcome is unknown is reported in the log, never
    sent twice. Example::

        SmsSendOperator(
            task_id="send_campaign",
            ...,
            on_failure_callback=SmsNotifier(
                text="{{ dag.dag_id }}.{{ ti.task_id }} failed ({{ ds }})",
                recipients=["33612345678"],
            ),
        )

    :param text: the SMS text. Templated (the callback's context: ``ti``, ``dag``, ``ds``...).
    :param recipients: telephone numbers, international format. Templated.
    :param pushtype: ``alert`` (default; may be sent at any hour) or ``marketing``.
    :param sms_conn_id: the Airflow connection of type ``sms``.
    :param sender: custom sender; defaults to the connection's ``default_sender``.
    """

    template_fields: Sequence[str] = ("text", "recipients", "sender")

    def __init__(
        self,
        text: str,
        recipients: str | Sequence[str],
        pushtype: PushType = "alert",
        sms_conn_id: str = SmsHook.default_conn_name,
        sender: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.text = text
        self.recipients = recipients
        self.pushtype = pushtype
        self.sms_conn_id = sms_conn_id
        self.sender = sender

    @cached_property
    def hook(self) -> SmsHook:
        """The hook on ``sms_conn_id``."""
        return SmsHook(sms_conn_id=self.sms_conn_id)

    def notify(self, context: Context) -> None:
        """Send the SMS (once); errors are raised for the callback runner to log."""
        message: dict[str, Any] = {"text": self.text, "pushtype": self.pushtype}
        if self.sender:
            message["sender"] = self.sender
        result = self.hook.send(message, self.recipients)
        self.log.info("SMS notification sent: %s", result.summary())


send_sms_notification = SmsNotifier
