"""Phone numbers out of task logs, on real Airflow: bad numbers are quoted masked, never in full.

``airflow dags test`` runs two sends with bad numbers among their recipients (``campaign_dags/
sms_bad_numbers.py``) against the sandbox: one leaves them out with a warning, one fails on them. The
task logs (``dags test`` prints them, and writes no log file) quote them masked (``061••••302``); the
numbers the DAG gave appear nowhere in them in full, neither the bad ones nor the one sent.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import plain_output

pytestmark = [pytest.mark.integration, pytest.mark.dags]

DAG_FILE = Path(__file__).parent / "campaign_dags" / "sms_bad_numbers.py"
DAG_ID = "sms_bad_numbers"
# What the DAG gives (campaign_dags/sms_bad_numbers.py), and how logs show each bad one.
SENT = "33612000301"
BAD = {"0612000302": "061••••302", "+33 6 12 ab 03 03": "+33••••••••••• 03"}


def task_states(airflow_home: Path) -> dict[str, str]:
    with sqlite3.connect(airflow_home / "airflow.db") as db:
        return dict(db.execute("SELECT task_id, state FROM task_instance WHERE dag_id = ?", (DAG_ID,)))


def skipping_result(airflow_home: Path) -> dict[str, Any]:
    with sqlite3.connect(airflow_home / "airflow.db") as db:
        (value,) = db.execute(
            "SELECT value FROM xcom WHERE dag_id = ? AND task_id = 'send_skipping' AND key = 'return_value'",
            (DAG_ID,),
        ).fetchone()
    result: dict[str, Any] = json.loads(value)
    return result


def test_bad_numbers_are_masked_in_the_task_logs(
    sms_sandbox: Any, run_dag_test: Any, airflow_home: Path
) -> None:
    process = run_dag_test(DAG_FILE, DAG_ID, {"AIRFLOW_CONN_SMS_DEFAULT": sms_sandbox.connection_json()})

    # Airflow 3.0's debug lines of the task's rendered fields are left out: they are the DAG's own
    # arguments, kept in full.
    output = plain_output(process, drop_lines_with="SetRenderedFields(")
    assert task_states(airflow_home) == {"send_skipping": "success", "send_failing": "failed"}, output[-6000:]
    assert [campaign["sent_to"] for campaign in sms_sandbox.inspect.campaigns()] == [[SENT]]

    # The warning of the send that left them out, and the failure of the one that refused them.
    assert "left out before any request (invalid_numbers='skip')" in output, output[-6000:]
    assert "Invalid input (not retried): recipients:" in output, output[-6000:]
    for shown in BAD.values():
        assert output.count(shown) >= 2, (shown, output[-6000:])
    for number in (SENT, *BAD):
        assert number not in output
    # The result reports them by position, masked (the position finds the number in the input).
    rejected = skipping_result(airflow_home)["rejected_locally"]
    assert [example.split(":")[0] for example in rejected["examples"]] == ["recipients[1]", "recipients[2]"]
    assert all(number not in json.dumps(rejected, ensure_ascii=False) for number in BAD)
