"""Never twice, on real Airflow: a send whose answer cannot be trusted fails without an Airflow retry.

``airflow dags test`` runs a DAG whose send task has ``retries=2`` against the sandbox with one fault
on POST /send; the sandbox's inspection API says how many campaigns were created and how many sends
reached it.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.dags]

DAG_FILE = Path(__file__).parent / "fault_dags" / "sms_send_with_retries.py"
DAG_ID = "sms_send_with_retries"


def send_task(airflow_home: Path) -> tuple[str, int]:
    """The state and try number of the latest run's send task."""
    with sqlite3.connect(airflow_home / "airflow.db") as db:
        row = db.execute(
            "SELECT state, try_number FROM task_instance WHERE dag_id = ? AND task_id = 'send' "
            "ORDER BY start_date DESC LIMIT 1",
            (DAG_ID,),
        ).fetchone()
    assert row is not None, "the send task never ran"
    return row[0], row[1]


@pytest.mark.parametrize("fault", ["bad_success_shape", "unknown_error", "maybe_sent"])
def test_a_send_of_unknown_outcome_fails_without_retry_and_is_made_once(
    sms_sandbox: Any, run_dag_test: Any, airflow_home: Path, fault: str
) -> None:
    sms_sandbox.inspect.set_faults(**{fault: 1}, endpoints=["/send"])

    process = run_dag_test(DAG_FILE, DAG_ID, {"AIRFLOW_CONN_SMS_DEFAULT": sms_sandbox.connection_json()})

    output = process.stdout + process.stderr
    assert send_task(airflow_home) == ("failed", 1), output[-6000:]
    assert "may have been created and must not be sent again automatically" in output
    assert "Airflow will not retry this task" in output
    assert len(sms_sandbox.inspect.campaigns()) == 1
    assert sms_sandbox.inspect.requests()["/send"] == 1


def test_a_refused_send_is_retried_by_airflow_and_sent_once(
    sms_sandbox: Any, run_dag_test: Any, airflow_home: Path
) -> None:
    """The control: with this DAG, Airflow does retry a send that certainly sent nothing (429)."""
    sms_sandbox.inspect.set_faults(rate_limit=(0, 1), endpoints=["/send"])

    process = run_dag_test(DAG_FILE, DAG_ID, {"AIRFLOW_CONN_SMS_DEFAULT": sms_sandbox.connection_json()})

    output = process.stdout + process.stderr
    assert send_task(airflow_home) == ("success", 2), output[-6000:]
    assert len(sms_sandbox.inspect.campaigns()) == 1
    assert sms_sandbox.inspect.requests()["/send"] == 2
