"""A send followed by a wait for its delivery reports, on the connection the test sets up.

Run by tests/dags/test_delivery_wait_checks.py with ``airflow dags test``: each set-up mistake of the
receiving side must fail the send before any request reaches the service.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import dag

from airflow_provider_sms.operators.sms import SmsSendOperator
from airflow_provider_sms.sensors.sms import SmsDeliveryReportsSensor
from tests.dag_defaults import alert, dag_arguments


@dag(**dag_arguments())
def sms_send_then_wait() -> None:
    """Send one alert, then wait for its delivery reports."""
    send = SmsSendOperator(
        task_id="send",
        message=alert("Your parcel is on its way"),
        recipients=["33612000077"],
        on_duplicate="send",
    )
    send >> SmsDeliveryReportsSensor(
        task_id="wait_for_delivery", campaign=send.output, deadline=timedelta(seconds=5), poke_interval=1
    )


sms_send_then_wait()
