"""A deferrable wait for something that never comes, ended by the sensor's timeout.

Run by tests/dags/test_sensor_deferrable.py with ``airflow dags test`` against the sandbox, whose
inline trigger loop ignores Airflow's deferral timeout: only the trigger's own timeout ends the wait.
The environment chooses the wait (``SMS_TEST_WAIT``: ``npai``, an NPAI entry of a campaign never sent,
or ``webhook``, webhook 2 answering 2xx, which the sandbox's seed never does), its timeout
(``SMS_TEST_TIMEOUT``, seconds) and ``soft_fail`` (``SMS_TEST_SOFT_FAIL=1``).
"""

from __future__ import annotations

import os

from airflow.sdk import dag

from airflow_provider_sms.sensors.sms import SmsNpaiSensor, SmsWebhookSensor
from tests.dag_defaults import dag_arguments

WAIT = os.environ.get("SMS_TEST_WAIT", "npai")
TIMEOUT = float(os.environ.get("SMS_TEST_TIMEOUT", "20"))
SOFT_FAIL = os.environ.get("SMS_TEST_SOFT_FAIL") == "1"
NEVER_SENT = 4242  # no campaign of the sandbox has this id
UNHEALTHY_WEBHOOK = "2"  # seeded live, with a last HTTP code of 500


@dag(**dag_arguments())
def sms_wait_timeout() -> None:
    """One deferrable sensor, polling every 2 s until its timeout."""
    common = {"deferrable": True, "poke_interval": 2, "timeout": TIMEOUT, "soft_fail": SOFT_FAIL}
    if WAIT == "webhook":
        SmsWebhookSensor(task_id="wait", webhook_id=UNHEALTHY_WEBHOOK, require_healthy=True, **common)
    else:
        SmsNpaiSensor(task_id="wait", campaign_id=NEVER_SENT, **common)


sms_wait_timeout()
