"""The README's first DAG, triggered through the REST API with no logical date (as the UI's "Trigger"
button and most scripts do): its delay comes from when the run was due, not from a data interval."""

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

DAG_ID = "sms_first_campaign"
TASKS = {"simulate", "send", "unreachable", "clean_up"}


def test_the_first_dag_triggered_through_the_rest_api_without_a_logical_date_sends_for_tomorrow_ten(
    api: AirflowApi,
    deployment: Deployment,
    sandbox: InspectionClient,
    unpause_scheduled: Callable[..., None],
) -> None:
    # Unpausing makes the scheduler start the latest daily run as well (catchup=False): let it end, then
    # start from a clean sandbox and claim store, so that only the triggered run's campaign is looked at.
    unpause_scheduled(DAG_ID, hour=9)  # its schedule: 09:00 Paris, daily
    api.finished_scheduled_run(DAG_ID)
    sandbox.reset()
    deployment.forget_campaigns()

    run_id = api.trigger(DAG_ID)  # "logical_date": null

    assert api.wait_run(DAG_ID, run_id, timeout=240) == "success"
    tis = api.task_instances(DAG_ID, run_id)
    assert {task_id: ti["state"] for task_id, ti in tis.items()} == dict.fromkeys(TASKS, "success")
    run = api.call("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}")
    assert run["logical_date"] is None
    assert run["data_interval_end"] is None
    tomorrow_ten = pendulum.parse(run["run_after"]).in_tz("Europe/Paris").add(days=1).at(10)  # type: ignore[union-attr]
    send = api.xcom(DAG_ID, run_id, "send")
    (campaign,) = sandbox.campaigns()
    assert campaign["ticket"] == send["ticket"]
    assert campaign["delay"] == format_delay(next_allowed(tomorrow_ten))
