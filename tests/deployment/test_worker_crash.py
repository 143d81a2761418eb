"""Scenario 2: the worker running a batched send is killed (-9); the retry resumes after the last batch.

The worker is killed between two batches (after two are confirmed: the task is held at its write of
the third batch as ``sending``), with every process it started, as a crashed machine would stop. The
scheduler notices the missing heartbeats (10 s, see the harness's tuning), fails the try and schedules
the retry, which the other worker runs: it reads the send guard, skips the confirmed batches and sends
the rest. Every number ends up in exactly one campaign.

Scenario 2b: the worker is killed after the service took a batch but before the worker wrote down its
answer (held at the guard write that records it ``sent``), as a worker dying during the POST leaves
it: the retry refuses to send that batch again.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest

from tests.deployment.dags.deployment_batched_send import BATCH_SIZE, NUMBERS, number
from tests.deployment.harness import (
    WORKERS,
    AirflowApi,
    Deployment,
    RequestMatch,
    guard_write,
    process_state,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from airflow_provider_sms.sandbox.server import InspectionClient

pytestmark = pytest.mark.deployment

DAG_ID = "deployment_batched_send"
BATCHES = NUMBERS // BATCH_SIZE
# Batches confirmed before the kill.
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


def start_and_kill(
    deployment: Deployment, api: AirflowApi, sandbox: InspectionClient, held_write: RequestMatch
) -> tuple[str, dict[str, Any], dict[str, dict[str, Any]]]:
    """Start a run of the batched send; kill its worker's whole process tree at the held guard write.

    The workers reach the API server through the harness's execution proxy: it holds back the first
    guard write ``held_write`` matches, so the task stops there, at a chosen point of the send rather
    than one caught from outside (batches follow each other within milliseconds). The worker is killed
    while the write is held; the write is then dropped, never reaching the database.

    Returns the run's id, the first try (as the REST API gave it) and the guard's batches at the kill.
    """
    assert deployment.execution_proxy is not None
    sandbox.set_credits(10 * NUMBERS)
    held = deployment.execution_proxy.hold(held_write)
    try:
        api.unpause(DAG_ID)
        run_id = api.trigger(DAG_ID)
        held.wait(timeout=180)
        first_try = api.task_instances(DAG_ID, run_id)["send"]
        assert first_try["state"] == "running"
        assert first_try["hostname"] in WORKERS
        deployment.processes[first_try["hostname"]].kill()
    finally:
        deployment.execution_proxy.release_hold()
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
    run_id, first_try, batches_at_kill = start_and_kill(
        deployment, api, sandbox, guard_write(DAG_ID, KILL_AFTER, "sending")
    )
    killed_at = time.monotonic()
    victim = first_try["hostname"]
    confirmed = len(batches_at_kill)
    assert confirmed == KILL_AFTER
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


def test_a_worker_killed_before_recording_an_answer_the_retry_refuses_to_send_that_batch_again(
    deployment: Deployment, api: AirflowApi, sandbox: InspectionClient, workers_back: None
) -> None:
    run_id, first_try, batches_at_kill = start_and_kill(
        deployment, api, sandbox, guard_write(DAG_ID, KILL_AFTER, "sent")
    )
    in_flight = max(batches_at_kill, key=int)
    assert int(in_flight) == KILL_AFTER
    assert batches_at_kill[in_flight]["state"] == "sending"
    assert len(sandbox.campaigns()) == KILL_AFTER + 1  # the service took it

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
