"""Deferrable waits end at their sensor's timeout on the deployment's triggerer, across its restart.

``deployment_wait_timeout`` waits, deferred, for an NPAI entry of a campaign never sent (``soft_fail``)
and for a webhook to answer 2xx, which it never does; each sensor has ``timeout=20`` and polls every 2 s.
The triggerer is stopped while they wait and started again after 6 s of their wait: each trigger, rebuilt
from the database, ends at the instant its sensor gave it (the task's start + 20 s), not 20 s after the
restart. The NPAI task is skipped, the webhook task fails with AirflowSensorTimeout, as in poke mode.
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING

import pendulum
import pytest

from tests.deployment.harness import AirflowApi, Deployment, wait_for

if TYPE_CHECKING:
    from airflow_provider_sms.sandbox.server import InspectionClient

pytestmark = pytest.mark.deployment

DAG_ID = "deployment_wait_timeout"
TASKS = {"npai_soft_fail": "skipped", "webhook_fail": "failed"}
TIMEOUT, POKE_INTERVAL = 20, 2  # the DAG's
# Seconds into the wait when the triggerer starts again: early enough that a triggerer slow to start on
# busy cores still polls before the timeout.
DOWN_UNTIL = 6
# From the trigger's timeout event to the task's end: the scheduler queues the task, a worker runs it.
RESUME_SLACK = 10
# From the start Airflow records to the task process's own (its context's start_date).
START_SLACK = 10


def polls(deployment: Deployment, path: str) -> int:
    """How many times the triggerer has read ``path`` (no query) through the recording proxy."""
    assert deployment.proxy is not None
    return sum(
        1 for method, seen in deployment.proxy.requests if method == "GET" and seen.split("?")[0] == path
    )


def test_deferred_waits_end_at_their_timeout_across_a_triggerer_restart(
    deployment: Deployment, api: AirflowApi, sandbox: InspectionClient
) -> None:
    before = {path: polls(deployment, path) for path in ("/npai", "/webhook/2")}
    api.unpause(DAG_ID)
    run_id = api.trigger(DAG_ID)

    def states() -> dict[str, str]:
        return {task: str(ti["state"]) for task, ti in api.task_instances(DAG_ID, run_id).items()}

    wait_for("both sensors to defer", lambda: set(states().values()) == {"deferred"}, 120)
    tis = api.task_instances(DAG_ID, run_id)
    started = max(pendulum.parse(tis[task]["start_date"]) for task in TASKS)
    deployment.processes["triggerer"].stop()
    time.sleep(max(0.0, started.add(seconds=DOWN_UNTIL).timestamp() - time.time()))
    deployment.start_component("triggerer")
    restarted = time.time()

    assert api.wait_run(DAG_ID, run_id, timeout=120) == "failed"
    api.pause(DAG_ID)
    tis = api.task_instances(DAG_ID, run_id)
    assert {task: tis[task]["state"] for task in TASKS} == TASKS
    for task in TASKS:
        start, end = (pendulum.parse(tis[task][key]) for key in ("start_date", "end_date"))
        log = api.log(DAG_ID, run_id, task, 1)
        # The timeout event names the instant the sensor gave its trigger: its start + 20 s (the task
        # process's start, a moment after the one Airflow records).
        instants = set(re.findall(r"Sensor has timed out: still waiting for .+? at (\S+), the end of", log))
        assert len(instants) == 1, log[-3000:]
        timeout_at = pendulum.parse(instants.pop())
        assert 0 <= (timeout_at - start).total_seconds() - TIMEOUT <= START_SLACK, (task, start, timeout_at)
        # It ended then, not 20 s after the restart (which would be later than this).
        assert end.timestamp() < min(timeout_at.timestamp() + RESUME_SLACK, restarted + TIMEOUT), (task, end)
        assert tis[task]["try_number"] == 1
    # Polls every 2 s while a triggerer ran, none beyond the timeout.
    for path in ("/npai", "/webhook/2"):
        assert 2 <= polls(deployment, path) - before[path] <= TIMEOUT // POKE_INTERVAL + 1
    assert sandbox.campaigns() == []
