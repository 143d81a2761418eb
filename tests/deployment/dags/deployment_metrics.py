"""Test DAG of tests/deployment/test_metrics.py: a send, a deferred wait for its delivery reports, and a
notifier that reaches nobody, with every component's metrics sent to the deployment's StatsD server.

The run's conf gives the numbers; the sandbox's blacklist holds 33600000001 (filtered by the service,
and the notifier's only number).
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG, Param

from airflow_provider_sms.notifications.sms import SmsNotifier
from airflow_provider_sms.operators.sms import SmsSendOperator
from airflow_provider_sms.sensors.sms import SmsDeliveryReportsSensor
from tests.dag_defaults import alert, dag_arguments

with DAG(
    "deployment_metrics",
    **dag_arguments(
        "sms",
        render_template_as_native_obj=True,
        params={"recipients": Param(["33611110001"], type="array")},
    ),
):
    send = SmsSendOperator(
        task_id="send",
        message=alert("Your table is booked."),
        recipients="{{ params.recipients }}",
    )
    send >> SmsDeliveryReportsSensor(
        task_id="wait_for_delivery",
        campaign=send.output,
        min_final_share=1.0,
        deadline=timedelta(seconds=60),
        poke_interval=2,
        deferrable=True,
        on_success_callback=SmsNotifier(text="{{ ti.task_id }} done", recipients=["33600000001"]),
    )
