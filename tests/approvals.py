"""What the approval tests share: the DAG that asks, an API server to answer it, and its figures.

``approval_dags/sms_send_approved.py`` (tests/dags) runs in ``airflow dags test`` in the background while an
``airflow api-server`` on the same database, with the simple auth manager and three users (alice, the
approver, bob, an admin who is not, and oscar, an Op who may edit Variables), takes the answer.
tests/dags/test_approval.py answers through the REST endpoints the Required actions page uses;
tests/ui/test_approval_in_airflow.py through that page, in chromium.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
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
# The same campaign with min_credits_after=5000 too, which passes when the question is asked.
MIN_CREDITS_DAG_ID = "sms_send_approved_min_credits"
CAMPAIGN_TEXT = "Spring sale: 20 % off everything until Sunday"
APPROVER_PHONE = "33699000001"
USERS = {"alice": "alice-pw", "bob": "bob-pw", "oscar": "oscar-pw"}
ROLES = "alice:admin,bob:admin,oscar:op"
# Upper bound on the wait for the question (the task runs within seconds; Airflow starts slowly).
QUESTION_TIMEOUT = 180.0
# The states of a task waiting for a person's answer.
PARKED = ("awaiting_input", "deferred")
# `airflow dags test` with a fixed run id: the command gives dag.test() a logical date but not run_after,
# which makes the run id. Arguments: the DAG file, the dag_id, the run's date.
RUN_AT = textwrap.dedent(
    """
    import importlib.util, sys
    import pendulum
    spec = importlib.util.spec_from_file_location("approval_dags", sys.argv[1])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    (dag,) = [value for value in vars(module).values() if getattr(value, "dag_id", None) == sys.argv[2]]
    when = pendulum.parse(sys.argv[3])
    dag.test(run_after=when, logical_date=when)
    """
)


class Approvals(HitlAnswerer):
    """The API server, and what a test needs to run the DAG and answer as a user."""

    def __init__(self, url: str, home: Path, tmp: Path) -> None:
        super().__init__(url, USERS)
        self.home = home
        self.tmp = tmp
        self.runs: list[subprocess.Popen[str]] = []
        # The DAG of the latest start(): the one the other methods read.
        self.dag_id = DAG_ID

    def start(self, sandbox: Any, dag_id: str = DAG_ID, run_at: str | None = None) -> subprocess.Popen[str]:
        """``airflow dags test`` of ``dag_id``, in the background (it waits for the answer).

        :param run_at: the run's logical date and run_after (ISO 8601), so its run id: a second start
            with the same one runs that DAG run's task instances again, cleared, as a cleared task is
            (``dag.test()``, the command's own call, given both). Default: now, a new run.
        """
        forget_campaigns(self.home)
        self.dag_id = dag_id
        env = airflow_env(
            self.home,
            DAGS,
            AIRFLOW_CONN_SMS_DEFAULT=sandbox.connection_json(),
            AIRFLOW__API__BASE_URL=self.url,
        )
        out = (self.tmp / "dags-test.log").open("w")
        command = (
            [sys.executable, "-c", RUN_AT, str(DAG_FILE), dag_id, run_at]
            if run_at
            else [AIRFLOW, "dags", "test", dag_id, "-f", str(DAG_FILE)]
        )
        process = subprocess.Popen(
            command,
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
                f"{self.url}/api/v2/dags/{self.dag_id}/dagRuns/~/hitlDetails",
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
        state, try_number, _ = self._latest_send_task()
        return state, try_number

    def run_id(self) -> str:
        """The run id of the latest run's send task."""
        return self._latest_send_task()[2]

    def _latest_send_task(self) -> tuple[str, int, str]:
        with sqlite3.connect(self.home / "airflow.db") as db:
            row = db.execute(
                "SELECT state, try_number, run_id FROM task_instance WHERE dag_id = ? AND task_id = 'send' "
                "ORDER BY start_date DESC LIMIT 1",
                (self.dag_id,),
            ).fetchone()
        return row[0], row[1], row[2]

    def create_variable(self, user: str, key: str, value: str) -> requests.Response:
        """``user`` creates the Variable ``key`` through Airflow's REST API, as the Variables page does;
        the response as it came."""
        return requests.post(
            f"{self.url}/api/v2/variables",
            json={"key": key, "value": value},
            headers={"Authorization": f"Bearer {self.token(user)}"},
            timeout=30,
        )

    def result(self) -> dict[str, Any]:
        """The send task's XCom return value in the latest run."""
        with sqlite3.connect(self.home / "airflow.db") as db:
            (value,) = db.execute(
                "SELECT value FROM xcom WHERE dag_id = ? AND task_id = 'send' AND key = 'return_value' "
                "ORDER BY timestamp DESC LIMIT 1",
                (self.dag_id,),
            ).fetchone()
        decoded = json.loads(value)
        return json.loads(decoded) if isinstance(decoded, str) else decoded


@contextmanager
def approval_server(airflow_home: Path, tmp: Path) -> Iterator[Approvals]:
    """An API server with alice and bob (both admins, so only ``approvers`` tells them apart) and oscar
    (Op: he may edit Variables, not answer), on ``airflow_home``'s database, until the block ends; its
    log, the passwords file and the DAG run's output go to ``tmp``."""
    passwords = tmp / "passwords.json"
    passwords.write_text(json.dumps(USERS))
    port = free_port()
    env = airflow_env(
        airflow_home,
        DAGS,
        AIRFLOW__CORE__AUTH_MANAGER=SIMPLE_AUTH_MANAGER,
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS=ROLES,
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
