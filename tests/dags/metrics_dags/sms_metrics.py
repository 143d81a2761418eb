"""A campaign, a simulation and a gated campaign on the sandbox, run by tests/dags/test_metrics.py with
Airflow's metrics sent to a StatsD server or an OpenTelemetry collector on 127.0.0.1.

The sandbox's blacklist holds 33600000001: the service counts it and sends to the two others.
"""

from __future__ import annotations

from airflow.sdk import DAG

from airflow_provider_sms.operators.sms import SmsSendOperator, SmsSimulateOperator
from tests.dag_defaults import alert, dag_arguments

RECIPIENTS = ["33612000501", "33600000001", "33612000502"]

with DAG("sms_metrics", **dag_arguments(doc_md=__doc__)):
    SmsSimulateOperator(task_id="simulate", message=alert("Your order has shipped"), recipients=RECIPIENTS)
    SmsSendOperator(
        task_id="send",
        message=alert("Your order has shipped"),
        recipients=RECIPIENTS,
        batch_size=2,
    )
    SmsSendOperator(
        task_id="send_gated",
        message=alert("Your order is delayed"),
        recipients=RECIPIENTS,
        max_cost=0,
        on_cost_exceeded="skip",
    )
