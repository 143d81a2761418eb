"""Stand-in for ``dags_examples/sms_weekly_campaign.py`` in the DAG-parse benchmark, until that file exists.

Same shape: wait for the delivery-report webhook to be live -> simulate -> send with a cost gate ->
watch the NPAI list -> report. Only parsed, never run.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, task

from airflow_provider_sms.operators.sms import SmsSendOperator, SmsSimulateOperator
from airflow_provider_sms.sensors.sms import SmsNpaiSensor, SmsWebhookSensor

MESSAGE = {
    "text": "This week only: 20% off in store <-short->",
    "pushtype": "marketing",
    "links": ["https://shop.example.com/week"],
}
RECIPIENTS = ["33612345678", "33698765432", "447700900123"]

with DAG(
    dag_id="sms_weekly_campaign_standin",
    schedule="0 9 * * 1",
    start_date=pendulum.datetime(2025, 1, 1, tz="Europe/Paris"),
    catchup=False,
    tags=["sms", "benchmark"],
):
    webhook_live = SmsWebhookSensor(task_id="webhook_live", webhook_id="1", poke_interval=60)
    simulate = SmsSimulateOperator(task_id="simulate", message=MESSAGE, recipients=RECIPIENTS)
    send = SmsSendOperator(task_id="send", message=MESSAGE, recipients=RECIPIENTS, max_cost=500)
    npai = SmsNpaiSensor(task_id="npai", destinations=RECIPIENTS, poke_interval=300)

    @task
    def report() -> str:
        """Say the campaign is done (the real example DAG reports the figures)."""
        return "weekly campaign sent"

    webhook_live >> simulate >> send >> npai >> report()
