"""A person approves a campaign over its gate (``on_cost_exceeded="ask"``), on real Airflow.

``airflow dags test`` runs ``approval_dags/sms_send_approved.py`` against the sandbox while an
``airflow api-server`` on the same database takes the answer, as Airflow's UI gives it: the question
is read and answered through the REST endpoints the Required actions page uses, as alice (the approver)
or bob (an admin who is not). The sandbox says what was sent.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import requests

from airflow_provider_sms._compat import airflow_3_1_or_later
from tests.conftest import AIRFLOW, DAG_TEST_TIMEOUT, airflow_env, forget_campaigns, plain_output
from tests.ui.conftest import SIMPLE_AUTH_MANAGER, free_port, running_api_server

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = [
    pytest.mark.integration,
    pytest.mark.dags,
    pytest.mark.skipif(not airflow_3_1_or_later(), reason="human-in-the-loop needs Airflow 3.1+"),
]

DAGS = Path(__file__).parent / "approval_dags"
DAG_FILE = DAGS / "sms_send_approved.py"
DAG_ID = "sms_send_approved"
CAMPAIGN_TEXT = "Spring sale: 20 % off everything until Sunday"
APPROVER_PHONE = "33699000001"
USERS = {"alice": "alice-pw", "bob": "bob-pw"}
# Upper bound on the wait for the question (the task runs within seconds; Airflow starts slowly).
QUESTION_TIMEOUT = 180.0


class Approvals:
    """The API server, and what a test needs to run the DAG and answer as a user."""

    def __init__(self, url: str, home: Path, tmp: Path) -> None:
        self.url = url
        self.home = home
        self.tmp = tmp

    def token(self, user: str) -> str:
        response = requests.post(
            f"{self.url}/auth/token", json={"username": user, "password": USERS[user]}, timeout=30
        )
        response.raise_for_status()
        return str(response.json()["access_token"])

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
        return subprocess.Popen(
            [AIRFLOW, "dags", "test", DAG_ID, "-f", str(DAG_FILE)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def question(self, process: subprocess.Popen[str]) -> dict[str, Any]:
        """The open question of the DAG's latest run, as the Required actions page lists it."""
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
            if details:
                return dict(details[0])
            if process.poll() is not None:
                pytest.fail(f"airflow dags test ended before asking:\n{self.output(process)[-6000:]}")
            time.sleep(0.5)
        pytest.fail(f"no question within {QUESTION_TIMEOUT}s:\n{self.output(process)[-6000:]}")

    def answer(self, question: dict[str, Any], user: str, option: str) -> requests.Response:
        ti = question["task_instance"]
        return requests.patch(
            f"{self.url}/api/v2/dags/{ti['dag_id']}/dagRuns/{ti['dag_run_id']}/taskInstances/"
            f"{ti['task_id']}/{ti['map_index']}/hitlDetails",
            json={"chosen_options": [option], "params_input": {}},
            headers={"Authorization": f"Bearer {self.token(user)}"},
            timeout=30,
        )

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


@pytest.fixture(scope="module")
def approvals(airflow_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Approvals]:
    """An API server with alice and bob (both admins, so only ``approvers`` tells them apart)."""
    tmp = tmp_path_factory.mktemp("approvals")
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
        yield Approvals(url, airflow_home, tmp)


def campaigns(sandbox: Any) -> list[dict[str, Any]]:
    """The sandbox's campaigns of the DAG's text (the approver's SMS aside)."""
    return [c for c in sandbox.inspect.campaigns() if c["text"] == CAMPAIGN_TEXT]


