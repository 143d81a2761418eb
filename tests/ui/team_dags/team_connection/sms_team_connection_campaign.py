"""Team A's campaign on team A's own connection (``sms_team_a``, scoped to the team), then the wait for
its delivery reports: sent by tests/ui/test_team_connections.py against the sandbox."""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG

from airflow_provider_sms.operators.sms import SmsSendOperator
from airflow_provider_sms.sensors.sms import SmsDeliveryReportsSensor
from tests.dag_defaults import alert, dag_arguments

with DAG("sms_team_connection_campaign", **dag_arguments(doc_md=__doc__)):
    send = SmsSendOperator(
        task_id="send",
        sms_conn_id="sms_team_a",
        message=alert("Your parcel waits at the depot"),
        recipients=[f"3361200050{last}" for last in range(1, 5)],
    )
    send >> SmsDeliveryReportsSensor(
        task_id="wait_for_delivery",
        sms_conn_id="sms_team_a",
        campaign=send.output,
        min_final_share=1.0,
        deadline=timedelta(minutes=2),
        poke_interval=1,
    )
