"""A campaign over its gate, sent only once a person approves it, run by tests/dags/test_approval.py
(answered through the REST API) and tests/ui/test_approval_in_airflow.py (through the UI, in chromium).

Six numbers in two batches of three, 6 credits against ``max_cost=1``: the gate refuses, the task asks
alice in Airflow's Required actions and texts her the link. ``retries=1`` with a 20-second delay lets
the test show that a retry after an approved, partly sent campaign neither asks again nor sends twice.

``sms_send_approved_min_credits`` is the same campaign with ``min_credits_after=5000`` too: with the
sandbox's 10,000 credits that gate passes when the question is asked, so "Send" does not cover it.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG

from airflow_provider_sms.notifications.sms import APPROVAL_TEXT, SmsNotifier
from airflow_provider_sms.operators.sms import SmsSendOperator
from tests.dag_defaults import alert, dag_arguments

NUMBERS = [f"3361200020{i}" for i in range(1, 7)]
APPROVER_PHONE = "33699000001"


def approval_dag(dag_id: str, min_credits_after: int | None = None) -> DAG:
    """The DAG ``dag_id``: one send of the campaign behind its gates, asking alice when one refuses."""
    with DAG(dag_id, **dag_arguments(doc_md=__doc__)) as dag:
        SmsSendOperator(
            task_id="send",
            message=alert("Spring sale: 20 % off everything until Sunday"),
            recipients=NUMBERS,
            batch_size=3,
            max_cost=1,
            min_credits_after=min_credits_after,
            on_cost_exceeded="ask",
            approvers=["alice"],
            approval_timeout=timedelta(hours=1),
            approval_notifiers=[SmsNotifier(text=APPROVAL_TEXT, recipients=[APPROVER_PHONE])],
            retries=1,
            retry_delay=timedelta(seconds=20),
        )
    return dag


sms_send_approved = approval_dag("sms_send_approved")
sms_send_approved_min_credits = approval_dag("sms_send_approved_min_credits", min_credits_after=5000)
