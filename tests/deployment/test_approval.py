"""Scenario: a campaign over its gate waits for a person's answer (``on_cost_exceeded="ask"``, #32).

The send task of ``deployment_send_approved`` (tests/deployment/dags) asks alice in Airflow's Required
actions and parks: ``awaiting_input`` on Airflow 3.3 (no worker, triggerer or pool slot held), deferred
to the triggerer on 3.1 and 3.2. The answer resumes it on whichever worker is up.

- Both Celery workers are killed (SIGKILL, with everything they started) while the question is open,
  and one is started again: the task still waits (the scheduler's heartbeat check does not fail it),
  the answer "Send" resumes it on the new worker and the campaign goes out once.
- Nobody answers the 20-second question: the default "Do not send" is taken (Airflow 3.3: the
  scheduler's timeout sweep, every 15 s), the task is skipped and nothing is sent.
- A task of another DAG reads the connection, writes an approval "by alice" into a Variable and tries
  to answer "Send" in the waiting task's record: Airflow refuses the record's write, the send keeps
  waiting, and once cleared it asks again: nothing goes out on the forgery.

The deployment's own API server lets anyone in as an admin (``simple_auth_manager_all_admins``), where
``approvers`` does not apply: alice answers on a second API server of the same deployment whose simple
auth manager has users and passwords (alice, and bob, an admin who is not an approver).
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import pytest

from tests.deployment.dags.deployment_send_approved import APPROVER, NUMBERS, SHORT_TIMEOUT, TEXT
from tests.deployment.harness import WORKERS, AirflowApi, Deployment, wait_for
from tests.hitl_answers import HitlAnswerer

if TYPE_CHECKING:
    from collections.abc import Iterator

    from airflow_provider_sms.sandbox.server import InspectionClient

pytestmark = pytest.mark.deployment

DAG_ID = "deployment_send_approved"
TIMEOUT_DAG_ID = "deployment_send_approved_timeout"
# The API server with users (index 3: "api-server-4", clear of those test_two_api_servers starts).
USERS_API_SERVER = 3
USERS = {APPROVER: f"{APPROVER}-pw", "bob": "bob-pw"}
# The task parked this long after its workers died still waits: more than the harness's heartbeat
# timeout (10 s, checked every 2 s), after which a running task whose worker died would be failed.
PARKED_CHECK = 16.0
QUESTION_TIMEOUT = 180.0
RUN_TIMEOUT = 180.0


def parked_state() -> str:
    """The state of a task waiting for its answer: ``awaiting_input`` from Airflow 3.3, else ``deferred``."""
    from airflow import __version__
    from packaging.version import Version

    return "awaiting_input" if Version(__version__).release >= (3, 3) else "deferred"


@pytest.fixture(scope="module")
def answers(deployment: Deployment) -> Iterator[HitlAnswerer]:
    """A second API server (same database and secrets) whose simple auth manager has alice and bob."""
    passwords = deployment.root / "approval-passwords.json"
    passwords.write_text(json.dumps(USERS))
    deployment.start_api_server(
        USERS_API_SERVER,
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS=",".join(f"{user}:admin" for user in USERS),
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="False",
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(passwords),
    )
    client = HitlAnswerer(deployment.api_url(USERS_API_SERVER), USERS)
    wait_for(f"a JWT for {APPROVER}", lambda: bool(client.token(APPROVER)), 60)
    try:
        yield client
    finally:
        deployment.stop_api_server(USERS_API_SERVER)


@pytest.fixture
def workers_back(deployment: Deployment) -> Iterator[None]:
    """Start again, after the test, the workers the test killed."""
    yield
    for name in WORKERS:
        if not deployment.processes[name].running:
            deployment.start_component(name)


def open_question(api: AirflowApi, dag_id: str, run_id: str) -> dict[str, Any]:
    """The run's unanswered question, once its send task has asked and parked (bounded wait)."""
    found: list[dict[str, Any]] = []

    def asked() -> bool:
        body = api.call("GET", f"/dags/{dag_id}/dagRuns/~/hitlDetails", params={"response_received": "false"})
        found[:] = [q for q in body["hitl_details"] if q["task_instance"]["dag_run_id"] == run_id]
        return bool(found) and api.task_instances(dag_id, run_id)["send"]["state"] == parked_state()

    wait_for(f"the question of {dag_id} run {run_id}", asked, QUESTION_TIMEOUT, interval=0.5)
    return found[0]


