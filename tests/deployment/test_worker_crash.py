"""Scenario 2: the worker running a batched send is killed (-9); the retry resumes after the last batch.

The worker is killed between two batches (after at least two are confirmed), with every process it
started, as a crashed machine would stop. The scheduler notices the missing heartbeats (10 s, see the
harness's tuning), fails the try and schedules the retry, which the other worker runs: it reads the
send guard, skips the confirmed batches and sends the rest. Every number ends up in exactly one campaign.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_provider_sms.sandbox.server import InspectionClient
from tests.deployment.dags.deployment_batched_send import BATCH_SIZE, NUMBERS, number
from tests.deployment.harness import WORKERS, AirflowApi, Deployment, DeploymentError, process_state

pytestmark = pytest.mark.deployment

DAG_ID = "deployment_batched_send"
BATCHES = NUMBERS // BATCH_SIZE
# Each POST /send takes a moment: batches follow each other at a human pace.
SLOW_SEND = 0.5
KILL_AFTER = 2


@pytest.fixture
def workers_back(deployment: Deployment) -> Iterator[None]:
    """Start again, after the test, a worker the test killed."""
    yield
    for name in WORKERS:
        if not deployment.processes[name].running:
            deployment.start_component(name)


def guard_batches(api: AirflowApi, run_id: str) -> dict[str, dict[str, Any]]:
    """The batches recorded by the send guard of this run's task (an Airflow Variable)."""
    for value in api.variables("sms_send_guard").values():
        document = json.loads(value)
        if document["run_id"] == run_id:
            return dict(document["batches"])
    return {}


def at_wanted_point(api: AirflowApi, sandbox: InspectionClient, run_id: str, in_flight: bool) -> bool:
    """Whether KILL_AFTER batches are confirmed and the next is in flight, or not begun.

    Between two batches the guard holds only ``sent`` batches, and the sandbox as many campaigns. In
    flight, the last batch is ``sending`` and the sandbox has recorded it but not yet answered (slowed).
    """
    batches = guard_batches(api, run_id)
    states = [batch["state"] for _, batch in sorted(batches.items(), key=lambda item: int(item[0]))]
    expected = ["sent"] * (len(states) - 1) + ["sending" if in_flight else "sent"]
    wanted = states.count("sent") >= KILL_AFTER and states == expected
    return wanted and sandbox.requests().get("/send") == len(states)


def freeze_at_wanted_point(
    api: AirflowApi, sandbox: InspectionClient, run_id: str, pid: int, in_flight: bool, timeout: float
) -> None:
    """Stop the task's process (SIGSTOP) at the wanted point, checked again once it is stopped.

    Between two batches the task takes only milliseconds to record the next one as ``sending``: seen
    from outside, the point is gone before a kill lands. So the process is stopped as soon as the point
    is seen, and checked again once stopped (after any guard write it had under way has landed); if it
    had moved on, it goes on (SIGCONT) and the next batch gives another chance.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if at_wanted_point(api, sandbox, run_id, in_flight):
            os.kill(pid, signal.SIGSTOP)
            time.sleep(0.3)  # a guard write already sent reaches the database
            if at_wanted_point(api, sandbox, run_id, in_flight):
                return
            os.kill(pid, signal.SIGCONT)
        time.sleep(0.01)
    raise DeploymentError(f"the send did not reach the wanted point within {timeout} s")


def running_try(api: AirflowApi, run_id: str, timeout: float) -> dict[str, Any]:
    """The send task's first try once it runs on a worker (hostname and pid known)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ti = api.task_instances(DAG_ID, run_id).get("send") or {}
        if ti.get("state") == "running" and ti.get("pid") and ti.get("hostname"):
            return ti
        time.sleep(0.1)
    raise DeploymentError(f"the send task did not start within {timeout} s")


