"""Test DAG of tests/deployment: two deferrable waits for what never comes, ended by their timeout.

The NPAI wait (a campaign never sent) skips with ``soft_fail``; the webhook wait (webhook 2 answering
2xx, which the sandbox's seed never does) fails. Both poll from the triggerer every 2 s for 20 s.
"""

from __future__ import annotations

from airflow.sdk import dag

from airflow_provider_sms.sensors.sms import SmsNpaiSensor, SmsWebhookSensor
from tests.dag_defaults import dag_arguments

TIMEOUT, POKE_INTERVAL = 20, 2
NEVER_SENT = 4242  # no campaign of the sandbox has this id
UNHEALTHY_WEBHOOK = "2"  # seeded live, with a last HTTP code of 500


@dag(**dag_arguments("sms"))
def deployment_wait_timeout() -> None:
    """Both waits side by side in the triggerer."""
    common = {"deferrable": True, "poke_interval": POKE_INTERVAL, "timeout": TIMEOUT}
    SmsNpaiSensor(task_id="npai_soft_fail", campaign_id=NEVER_SENT, soft_fail=True, **common)
    SmsWebhookSensor(task_id="webhook_fail", webhook_id=UNHEALTHY_WEBHOOK, require_healthy=True, **common)


deployment_wait_timeout()
