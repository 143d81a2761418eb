"""Sends and a notification that reach nobody (``sms_reached_nobody``), and refusals at or before the
first request (``sms_refused``), run by tests/dags/test_reached_nobody.py against the sandbox.

The sandbox's blacklist holds 33600000001 and 33600000002: the service takes a send to them (a ticket)
and sends to neither. ``sms_wrong_token`` is a connection whose token the sandbox refuses.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG, task

from airflow_provider_sms.notifications.sms import SmsNotifier
from airflow_provider_sms.operators.sms import SmsSendOperator
from tests.dag_defaults import alert, dag_arguments

BLACKLISTED = ["33600000001", "33600000002"]

with DAG("sms_reached_nobody", **dag_arguments(params={"on_nothing_sent": "warn"}, doc_md=__doc__)):

    @task(on_success_callback=SmsNotifier(text="{{ ti.task_id }} done", recipients=BLACKLISTED[:1]))
    def notify_nobody() -> None:
        """Succeeds; its notifier's only number is blacklisted."""

    notify_nobody()
    SmsSendOperator(
        task_id="send_to_nobody",
        message=alert("Your parcel is on its way"),
        recipients=BLACKLISTED,
        batch_size=1,
        retries=2,
        retry_delay=timedelta(seconds=1),
    )
    SmsSendOperator(
        task_id="send_to_nobody_warned",
        message=alert("Your parcel is out for delivery"),
        recipients=BLACKLISTED,
        on_nothing_sent="{{ params.on_nothing_sent }}",
    )

with DAG("sms_refused", **dag_arguments(params={"bad_mode": "maybe"}, doc_md=__doc__)):
    SmsSendOperator(
        task_id="bad_input",
        message=alert("Your parcel was delivered"),
        recipients=["33612000401"],
        on_nothing_sent="{{ params.bad_mode }}",
    )
    SmsSendOperator(
        task_id="wrong_token",
        message=alert("Your parcel is delayed"),
        recipients=["33612000402"],
        sms_conn_id="sms_wrong_token",
        on_failure_callback=SmsNotifier(
            text="{{ ti.task_id }} failed", recipients=["33612000403"], sms_conn_id="sms_wrong_token"
        ),
    )
