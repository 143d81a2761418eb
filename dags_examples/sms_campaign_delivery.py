"""Delivery reports after a send: wait until the campaign's messages have a final status, then clean up.

``SmsDeliveryReportsSensor`` waits (in the triggerer) until 90 % of the campaign's messages have a final
status or six hours have passed, and returns the counts by status and the numbers that failed, which
the last task hands to the clean-up. The reports come from the provider's receiver on the Airflow API
server (see the "Delivery reports" page: the ``sms_default`` connection's extra names the service's DLR
webhook with ``dlr_webhook_id``, and the service posts to
``<Airflow API server>/sms/delivery-reports/sms_default``). ``sms_on_delivery_reports`` is the DAG
scheduled on the reports themselves.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import Param, dag, task

from airflow_provider_sms.operators.sms import SmsSendOperator
from airflow_provider_sms.sensors.sms import SmsDeliveryReportsSensor


@dag(
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    render_template_as_native_obj=True,
    params={"recipients": Param(["33611110001", "33611110002"], type="array")},
    tags=["sms", "example"],
)
def sms_campaign_delivery() -> None:
    """Send, wait for the delivery reports, then report who was not reached."""
    send = SmsSendOperator(
        task_id="send",
        message={"text": "Your parcel arrives today between 2 and 4 pm.", "pushtype": "alert"},
        recipients="{{ params.recipients }}",
    )
    delivery = SmsDeliveryReportsSensor(
        task_id="wait_for_delivery",
        campaign=send.output,
        min_final_share=0.9,
        deadline=timedelta(hours=6),
        poke_interval=2,
        deferrable=True,
    )

    @task
    def report_failed(delivery: dict[str, Any]) -> list[str]:
        """What the clean-up step gets: the numbers whose final status is not "delivered"."""
        print(f"Delivery: {delivery['by_status']} ({delivery['final_share']:.0%} final)")
        failed: list[str] = delivery["failed"]
        return failed

    report_failed(delivery.output)


sms_campaign_delivery()
