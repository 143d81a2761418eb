"""Scenario: the delivery wait tells the truth on a real deployment (Celery worker, triggerer, API server).

What the wait's task log says when every report is refused (the reason and what to change), when its
deadline starts for a delayed campaign (when the campaign goes out, not when the task starts), and a
send whose receiver lacks its tables failing before any request, naming ``airflow db migrate``.
sms_default is stored in the metadata database here (see the harness).
"""

from __future__ import annotations

import re
import time
from datetime import timedelta
from typing import TYPE_CHECKING

import pendulum
import pytest

from tests.deployment.harness import AirflowApi, Deployment, wait_for

if TYPE_CHECKING:
    from airflow_provider_sms.sandbox.server import InspectionClient

pytestmark = pytest.mark.deployment

DAG_ID = "deployment_send_and_wait"
REFUSING_DAG_ID = "deployment_send_and_wait_sms_service_only"
HEALTH_TTL = 6  # the receiver's health answer is kept 5 s


def api_url(deployment: Deployment) -> str:
    return f"http://127.0.0.1:{deployment.ports['api']}"


def wait_log(api: AirflowApi, dag_id: str, run_id: str) -> str:
    tis = api.task_instances(dag_id, run_id)
    return api.log(dag_id, run_id, "wait_for_delivery", tis["wait_for_delivery"]["try_number"])


def test_a_wait_whose_reports_are_all_refused_says_why_in_its_task_log(
    deployment: Deployment, api: AirflowApi, sandbox: InspectionClient
) -> None:
    # sms_service_only receives only from the service's documented addresses, not from 127.0.0.1.
    sandbox.set_webhook("1", url=api_url(deployment) + "/sms/delivery-reports/sms_service_only")
    sandbox.set_delivery_reports(True, statuses=[3], tries=2)
    api.unpause(REFUSING_DAG_ID)
    run_id = api.trigger(REFUSING_DAG_ID, {"recipients": ["33655500001", "33655500002"]})

    assert api.wait_run(REFUSING_DAG_ID, run_id, timeout=180) == "success"
    delivery = api.xcom(REFUSING_DAG_ID, run_id, "wait_for_delivery")
    assert (delivery["complete"], delivery["reported"]) == (False, 0)
    log = wait_log(api, REFUSING_DAG_ID, run_id)
    assert "the receiver refused" in log, log[-4000:]
    assert "the caller's address is not allowed (dlr_allowed_callers)" in log
    assert "add the service's address to the connection's dlr_allowed_callers" in log
    assert "calls from 127.0.0.1 are not allowed" in log


def test_the_deadline_of_a_delayed_campaign_counts_from_when_it_goes_out(
    deployment: Deployment, api: AirflowApi, sandbox: InspectionClient
) -> None:
    delay = pendulum.now("Europe/Paris").add(minutes=3).replace(microsecond=0)
    if delay.replace(fold=0).utcoffset() != delay.replace(fold=1).utcoffset():
        # In the autumn DST overlap (02:00-03:00 Paris, twice, on the last Sunday of October) the service's
        # wall-clock delay is read as its first occurrence, and Python never finds an instant of it equal
        # to one in another zone: two hours later is past it.
        delay = delay.add(hours=2)
    api.unpause(DAG_ID)
    run_id = api.trigger(DAG_ID, {"recipients": ["33655500011"], "delay": delay.isoformat()})
    try:
        wait_for(
            "the wait to defer",
            lambda: (
                api.task_instances(DAG_ID, run_id).get("wait_for_delivery", {}).get("state") == "deferred"
            ),
            180,
            interval=1,
        )
        send = api.xcom(DAG_ID, run_id, "send")
        assert pendulum.parse(send["delivery_at"]) == delay
        log = wait_log(api, DAG_ID, run_id)
        said = re.search(r"until (\S+) \(0:00:20 after the campaign goes out, ([^)\s]+)\)", log)
        assert said is not None, log[-4000:]
        # The task started minutes before the campaign goes out: 20 s from its start would end before it.
        assert pendulum.parse(said[2]) == delay
        assert pendulum.parse(said[1]) == delay + timedelta(seconds=20)
    finally:
        # The wait would last until 20 s after the delay: the run is ended here.
        api.call("PATCH", f"/dags/{DAG_ID}/dagRuns/{run_id}", json={"state": "failed"})


def test_a_send_whose_receiver_has_no_tables_fails_before_any_request_naming_the_migration(
    deployment: Deployment, api: AirflowApi, sandbox: InspectionClient
) -> None:
    deployment.query("ALTER TABLE sms_delivery_count RENAME TO sms_delivery_count_away")
    try:
        time.sleep(HEALTH_TTL)
        api.unpause(DAG_ID)
        run_id = api.trigger(DAG_ID, {"recipients": ["33655500021"]})
        assert api.wait_run(DAG_ID, run_id, timeout=180) == "failed"
        tis = api.task_instances(DAG_ID, run_id)
        log = api.log(DAG_ID, run_id, "send", tis["send"]["try_number"])
        assert "the delivery-report wait wait_for_delivery downstream cannot work" in log, log[-4000:]
        assert "airflow db migrate" in log
        assert sandbox.requests().get("/send", 0) == 0
        assert sandbox.campaigns() == []
    finally:
        deployment.query("ALTER TABLE sms_delivery_count_away RENAME TO sms_delivery_count")
        time.sleep(HEALTH_TTL)
