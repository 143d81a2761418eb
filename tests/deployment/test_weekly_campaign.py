"""Scenario 1: the example weekly campaign, triggered through the REST API on the distributed deployment."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pendulum
import pytest

from airflow_provider_sms.delay import format_delay
from airflow_provider_sms.send_window import next_allowed

if TYPE_CHECKING:
    from collections.abc import Callable

    from airflow_provider_sms.sandbox.server import InspectionClient
    from tests.deployment.harness import AirflowApi, Deployment

pytestmark = pytest.mark.deployment

DAG_ID = "sms_weekly_campaign"
TASKS = {"dlr_webhook_live", "simulate", "send", "wait_for_npai", "report_npai"}


def test_weekly_campaign_runs_on_celery_workers_with_its_sensors_in_the_triggerer(
    deployment: Deployment,
    api: AirflowApi,
    sandbox: InspectionClient,
    unpause_scheduled: Callable[..., None],
) -> None:
    assert deployment.proxy is not None
    triggerer_requests_before = len(deployment.proxy.requests)
    unpause_scheduled(DAG_ID, hour=9, weekday=pendulum.MONDAY)  # its schedule: Mondays 09:00 Paris
    # Unpausing also starts the run of the latest Monday 09:00 (catchup=False): let it end, then start
    # from a clean sandbox and claim store. On a Monday from 09:00 to 11:00 Paris its delay (11:00) is still
    # to come and it sends: before 10:00, or on a public holiday (both moved to Tuesday 08:00), within
    # the hour of the triggered run's, the same campaign, which the claim store would refuse to one of them.
    api.finished_scheduled_run(DAG_ID)
    sandbox.reset()
    deployment.forget_campaigns()
    run_id = api.trigger(DAG_ID)

    assert api.wait_run(DAG_ID, run_id, timeout=180) == "success"

    tis = api.task_instances(DAG_ID, run_id)
    assert {task_id: ti["state"] for task_id, ti in tis.items()} == dict.fromkeys(TASKS, "success")
    # Every task ran on one of the two Celery workers (their hostname_callable names them).
    assert {ti["hostname"] for ti in tis.values()} <= {"worker1", "worker2"}
    # Both sensors deferred: the triggerer (and only it, through its own connection) polled the sandbox.
    triggerer_requests = deployment.proxy.requests[triggerer_requests_before:]
    assert ("GET", "/webhook/1") in triggerer_requests
    assert any(method == "GET" and path.startswith("/npai") for method, path in triggerer_requests)
    assert {method for method, _ in triggerer_requests} == {"GET"}
    for sensor in ("dlr_webhook_live", "wait_for_npai"):
        log = api.log(DAG_ID, run_id, sensor, tis[sensor]["try_number"])
        assert "deferred" in log.lower(), log[-3000:]

    send = api.xcom(DAG_ID, run_id, "send")
    (campaign,) = [c for c in sandbox.campaigns() if c["ticket"] == send["ticket"]]
    assert campaign["endpoint"] == "/send/lists"
    assert campaign["lists"] == [1, 2]
    # Triggered without a logical date, the run has no data interval: the delay is two hours after the
    # trigger, in Paris time, moved into the marketing window.
    run = api.call("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}")
    assert run["data_interval_end"] is None
    run_after = pendulum.parse(run["run_after"])
    assert campaign["delay"] == send["delay"] == format_delay(next_allowed(run_after.add(hours=2)))
    # The deferrable NPAI sensor found the unreachable number of this very campaign.
    assert api.xcom(DAG_ID, run_id, "report_npai") == ["33700000001"]
