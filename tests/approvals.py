"""What the approval tests share: the DAG that asks, an API server to answer it, and its figures.

``approval_dags/sms_send_approved.py`` (tests/dags) runs in ``airflow dags test`` in the background while an
``airflow api-server`` on the same database, with the simple auth manager and two users (alice, the
approver, and bob, an admin who is not), takes the answer. tests/dags/test_approval.py answers through
the REST endpoints the Required actions page uses; tests/ui/test_approval_in_airflow.py through that
page, in chromium.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import requests

from tests.conftest import AIRFLOW, DAG_TEST_TIMEOUT, airflow_env, forget_campaigns, plain_output
from tests.hitl_answers import HitlAnswerer
from tests.ui.conftest import SIMPLE_AUTH_MANAGER, free_port, running_api_server

if TYPE_CHECKING:
    from collections.abc import Iterator

DAGS = Path(__file__).parent / "dags" / "approval_dags"
DAG_FILE = DAGS / "sms_send_approved.py"
DAG_ID = "sms_send_approved"
CAMPAIGN_TEXT = "Spring sale: 20 % off everything until Sunday"
APPROVER_PHONE = "33699000001"
USERS = {"alice": "alice-pw", "bob": "bob-pw"}
# Upper bound on the wait for the question (the task runs within seconds; Airflow starts slowly).
QUESTION_TIMEOUT = 180.0
# The states of a task waiting for a person's answer.
PARKED = ("awaiting_input", "deferred")


class Approvals(HitlAnswerer):
    """The API server, and what a test needs to run the DAG and answer as a user."""

    def __init__(self, url: str, home: Path, tmp: Path) -> None:
        super().__init__(url, USERS)
        self.home = home
        self.tmp = tmp
        self.runs: list[subprocess.Popen[str]] = []

    def start(self, sandbox: Any) -> subprocess.Popen[str]:
        """``airflow dags test`` of the DAG, in the background (it waits for the answer)."""
        forget_campaigns(self.home)
        env = airflow_env(
            self.home,
            DAGS,
            AIRFLOW_CONN_SMS_DEFAULT=sandbox.connection_json(),
            AIRFLOW__API__BASE_URL=self.url,
        )
        out = (self.tmp / "dags-test.log").open("w")
        process = subprocess.Popen(
            [AIRFLOW, "dags", "test", DAG_ID, "-f", str(DAG_FILE)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.runs.append(process)
        return process

    def stop_runs(self) -> None:
        """Kill the runs still waiting (a test that failed before the answer): none outlives the server."""
        for process in self.runs:
            if process.poll() is None:
                process.kill()
                process.wait()

    def question(self, process: subprocess.Popen[str]) -> dict[str, Any]:
        """The open question of the DAG's latest run, as the Required actions page lists it, once the
        send task waits for it.

        The task writes the question, then parks (``awaiting_input`` on Airflow 3.3, ``deferred`` on 3.1
        and 3.2). Airflow 3.3.2 resumes a task when the answer finds it parked; an answer given in
        between is recorded but resumes nothing, and the task waits until its timeout.
        """
        token = self.token("alice")
        deadline = time.monotonic() + QUESTION_TIMEOUT
        while time.monotonic() < deadline:
            response = requests.get(
                f"{self.url}/api/v2/dags/{DAG_ID}/dagRuns/~/hitlDetails",
                params={"response_received": "false"},
                headers={"Authorization": f"Bearer {token}"},
                timeout=30,
            )
            response.raise_for_status()
            details = response.json()["hitl_details"]
            if details and details[0]["task_instance"]["state"] in PARKED:
                return dict(details[0])
            if process.poll() is not None:
                pytest.fail(f"airflow dags test ended before asking:\n{self.output(process)[-6000:]}")
            time.sleep(0.5)
        pytest.fail(f"no question within {QUESTION_TIMEOUT}s:\n{self.output(process)[-6000:]}")

    def finish(self, process: subprocess.Popen[str]) -> str:
        """Wait for ``airflow dags test`` to end; its output as one plain line."""
        try:
            process.wait(timeout=DAG_TEST_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            pytest.fail(f"airflow dags test still running:\n{self.output(process)[-6000:]}")
        return self.output(process)

    def output(self, process: subprocess.Popen[str]) -> str:
        text = (self.tmp / "dags-test.log").read_text()
        return plain_output(subprocess.CompletedProcess(process.args, process.returncode or 0, text, ""))

    def send_task(self) -> tuple[str, int]:
        """The state and try number of the latest run's send task."""
        with sqlite3.connect(self.home / "airflow.db") as db:
            row = db.execute(
                "SELECT state, try_number FROM task_instance WHERE dag_id = ? AND task_id = 'send' "
                "ORDER BY start_date DESC LIMIT 1",
                (DAG_ID,),
            ).fetchone()
        return row[0], row[1]

    def result(self) -> dict[str, Any]:
        """The send task's XCom return value in the latest run."""
        with sqlite3.connect(self.home / "airflow.db") as db:
            (value,) = db.execute(
                "SELECT value FROM xcom WHERE dag_id = ? AND task_id = 'send' AND key = 'return_value' "
                "ORDER BY timestamp DESC LIMIT 1",
                (DAG_ID,),
            ).fetchone()
        decoded = json.loads(value)
        return json.loads(decoded) if isinstance(decoded, str) else decoded


@contextmanager
def approval_server(airflow_home: Path, tmp: Path) -> Iterator[Approvals]:
    """An API server with alice and bob (both admins, so only ``approvers`` tells them apart), on
    ``airflow_home``'s database, until the block ends; its log, the passwords file and the DAG run's
    output go to ``tmp``."""
    passwords = tmp / "passwords.json"
    passwords.write_text(json.dumps(USERS))
    port = free_port()
    env = airflow_env(
        airflow_home,
        DAGS,
        AIRFLOW__CORE__AUTH_MANAGER=SIMPLE_AUTH_MANAGER,
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="alice:admin,bob:admin",
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="False",
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(passwords),
        AIRFLOW__API__BASE_URL=f"http://127.0.0.1:{port}",
    )
    with running_api_server(env, port, tmp / "api-server.log") as url:
        approvals = Approvals(url, airflow_home, tmp)
        try:
            yield approvals
        finally:
            approvals.stop_runs()


def campaigns(sandbox: Any) -> list[dict[str, Any]]:
    """The sandbox's campaigns of the DAG's text (the approver's SMS aside)."""
    return [c for c in sandbox.inspect.campaigns() if c["text"] == CAMPAIGN_TEXT]
