"""Scenario 3: the triggerer stops and starts again while a deferrable sensor waits; the sensor succeeds."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pytest

from tests.deployment.harness import AirflowApi, Deployment, wait_for

if TYPE_CHECKING:
    from airflow_provider_sms.sandbox.server import InspectionClient

pytestmark = pytest.mark.deployment

DAG_ID = "deployment_webhook_wait"
WEBHOOK = "9"


def webhook_polls(deployment: Deployment) -> int:
    """How many times the triggerer has asked for the webhook so far."""
    assert deployment.proxy is not None
    return deployment.proxy.requests.count(("GET", f"/webhook/{WEBHOOK}"))


def test_a_deferred_sensor_survives_a_triggerer_restart_and_the_triggerer_only_reads(
    deployment: Deployment, api: AirflowApi, sandbox: InspectionClient
) -> None:
    assert deployment.proxy is not None
    sandbox.set_webhook(WEBHOOK, type="DLR", url="http://127.0.0.1:9/dlr", status="disabled")
    proxied_before = len(deployment.proxy.requests)
    polls_before = webhook_polls(deployment)
    api.unpause(DAG_ID)
    run_id = api.trigger(DAG_ID, {"webhook_id": WEBHOOK})

    def sensor_state() -> str:
        return str(api.task_instances(DAG_ID, run_id)["wait_live"]["state"])

    # Deferred, and the triggerer polls the webhook (every second).
    wait_for("the sensor to defer", lambda: sensor_state() == "deferred", 120)
    wait_for("two polls from the triggerer", lambda: webhook_polls(deployment) >= polls_before + 2, 60)

    deployment.processes["triggerer"].stop()
    polls_when_stopped = webhook_polls(deployment)
    time.sleep(3)
    # Nothing polls while the triggerer is down, and the task still waits (its slot on a worker is free).
    assert webhook_polls(deployment) == polls_when_stopped
    assert sensor_state() == "deferred"
    sandbox.set_webhook(WEBHOOK, status="live")

    deployment.start_component("triggerer")

    assert api.wait_run(DAG_ID, run_id, timeout=120) == "success"
    # The new triggerer picked the trigger up from the database and polled again.
    assert webhook_polls(deployment) > polls_when_stopped
    ti = api.task_instances(DAG_ID, run_id)["wait_live"]
    assert ti["try_number"] == 1
    assert api.xcom(DAG_ID, run_id, "wait_live")["status"] == "live"
    # Only reads reached the sandbox from the triggerer, and nothing was sent by anyone.
    triggerer_requests = deployment.proxy.requests[proxied_before:]
    assert {method for method, _ in triggerer_requests} == {"GET"}
    assert sandbox.campaigns() == []
    assert {path for path, count in sandbox.requests().items() if count} == {"/webhook"}
