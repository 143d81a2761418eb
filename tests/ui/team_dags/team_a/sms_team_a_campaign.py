"""Team A's campaign, sent by tests/ui/test_campaigns_in_airflow.py against the sandbox: six numbers."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_provider_sms.operators.sms import SmsSendOperator

with DAG(
    "sms_team_a_campaign",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="Europe/Paris"),
    catchup=False,
    tags=["test"],
    doc_md=__doc__,
):
    SmsSendOperator(
        task_id="send",
        message={"text": "Your order has shipped", "pushtype": "alert"},
        recipients=[f"3361200040{last}" for last in range(1, 7)],
    )
