"""Send a campaign to a number the service cannot reach, then wait (deferred) for its NPAI entry.

Run by tests/dags/test_sensor_deferrable.py with ``airflow dags test`` against the sandbox. The
number and the file the result is written to come from the environment, set by the test.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from airflow.sdk import dag, task

from airflow_provider_sms.hooks.sms import SmsHook
from airflow_provider_sms.sensors.sms import SmsNpaiSensor
from tests.dag_defaults import alert, dag_arguments

UNREACHABLE = os.environ.get("SMS_TEST_UNREACHABLE", "33600000000")
RESULT_FILE = os.environ.get("SMS_TEST_RESULT_FILE", "")


@dag(**dag_arguments())
def sms_npai_deferrable() -> None:
    """Send, wait for the NPAI entry in the triggerer, hand the entries downstream."""

    @task
    def send_campaign() -> str:
        result = SmsHook().send(alert("Your parcel is on its way"), [UNREACHABLE])
        return result.ticket or ""

    ticket = send_campaign()
    wait = SmsNpaiSensor(
        task_id="wait_for_npai",
        campaign_id=ticket,
        destinations=[UNREACHABLE],
        deferrable=True,
        poke_interval=1,
        timeout=120,
    )

    @task
    def record(npai: dict[str, Any], ticket: str) -> None:
        # What a CRM clean-up task would receive; written out for the test to check.
        if RESULT_FILE:
            Path(RESULT_FILE).write_text(json.dumps({"ticket": ticket, "npai": npai}))

    record(wait.output, ticket)


sms_npai_deferrable()
