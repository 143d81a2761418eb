"""Test DAGs of tests/deployment: a send, then a short deferred wait for its delivery reports.

One DAG per connection: ``deployment_send_and_wait`` on sms_default (reports received) and
``deployment_send_and_wait_sms_service_only`` (the receiver refuses the sandbox's address). The run's
conf gives the numbers and an optional delay; the wait gives up 20 seconds after the campaign goes out,
so the scenarios read what its log says when nothing arrives, and when it counts its deadline from.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG, Param

from airflow_provider_sms.operators.sms import SmsSendOperator
from airflow_provider_sms.sensors.sms import SmsDeliveryReportsSensor
from tests.dag_defaults import alert, dag_arguments

# The first DAG's id is the file's name: the harness waits for a DAG of each file's name.
for dag_id, conn_id in (
    ("deployment_send_and_wait", "sms_default"),
    ("deployment_send_and_wait_sms_service_only", "sms_service_only"),
):
    with DAG(
        dag_id,
        **dag_arguments(
            "sms",
            render_template_as_native_obj=True,
            params={
                "recipients": Param(["33611110001"], type="array"),
                "delay": Param(None, type=["null", "string"]),
            },
        ),
    ):
        send = SmsSendOperator(
            task_id="send",
            sms_conn_id=conn_id,
            message=alert("Your parcel arrives today."),
            recipients="{{ params.recipients }}",
            delay="{{ params.delay }}",
        )
        send >> SmsDeliveryReportsSensor(
            task_id="wait_for_delivery",
            sms_conn_id=conn_id,
            campaign=send.output,
            min_final_share=1.0,
            deadline=timedelta(seconds=20),
            poke_interval=2,
            deferrable=True,
        )
