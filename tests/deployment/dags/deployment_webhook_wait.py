"""Test DAG of tests/deployment: a deferrable sensor that waits for a webhook to become live.

The triggerer is stopped and restarted while it waits (scenario 3).
"""

from __future__ import annotations

from airflow.sdk import Param, dag

from airflow_provider_sms.sensors.sms import SmsWebhookSensor
from tests.dag_defaults import dag_arguments


@dag(**dag_arguments("sms", params={"webhook_id": Param("9", type="string")}))
def deployment_webhook_wait() -> None:
    """Wait in the triggerer, polling every second, until the webhook is live."""
    SmsWebhookSensor(
        task_id="wait_live",
        webhook_id="{{ params.webhook_id }}",
        deferrable=True,
        poke_interval=1,
        timeout=300,
    )


deployment_webhook_wait()