def test_workers_killed_while_the_question_waits_the_answer_sends_once_on_a_new_worker(
    deployment: Deployment,
    api: AirflowApi,
    sandbox: InspectionClient,
    answers: HitlAnswerer,
    workers_back: None,
    timings: dict[str, float],
) -> None:
    api.unpause(DAG_ID)
    run_id = api.trigger(DAG_ID)
    question = open_question(api, DAG_ID, run_id)
    assert question["options"] == ["Send", "Do not send"]
    assert question["defaults"] == ["Do not send"]
    assert [user["name"] for user in question["assigned_users"]] == [APPROVER]
    assert "2 credits" in question["subject"]
    asked = api.task_instances(DAG_ID, run_id)["send"]
    assert asked["hostname"] in WORKERS

    # Both workers die with everything they started, as crashed machines would stop.
    for name in WORKERS:
        deployment.processes[name].kill()
    # Past the heartbeat timeout, the task still waits for its answer: no worker was holding it.
    time.sleep(PARKED_CHECK)
    assert api.task_instances(DAG_ID, run_id)["send"]["state"] == parked_state()
    assert open_question(api, DAG_ID, run_id)["task_instance"]["task_id"] == "send"
    assert sandbox.campaigns() == []

    deployment.start_component(WORKERS[0])
    assert answers.answer(question, "bob", "Send").status_code == 403  # an admin, not an approver
    answered_at = time.monotonic()
    response = answers.answer(question, APPROVER, "Send")
    assert response.status_code == 200, response.text
    assert answers.answer(question, APPROVER, "Do not send").status_code == 409

    assert api.wait_run(DAG_ID, run_id, timeout=RUN_TIMEOUT) == "success"
    timings["approval: from the answer to the send's success"] = time.monotonic() - answered_at
    ti = api.task_instances(DAG_ID, run_id)["send"]
    assert ti["state"] == "success"
    assert ti["try_number"] == asked["try_number"]  # resumed, not retried
    assert ti["hostname"] == WORKERS[0]  # the only worker up
    (campaign,) = sandbox.campaigns()
    assert campaign["text"] == TEXT
    assert sorted(campaign["sent_to"]) == sorted(NUMBERS)
    result = api.xcom(DAG_ID, run_id, "send")
    assert result["tickets"] == [campaign["ticket"]]
    assert result["cost"] == 2
    approval = result["gate"]["approval"]
    assert approval["choice"] == "Send"
    assert approval["by"] == APPROVER
    assert approval["cost"] == 2
    log = api.log(DAG_ID, run_id, "send", ti["try_number"])
    assert f"Approved: {APPROVER} answered 'Send'" in log


def test_no_answer_in_time_skips_the_task_and_sends_nothing(
    api: AirflowApi, sandbox: InspectionClient, timings: dict[str, float]
) -> None:
    api.unpause(TIMEOUT_DAG_ID)
    run_id = api.trigger(TIMEOUT_DAG_ID)
    open_question(api, TIMEOUT_DAG_ID, run_id)
    asked_at = time.monotonic()

    # The default is taken at the timeout (20 s), found by a sweep every 15 s, then a worker skips.
    assert api.wait_run(TIMEOUT_DAG_ID, run_id, timeout=RUN_TIMEOUT) == "success"
    waited = time.monotonic() - asked_at
    timings["approval: from the question to the skip (20 s timeout)"] = waited
    assert waited >= SHORT_TIMEOUT.total_seconds() - 2  # not before the timeout (2 s for the polling)
    ti = api.task_instances(TIMEOUT_DAG_ID, run_id)["send"]
    assert ti["state"] == "skipped"
    assert sandbox.campaigns() == []
    assert sandbox.requests().get("/send", 0) == 0
    result = api.xcom(TIMEOUT_DAG_ID, run_id, "send")
    assert result["tickets"] == []
    assert result["sent"] == 0
    approval = result["gate"]["approval"]
    assert approval["timed_out"] is True
    assert approval["choice"] == "Do not send"
    assert approval["by"] is None
    log = api.log(TIMEOUT_DAG_ID, run_id, "send", ti["try_number"])
    assert "Not sent: no answer within 20 s of the question asked at" in log
    assert "the default 'Do not send' was taken" in log


FORGER_DAG_ID = "deployment_forge_approval"


def test_another_dags_task_cannot_approve_and_a_cleared_send_asks_again(
    api: AirflowApi, sandbox: InspectionClient, answers: HitlAnswerer
) -> None:
    api.unpause(DAG_ID)
    api.unpause(FORGER_DAG_ID)
    run_id = api.trigger(DAG_ID)
    question = open_question(api, DAG_ID, run_id)
    send = api.task_instances(DAG_ID, run_id)["send"]

    forger_run = api.trigger(FORGER_DAG_ID, conf={"dag_id": DAG_ID, "run_id": run_id, "ti_id": send["id"]})
    api.wait_run(FORGER_DAG_ID, forger_run, timeout=RUN_TIMEOUT)
    forged = api.xcom(FORGER_DAG_ID, forger_run, "forge")
    assert forged["token_read"] is True  # any task reads any connection
    assert forged["hitl"].startswith("refused"), forged  # the record is the task instance's own
    # The question is still open, the send still waits, nothing went out.
    assert open_question(api, DAG_ID, run_id)["task_instance"]["task_id"] == "send"
    assert sandbox.campaigns() == []

    assert answers.answer(question, APPROVER, "Do not send").status_code == 200
    api.wait_run(DAG_ID, run_id, timeout=RUN_TIMEOUT)
    assert api.task_instances(DAG_ID, run_id)["send"]["state"] == "skipped"

    # Cleared, the same task instance reads its guard (where the forged approval is) and asks again.
    api.call(
        "POST",
        f"/dags/{DAG_ID}/clearTaskInstances",
        json={
            "dry_run": False,
            "task_ids": ["send"],
            "dag_run_id": run_id,
            "only_failed": False,
            "reset_dag_runs": True,
        },
    )
    again = open_question(api, DAG_ID, run_id)
    assert again["subject"] == question["subject"]
    assert sandbox.campaigns() == []
    assert answers.answer(again, APPROVER, "Do not send").status_code == 200
    api.wait_run(DAG_ID, run_id, timeout=RUN_TIMEOUT)
    ti = api.task_instances(DAG_ID, run_id)["send"]
    assert ti["state"] == "skipped"
    assert sandbox.campaigns() == []
    log = api.log(DAG_ID, run_id, "send", ti["try_number"])
    assert "Asking in Airflow's Required actions" in log
    assert "Approved:" not in log
