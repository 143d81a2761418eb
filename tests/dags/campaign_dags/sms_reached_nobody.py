"""Sends and a notification that reach nobody (``sms_reached_nobody``), refusals at or before the first
request (``sms_refused``), a burst of failure alerts folded into two SMS (``sms_alert_burst``) and alerts
the anti-flood filters handed to their fallbacks (``sms_alert_fallback``), run by
tests/dags/test_reached_nobody.py against the sandbox.

The sandbox's blacklist holds 33600000001 and 33600000002: the service takes a send to them (a ticket)
and sends to neither. ``sms_wrong_token`` is a connection whose token the sandbox refuses;
``sms_backup`` another connection to the sandbox. ``SMS_FALLBACK_INBOX`` names the file
:class:`FileNotifier` writes to.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, BaseNotifier, chain, task

from airflow_provider_sms.notifications.sms import SmsNotifier
from airflow_provider_sms.operators.sms import SmsSendOperator
from tests.dag_defaults import alert, dag_arguments

BLACKLISTED = ["33600000001", "33600000002"]
# Two people on call; the fallback DAG's second task pages two others, its fallback a third.
ON_CALL = ["33612000601", "33612000602"]
ON_CALL_B = ["33612000603", "33612000604"]
BACKUP = "33612000699"
# The burst's fold interval: long enough for the burst's tasks, short enough for a test to wait it out.
FOLD_SECONDS = 20

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


class FileNotifier(BaseNotifier):
    """A notifier of another channel (Slack, email...): appends its templated message to a file."""

    template_fields = ("message",)

    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message

    def notify(self, context: Any) -> None:
        with Path(os.environ["SMS_FALLBACK_INBOX"]).open("a") as inbox:
            inbox.write(self.message + "\n")


def paged(**arguments: Any) -> SmsNotifier:
    """The failure alert of a task: its own notifier (a callback renders its templates in place)."""
    return SmsNotifier(text="{{ ti.task_id }} failed", **{"recipients": ON_CALL, **arguments})


def failing(task_id: str, notifier: SmsNotifier) -> Any:
    @task(task_id=task_id, on_failure_callback=notifier, trigger_rule="all_done")
    def fail() -> None:
        raise RuntimeError(f"{task_id} broke")

    return fail()


with DAG("sms_alert_burst", **dag_arguments(doc_md=__doc__)):

    @task(trigger_rule="all_done")
    def wait_past_the_fold_interval() -> None:
        """The burst's first alert went out when its first task failed: wait out the interval."""
        time.sleep(FOLD_SECONDS + 1)

    folding = timedelta(seconds=FOLD_SECONDS)
    chain(
        *(failing(f"burst_{index}", paged(fold_interval=folding)) for index in range(1, 5)),
        wait_past_the_fold_interval(),
        failing("after_the_interval", paged(fold_interval=folding)),
    )

with DAG("sms_alert_fallback", **dag_arguments(doc_md=__doc__)):
    inbox = "{{ ti.task_id }}: {{ sms_alert.text }} [{{ sms_alert.reason }}] {{ sms_alert.what }}"
    chain(
        failing("page_by_file", paged(fallback=FileNotifier(inbox))),
        failing(
            "page_by_backup",
            paged(
                recipients=ON_CALL_B,
                fallback=SmsNotifier(
                    text="{{ ti.task_id }} failed (backup: {{ sms_alert.reason }})",
                    recipients=[BACKUP],
                    sms_conn_id="sms_backup",
                ),
            ),
        ),
    )
