"""Scenario 2: the worker running a batched send is killed (-9); the retry resumes after the last batch.

The worker is killed between two batches (after at least two are confirmed), its whole process group
at once, as a crashed machine would stop. The scheduler notices the missing heartbeats (10 s, see the
harness's tuning), fails the try and schedules the retry, which the other worker runs: it reads the
send guard, skips the confirmed batches and sends the rest. Every number ends up in exactly one campaign.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_sms.sandbox.server import InspectionClient
from tests.deployment.dags.deployment_batched_send import BATCH_SIZE, NUMBERS, number
from tests.deployment.harness import WORKERS, AirflowApi, Deployment, DeploymentError

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


def process_state(pid: int) -> str | None:
    """The state letter of process ``pid`` (``Z``: dead, not yet reaped), or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    # The command name (in parentheses) may hold spaces: the state follows its closing parenthesis.
    return stat.rsplit(")", 1)[1].split()[0]


def guard_batches(api: AirflowApi, run_id: str) -> dict[str, dict[str, Any]]:
    """The batches recorded by the send guard of this run's task (an Airflow Variable)."""
    for value in api.variables("sms_send_guard").values():
        document = json.loads(value)
        if document["run_id"] == run_id:
            return dict(document["batches"])
    return {}


def wait_between_batches(api: AirflowApi, sandbox: InspectionClient, run_id: str, timeout: float) -> int:
    """Wait until at least KILL_AFTER batches are confirmed and the next one is not begun; return how many.

    Between two batches the guard holds only ``sent`` batches and the sandbox as many campaigns.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        batches = guard_batches(api, run_id)
        sent = [index for index, batch in batches.items() if batch["state"] == "sent"]
        if len(sent) >= KILL_AFTER and len(sent) == len(batches) == sandbox.requests().get("/send"):
            return len(sent)
        time.sleep(0.02)
    raise DeploymentError(f"no pause between batches {KILL_AFTER} and {KILL_AFTER + 1} within {timeout} s")


def test_a_worker_killed_mid_campaign_the_retry_resumes_after_the_last_confirmed_batch(
    deployment: Deployment,
    api: AirflowApi,
    sandbox: InspectionClient,
    workers_back: None,
    timings: dict[str, float],
) -> None:
    sandbox.set_credits(10 * NUMBERS)
    sandbox.set_faults(slow=SLOW_SEND, endpoints=["/send"])
    api.unpause(DAG_ID)
    run_id = api.trigger(DAG_ID)

    confirmed = wait_between_batches(api, sandbox, run_id, timeout=120)
    first_try = api.task_instances(DAG_ID, run_id)["send"]
    victim = first_try["hostname"]
    assert victim in WORKERS
    deployment.processes[victim].kill()
    killed_at = time.monotonic()

    # The task's process died with its worker, and it had not begun another batch.
    assert process_state(first_try["pid"]) in (None, "Z"), f"task process {first_try['pid']} survived"
    batches_at_kill = guard_batches(api, run_id)
    assert len(batches_at_kill) == confirmed, "the kill landed after the next batch began"
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
