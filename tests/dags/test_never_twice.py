"""Never twice, on real Airflow: a send whose answer cannot be trusted fails without an Airflow retry,
and two runs of one campaign send it once, whatever their timing.

``airflow dags test`` runs a DAG whose send task has ``retries=2`` against the sandbox with one fault
on POST /send; the sandbox's inspection API says how many campaigns were created and how many sends
reached it. Under ``airflow dags test`` the task claims in the claim store of the Airflow home's own
database (the in-process path).
"""

from __future__ import annotations

import re
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import AIRFLOW, DAG_TEST_TIMEOUT, airflow_env, forget_campaigns, plain_output

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


REMINDER_FILE = Path(__file__).parent / "campaign_dags" / "sms_daily_reminder.py"


def test_two_runs_for_the_same_slot_send_once_and_consecutive_days_both_send(
    sms_sandbox: Any, run_dag_test: Any, airflow_home: Path
) -> None:
    """The scheduled run and a manual run of a daily DAG for the same slot: one campaign, the second
    run failed naming the first; the next day's run sends; a run saying on_duplicate=send sends."""
    env = {"AIRFLOW_CONN_SMS_DEFAULT": sms_sandbox.connection_json()}

    def run(logical_date: str, *args: str) -> str:
        return plain_output(
            run_dag_test(REMINDER_FILE, "sms_daily_reminder", env, args, logical_date=logical_date)
        )

    first = run("2030-12-01T08:00:00+00:00")
    assert len(sms_sandbox.inspect.campaigns()) == 1, first[-6000:]

    second = run("2030-12-01T08:30:00+00:00")
    assert "The same campaign (same connection 'sms_default', message and recipients" in second, second[
        -6000:
    ]
    refusal = second[second.rindex("was already sent:") :][:600]
    # `dags test` names a run after the moment it ran, whatever its logical date.
    assert re.search(r"run 'manual__[^']+', task 'send' sent it \(ticket \d+\)", refusal), refusal
    assert "for delivery at 2030-12-02 10:00:00 Europe/Paris" in second
    assert len(sms_sandbox.inspect.campaigns()) == 1
    assert sms_sandbox.inspect.requests().get("/send/simulate", 0) == 0

    next_day = run("2030-12-02T08:00:00+00:00")
    assert len(sms_sandbox.inspect.campaigns()) == 2, next_day[-6000:]

    on_purpose = run("2030-12-01T08:45:00+00:00", "-c", '{"on_duplicate": "send"}')
    assert "Sending it again (on_duplicate='send')" in on_purpose, on_purpose[-6000:]
    assert len(sms_sandbox.inspect.campaigns()) == 3
    assert [campaign["delay"] for campaign in sms_sandbox.inspect.campaigns()] == [
        "2030-12-02 10:00:00",
        "2030-12-03 10:00:00",
        "2030-12-02 10:00:00",
    ]


RACE_FILE = Path(__file__).parent / "campaign_dags" / "sms_claim_race.py"


def test_two_runs_started_at_once_one_paused_between_check_and_claim_send_once(
    sms_sandbox: Any, airflow_home: Path, tmp_path: Path
) -> None:
    """Two ``airflow dags test`` processes of one campaign on one Airflow home, started together; one
    pauses for two seconds inside its claim, between its check and its claim: one campaign reaches the
    sandbox, the other run is refused naming the first."""
    forget_campaigns(airflow_home)
    flag = tmp_path / "paused"
    env = {"AIRFLOW_CONN_SMS_DEFAULT": sms_sandbox.connection_json(), "SMS_TEST_PAUSED_FLAG": str(flag)}
    command = [AIRFLOW, "dags", "test", "sms_claim_race", "-f", str(RACE_FILE)]
    processes = {
        name: subprocess.Popen(
            command,
            env=airflow_env(airflow_home, RACE_FILE.parent, **env, **extra),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for name, extra in (("paused", {"SMS_TEST_PAUSE_CLAIM": "2"}), ("prompt", {}))
    }
    outputs = {name: process.communicate(timeout=DAG_TEST_TIMEOUT)[0] for name, process in processes.items()}

    joined = "\n".join(f"=== {name}\n{output[-4000:]}" for name, output in outputs.items())
    assert flag.exists(), joined  # the paused process did pause inside its claim
    assert len(sms_sandbox.inspect.campaigns()) == 1, joined
    refused = [name for name, output in outputs.items() if "was already sent:" in plain_output_of(output)]
    assert len(refused) == 1, joined
    refusal = plain_output_of(outputs[refused[0]])
    assert re.search(r"run 'manual__[^']+', task 'send' (sent it|is sending it)", refusal), refusal[-3000:]
    assert sms_sandbox.inspect.requests()["/send"] == 1


def plain_output_of(output: str) -> str:
    return plain_output(subprocess.CompletedProcess([], 0, output, ""))