def test_send_sends_the_approved_campaign_once_and_texts_the_approver(
    sms_sandbox: Any, approvals: Approvals
) -> None:
    process = approvals.start(sms_sandbox)
    question = approvals.question(process)

    assert question["options"] == ["Send", "Do not send"]
    assert question["defaults"] == ["Do not send"]
    assert [user["name"] for user in question["assigned_users"]] == ["alice"]
    assert "6 credits" in question["subject"]
    body = question["body"]
    for shown in (
        "**6 credits** (max_cost 1)",
        "cost 6 credits is over max_cost 1",
        "6 given, 6 would be sent",
    ):
        assert shown in body
    assert "GSM 7-bit" in body
    assert CAMPAIGN_TEXT in body
    assert "sms_send_approved" in body
    assert campaigns(sms_sandbox) == []
    # The approver's SMS: the cost, the gate and the link to the question.
    (texted,) = [c for c in sms_sandbox.inspect.campaigns() if c["sent_to"] == [APPROVER_PHONE]]
    assert "6 credits" in texted["text"]
    assert "max_cost 1" in texted["text"]
    assert f"/dags/{DAG_ID}/runs/" in texted["text"]
    assert "/tasks/send/required_actions" in texted["text"]

    assert approvals.answer(question, "bob", "Send").status_code == 403  # not an approver
    assert approvals.answer(question, "alice", "Send").status_code == 200
    assert approvals.answer(question, "alice", "Do not send").status_code == 409
    output = approvals.finish(process)

    assert approvals.send_task() == ("success", 1), output[-6000:]
    sent = campaigns(sms_sandbox)
    assert len(sent) == 2  # the two batches, each once
    assert sorted(n for c in sent for n in c["sent_to"]) == sorted(f"3361200020{i}" for i in range(1, 7))
    result = approvals.result()
    assert result["cost"] == 6
    assert len(result["tickets"]) == 2
    assert result["gate"]["approval"]["by"] == "alice"
    assert result["gate"]["approval"]["cost"] == 6
    assert "Approved: alice answered 'Send'" in output


def test_do_not_send_skips_the_task_and_sends_nothing(sms_sandbox: Any, approvals: Approvals) -> None:
    process = approvals.start(sms_sandbox)
    question = approvals.question(process)

    assert approvals.answer(question, "alice", "Do not send").status_code == 200
    output = approvals.finish(process)

    assert approvals.send_task()[0] == "skipped", output[-6000:]
    assert campaigns(sms_sandbox) == []
    assert "alice answered 'Do not send'" in output
    approval = approvals.result()["gate"]["approval"]
    assert approval["choice"] == "Do not send"
    assert approval["by"] == "alice"
    assert not approval["timed_out"]


def test_a_price_raised_after_the_answer_is_not_paid(sms_sandbox: Any, approvals: Approvals) -> None:
    process = approvals.start(sms_sandbox)
    question = approvals.question(process)

    sms_sandbox.inspect.set_price(2)  # the tariff doubles between the question and the send
    assert approvals.answer(question, "alice", "Send").status_code == 200
    output = approvals.finish(process)

    assert approvals.send_task() == ("failed", 1), output[-6000:]
    assert campaigns(sms_sandbox) == []
    assert "it now costs 12 credits, more than the 6 approved" in output


def test_a_retry_after_an_approved_batch_neither_asks_again_nor_sends_it_twice(
    sms_sandbox: Any, approvals: Approvals
) -> None:
    process = approvals.start(sms_sandbox)
    question = approvals.question(process)

    # Enough credits for the first batch only: the second is refused (-3, nothing created); the task
    # fails and Airflow retries it 20 s later, by which time the credits are topped up.
    sms_sandbox.inspect.set_credits(3)
    assert approvals.answer(question, "alice", "Send").status_code == 200
    deadline = time.monotonic() + 120
    while sms_sandbox.inspect.requests().get("/send", 0) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)  # the approver's SMS, batch 1, then batch 2 refused
    sms_sandbox.inspect.set_credits(10_000)
    output = approvals.finish(process)

    assert approvals.send_task() == ("success", 2), output[-6000:]
    sent = campaigns(sms_sandbox)
    assert len(sent) == 2
    assert sorted(n for c in sent for n in c["sent_to"]) == sorted(f"3361200020{i}" for i in range(1, 7))
    assert output.count("Asking in Airflow's Required actions") == 1
    assert "Batch 1/2 was already sent by an earlier attempt" in output
