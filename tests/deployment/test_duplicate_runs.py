"""Never twice across runs on the distributed deployment: a daily DAG's scheduled run and a manual run
for the same slot make one campaign; runs for consecutive days make two."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pendulum
import pytest

if TYPE_CHECKING:
    from collections.abc import Callable

    from airflow_provider_sms.sandbox.server import InspectionClient
    from tests.deployment.harness import AirflowApi

pytestmark = pytest.mark.deployment

DAG_ID = "deployment_daily_reminder"


def test_a_scheduled_run_and_a_manual_run_for_the_same_slot_send_once_and_consecutive_days_both_send(
    api: AirflowApi, sandbox: InspectionClient, unpause_scheduled: Callable[..., None]
) -> None:
    unpause_scheduled(DAG_ID, hour=9)  # its schedule: 09:00 Paris, daily
    scheduled, state = api.finished_scheduled_run(DAG_ID)
    assert state == "success"
    send = api.xcom(DAG_ID, str(scheduled["dag_run_id"]), "send")
    logical = pendulum.parse(str(scheduled["logical_date"])).in_tz("Europe/Paris")  # type: ignore[union-attr]
    slot = logical.add(days=2).at(10).format("YYYY-MM-DD HH:mm:ss")
    assert [c["delay"] for c in sandbox.campaigns()] == [slot]

    # Someone triggers the DAG by hand for the same day, half an hour earlier: the same slot. (Not
    # later: between 09:00 and 09:30 Paris that logical date would be in the future, and Airflow would
    # keep the run queued until then.)
    manual = api.trigger(DAG_ID, logical_date=logical.subtract(minutes=30).in_tz("UTC").isoformat())
    assert api.wait_run(DAG_ID, manual, timeout=180) == "failed"
    (ti,) = api.tries(DAG_ID, manual, "send")
    assert ti["try_number"] == 1  # not retried
    log = api.log(DAG_ID, manual, "send", 1)
    assert "The same campaign (same connection 'sms_default', message and recipients" in log, log[-4000:]
    assert f"run '{scheduled['dag_run_id']}', task 'send' sent it (ticket {send['ticket']})" in log
    assert len(sandbox.campaigns()) == 1
    assert sandbox.requests().get("/send/simulate", 0) == 0

    # The run for the day before (Airflow starts no run whose logical date is in the future): another
    # campaign, 24 hours earlier.
    day_before = api.trigger(DAG_ID, logical_date=logical.subtract(days=1).in_tz("UTC").isoformat())
    assert api.wait_run(DAG_ID, day_before, timeout=180) == "success"
    other_slot = logical.add(days=1).at(10).format("YYYY-MM-DD HH:mm:ss")
    assert [c["delay"] for c in sandbox.campaigns()] == [slot, other_slot]
