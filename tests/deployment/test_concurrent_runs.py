"""Scenario 4: four runs with different campaigns at once, over both Celery workers: each sent once."""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from airflow_provider_sms.sandbox.server import InspectionClient
    from tests.deployment.harness import AirflowApi

pytestmark = pytest.mark.deployment

DAG_ID = "deployment_send"
RUNS = 4
# Each POST /send answers after this many seconds, so the four sends overlap and fill both workers.
SLOW_SEND = 3.0


def test_four_concurrent_runs_each_send_their_campaign_exactly_once_on_both_workers(
    api: AirflowApi, sandbox: InspectionClient
) -> None:
    sandbox.set_faults(slow=SLOW_SEND, endpoints=["/send"])
    confs = [
        {"text": f"Concurrent campaign {n}", "recipients": [f"336222{n:02d}{i:03d}" for i in range(1, 4)]}
        for n in range(RUNS)
    ]
    api.unpause(DAG_ID)
    run_ids = [api.trigger(DAG_ID, conf) for conf in confs]

    assert [api.wait_run(DAG_ID, run_id, timeout=180) for run_id in run_ids] == ["success"] * RUNS

    campaigns = {c["ticket"]: c for c in sandbox.campaigns()}
    assert len(campaigns) == RUNS
    sends = {run_id: api.xcom(DAG_ID, run_id, "send") for run_id in run_ids}
    for run_id, conf in zip(run_ids, confs, strict=True):
        campaign = campaigns[sends[run_id]["ticket"]]
        assert campaign["text"] == conf["text"]
        assert sorted(campaign["sent_to"]) == conf["recipients"]
    assert Counter(n for c in campaigns.values() for n in c["sent_to"]) == Counter(
        n for conf in confs for n in conf["recipients"]
    )
    # One try each, and the four tasks ran on both workers.
    tis = [api.task_instances(DAG_ID, run_id)["send"] for run_id in run_ids]
    assert [ti["try_number"] for ti in tis] == [1] * RUNS
    assert {ti["hostname"] for ti in tis} == {"worker1", "worker2"}
    # Each send guard was written from its worker through the Task Execution API into the metadata
    # database: one batch, recorded sent, with the ticket the sandbox holds.
    guards = api.variables("sms_send_guard")
    for run_id in run_ids:
        (document,) = [json.loads(v) for v in guards.values() if json.loads(v)["run_id"] == run_id]
        assert {i: b["state"] for i, b in document["batches"].items()} == {"0": "sent"}
        assert document["batches"]["0"]["result"]["ticket"] == sends[run_id]["ticket"]
