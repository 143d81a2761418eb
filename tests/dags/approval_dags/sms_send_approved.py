"""A campaign over its gate, sent only once a person approves it, run by tests/dags/test_approval.py
(answered through the REST API) and tests/ui/test_approval_in_airflow.py (through the UI, in chromium).

Six numbers in two batches of three, 6 credits against ``max_cost=1``: the gate refuses, the task asks
alice in Airflow's Required actions and texts her the link. ``retries=1`` with a 20-second delay lets
the test show that a retry after an approved, partly sent campaign neither asks again nor sends twice.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG

from airflow_provider_sms.notifications.sms import APPROVAL_TEXT, SmsNotifier
from airflow_provider_sms.operators.sms import SmsSendOperator

NUMBERS = [f"3361200020{i}" for i in range(1, 7)]
APPROVER_PHONE = "33699000001"

with DAG(
    "sms_send_approved",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["test"],
    doc_md=__doc__,
):
    SmsSendOperator(
        task_id="send",
        message={"text": "Spring sale: 20 % off everything until Sunday", "pushtype": "alert"},
        recipients=NUMBERS,
        batch_size=3,
        max_cost=1,
        on_cost_exceeded="ask",
        approvers=["alice"],
        approval_timeout=timedelta(hours=1),
        approval_notifiers=[SmsNotifier(text=APPROVAL_TEXT, recipients=[APPROVER_PHONE])],
        retries=1,
        retry_delay=timedelta(seconds=20),
    )
