"""A deferrable SmsNpaiSensor run by real Airflow (`airflow dags test`) against the sandbox.

The DAG sends a campaign to a number the sandbox treats as unreachable; only then does the sandbox
add the NPAI entry. The sensor defers at once, its trigger (run inline by `airflow dags test`) polls
GET /npai until the campaign's entry shows up, and the entries reach the downstream task via XCom.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.dags]

DAG_FILE = Path(__file__).parent / "sensor_dags" / "sms_npai_deferrable.py"
UNREACHABLE = "33700000042"  # the sandbox turns 337000... numbers into NPAI entries once sent to


def test_deferrable_npai_sensor_waits_in_the_trigger_for_the_sent_campaign(
    sms_sandbox: Any, run_dag_test: Any, tmp_path: Path
) -> None:
    assert UNREACHABLE not in {entry["destination"] for entry in sms_sandbox.inspect.npai()}
    result_file = tmp_path / "result.json"

    process = run_dag_test(
        DAG_FILE,
        "sms_npai_deferrable",
        {
            "AIRFLOW_CONN_SMS_DEFAULT": sms_sandbox.connection_json("json"),
            "SMS_TEST_UNREACHABLE": UNREACHABLE,
            "SMS_TEST_RESULT_FILE": str(result_file),
        },
    )

    output = process.stdout + process.stderr
    assert process.returncode == 0, output[-6000:]
    assert "state=success" in output
    # The sensor deferred and its trigger found the entry (not a poke on the worker).
    assert "running trigger in line" in output
    assert "1 matching NPAI entries found" in output
    (campaign,) = sms_sandbox.inspect.campaigns()
    result = json.loads(result_file.read_text())
    assert result["ticket"] == campaign["ticket"]
    assert result["npai"]["count"] == 1
    assert result["npai"]["destinations"] == [UNREACHABLE]
    assert result["npai"]["entries"][0]["campaign_id"] == int(campaign["ticket"])
