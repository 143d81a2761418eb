"""Team A's campaign, sent by tests/ui/test_campaigns_in_airflow.py against the sandbox: six numbers."""

from __future__ import annotations

from airflow.sdk import DAG

from airflow_provider_sms.operators.sms import SmsSendOperator
from tests.dag_defaults import alert, dag_arguments

with DAG("sms_team_a_campaign", **dag_arguments(tz="Europe/Paris", doc_md=__doc__)):
    SmsSendOperator(
        task_id="send",
        message=alert("Your order has shipped"),
        recipients=[f"3361200040{last}" for last in range(1, 7)],
    )