def start_and_kill(
    deployment: Deployment, api: AirflowApi, sandbox: InspectionClient, in_flight: bool
) -> tuple[str, dict[str, Any], dict[str, dict[str, Any]]]:
    """Start a run of the batched send and kill its worker's whole process tree at the wanted point.

    Returns the run's id, the first try (as the REST API gave it) and the guard's batches at the kill.
    """
    sandbox.set_credits(10 * NUMBERS)
    sandbox.set_faults(slow=SLOW_SEND, endpoints=["/send"])
    api.unpause(DAG_ID)
    run_id = api.trigger(DAG_ID)
    first_try = running_try(api, run_id, timeout=120)
    assert first_try["hostname"] in WORKERS
    freeze_at_wanted_point(api, sandbox, run_id, first_try["pid"], in_flight, timeout=120)
    deployment.processes[first_try["hostname"]].kill()
    # The task's process died with its worker; the guard is as it was at the kill.
    assert process_state(first_try["pid"]) in (None, "Z"), f"task process {first_try['pid']} survived"
    return run_id, first_try, guard_batches(api, run_id)


def test_a_worker_killed_mid_campaign_the_retry_resumes_after_the_last_confirmed_batch(
    deployment: Deployment,
    api: AirflowApi,
    sandbox: InspectionClient,
    workers_back: None,
    timings: dict[str, float],
) -> None:
    run_id, first_try, batches_at_kill = start_and_kill(deployment, api, sandbox, in_flight=False)
    killed_at = time.monotonic()
    victim = first_try["hostname"]
    confirmed = len(batches_at_kill)
    assert confirmed >= KILL_AFTER
    assert {batch["state"] for batch in batches_at_kill.values()} == {"sent"}

    assert api.wait_run(DAG_ID, run_id, timeout=180) == "success"
    recovered_in = time.monotonic() - killed_at

    tries = api.tries(DAG_ID, run_id, "send")
    assert [(t["try_number"], t["state"]) for t in tries] == [(1, "failed"), (2, "success")]
    assert tries[0]["hostname"] == victim
    assert tries[1]["hostname"] in WORKERS
    assert tries[1]["hostname"] != victim  # the only worker left
    result = api.xcom(DAG_ID, run_id, "send")
    assert result["batches"] == BATCHES
    assert result["resumed_batches"] == confirmed
    assert result["sent"] == NUMBERS
    assert len(set(result["tickets"])) == BATCHES
    # Every number is in exactly one campaign.
    campaigns = sandbox.campaigns()
    assert len(campaigns) == BATCHES
    assert sorted(c["ticket"] for c in campaigns) == sorted(result["tickets"])
    counts = Counter(n for campaign in campaigns for n in campaign["sent_to"])
    assert len(counts) == NUMBERS
    assert set(counts.values()) == {1}
    assert counts.keys() == {number(i) for i in range(NUMBERS)}
    assert {batch["state"] for batch in guard_batches(api, run_id).values()} == {"sent"}
    timings["scenario 2: from the kill to the retry's success"] = recovered_in


def test_a_worker_killed_during_a_post_the_retry_refuses_to_send_that_batch_again(
    deployment: Deployment, api: AirflowApi, sandbox: InspectionClient, workers_back: None
) -> None:
    run_id, first_try, batches_at_kill = start_and_kill(deployment, api, sandbox, in_flight=True)
    in_flight = max(batches_at_kill, key=int)
    assert batches_at_kill[in_flight]["state"] == "sending"

    # The retry fails, naming the batch whose outcome is unknown: it was recorded by the service before
    # the worker died, so sending it again would send its numbers twice.
    assert api.wait_run(DAG_ID, run_id, timeout=180) == "failed"
    tries = api.tries(DAG_ID, run_id, "send")
    assert [(t["try_number"], t["state"]) for t in tries] == [(1, "failed"), (2, "failed")]
    assert tries[0]["hostname"] == first_try["hostname"]
    log = api.log(DAG_ID, run_id, "send", 2)
    assert f"Batch {int(in_flight) + 1}/{BATCHES} may have been sent by an earlier attempt" in log
    campaigns = sandbox.campaigns()
    assert len(campaigns) == len(batches_at_kill)
    counts = Counter(n for campaign in campaigns for n in campaign["sent_to"])
    assert set(counts.values()) == {1}
    assert len(counts) == len(batches_at_kill) * BATCH_SIZE
    assert guard_batches(api, run_id) == batches_at_kill
