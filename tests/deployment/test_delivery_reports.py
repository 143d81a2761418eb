"""Scenario 5: delivery reports posted by the sandbox to the API server's receiver, end to end.

A campaign sent by a DAG on a Celery worker; the sandbox posts one report per number to the API
server; the deferred SmsDeliveryReportsSensor (triggerer) returns counts equal to the sandbox's ground
truth; the DAG scheduled on the connection's asset sees every report once. Then hostile calls, each a
clear 4xx storing nothing, and an API server down and restarted while reports arrive: the sandbox's
retries bring them all, none twice.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from airflow_provider_sms.delivery_reports.client import SummaryRequest, fetch_summary
from airflow_provider_sms.delivery_reports.settings import read_key
from airflow_provider_sms.hooks.sms import SmsHook
from airflow_provider_sms.models import DELIVERY_STATUSES
from tests.deployment.harness import AirflowApi, Deployment, wait_for

if TYPE_CHECKING:
    from airflow_provider_sms.sandbox.server import InspectionClient

pytestmark = pytest.mark.deployment

SENDER_DAG = "sms_campaign_delivery"
CONSUMER_DAG = "sms_on_delivery_reports"
RECEIVER = "/sms/delivery-reports/{conn_id}"
SIGNATURE = "sb-sig-1"


def api_url(deployment: Deployment) -> str:
    return f"http://127.0.0.1:{deployment.ports['api']}"


def receive_reports(
    deployment: Deployment, sandbox: InspectionClient, statuses: list[int], tries: int = 5
) -> None:
    """Point the sandbox's DLR webhook at the API server's receiver and turn reports on."""
    sandbox.set_webhook("1", url=api_url(deployment) + RECEIVER.format(conn_id="sms_default"))
    sandbox.set_delivery_reports(True, statuses=statuses, tries=tries)


def acknowledged(sandbox: InspectionClient, ticket: str) -> list[dict[str, Any]]:
    return [r for r in sandbox.delivery_reports()["acknowledged"] if r["campaign_id"] == int(ticket)]


def summary(deployment: Deployment, *campaign_ids: int) -> Any:
    url = api_url(deployment) + RECEIVER.format(conn_id="sms_default") + "/summary"
    return fetch_summary(SummaryRequest(url, read_key(deployment.token), campaign_ids, with_failed=True))


def consumer_counts(api: AirflowApi) -> Counter[str]:
    """The statuses counted by every finished run of the DAG scheduled on the reports, added up."""
    total: Counter[str] = Counter()
    runs = api.call("GET", f"/dags/{CONSUMER_DAG}/dagRuns", params={"limit": 100})["dag_runs"]
    for run in runs:
        if run["state"] == "success":
            total.update(api.xcom(CONSUMER_DAG, run["dag_run_id"], "count_statuses"))
    return total


def test_a_campaigns_reports_reach_the_api_server_the_sensor_and_the_dag_scheduled_on_them(
    deployment: Deployment, api: AirflowApi, sandbox: InspectionClient
) -> None:
    receive_reports(deployment, sandbox, statuses=[3, 3, 3, 2, 12])
    api.unpause(CONSUMER_DAG)
    api.unpause(SENDER_DAG)
    numbers = [f"336222{index:05d}" for index in range(40)]
    run_id = api.trigger(SENDER_DAG, {"recipients": numbers})

    assert api.wait_run(SENDER_DAG, run_id, timeout=180) == "success"
    send = api.xcom(SENDER_DAG, run_id, "send")
    truth = acknowledged(sandbox, send["ticket"])
    assert sorted(r["destination"] for r in truth) == numbers
    expected = Counter(DELIVERY_STATUSES[r["status"]] for r in truth)
    assert expected == {"delivered": 24, "not delivered": 8, "expired": 8}
    delivery = api.xcom(SENDER_DAG, run_id, "wait_for_delivery")
    assert delivery["by_status"] == expected
    assert (delivery["final"], delivery["complete"]) == (40, True)
    assert delivery["failed"] == sorted(r["destination"] for r in truth if r["status"] != 3)
    assert api.xcom(SENDER_DAG, run_id, "report_failed") == delivery["failed"]
    tis = api.task_instances(SENDER_DAG, run_id)
    log = api.log(SENDER_DAG, run_id, "wait_for_delivery", tis["wait_for_delivery"]["try_number"])
    assert "deferred" in log.lower(), log[-3000:]
    # Every report became one asset event, and the runs of the DAG scheduled on them saw each once. Airflow
    # hands the events recorded while its scheduler makes a run to the next run, which the next event
    # starts: one more report (another campaign's) brings the end of the burst.
    flush = {"date": "2026-11-24T12:00:00+01:00", "status": 9, "destination": "33699000009", "campaign_id": 1}
    assert post(deployment, json.dumps(flush).encode()).json() == {"outcome": "recorded"}
    wait_for(
        "the consumer DAG to count every report",
        lambda: consumer_counts(api) == expected + Counter({"rejected": 1}),
        180,
        interval=2,
    )


def post(deployment: Deployment, body: bytes, conn_id: str = "sms_default", **headers: str) -> httpx.Response:
    sent = {"Content-Type": "application/json", "X-SMSFactor-Signature": SIGNATURE, **headers}
    return httpx.post(
        api_url(deployment) + RECEIVER.format(conn_id=conn_id), content=body, headers=sent, timeout=30
    )


def test_hostile_calls_get_a_clear_4xx_and_a_replay_is_stored_once(
    deployment: Deployment, sandbox: InspectionClient
) -> None:
    report = {
        "date": "2026-11-24T10:00:00+01:00",
        "status": 3,
        "destination": "33699000001",
        "campaign_id": 990001,
    }
    body = json.dumps(report).encode()
    answers = {
        "no signature": post(deployment, body, **{"X-SMSFactor-Signature": ""}),
        "wrong signature": post(deployment, body, **{"X-SMSFactor-Signature": "forged"}),
        "caller not allowed": post(
            deployment, body, conn_id="sms_service_only", **{"X-Forwarded-For": "51.159.7.123"}
        ),
        "oversized": post(deployment, b"{" + b" " * 40_000 + b"}"),
        "malformed": post(deployment, b"{not json"),
        "invalid": post(deployment, json.dumps({**report, "status": "ok"}).encode()),
        "wrong content type": post(deployment, body, **{"Content-Type": "text/plain"}),
        "unknown connection": post(deployment, body, conn_id="nobody"),
    }
    assert {what: answer.status_code for what, answer in answers.items()} == {
        "no signature": 401,
        "wrong signature": 403,
        "caller not allowed": 404,
        "oversized": 413,
        "malformed": 400,
        "invalid": 422,
        "wrong content type": 415,
        "unknown connection": 404,
    }
    assert all(answer.json()["detail"] for answer in answers.values())
    assert summary(deployment, 990001).reported == 0
    first, replay = post(deployment, body), post(deployment, body)
    assert (first.json(), replay.json()) == ({"outcome": "recorded"}, {"outcome": "duplicate"})
    # The summary counts what the flusher has put in batches: within its interval (5 s).
    wait_for("the report to be counted", lambda: summary(deployment, 990001).reported == 1, 30, interval=0.5)
    time.sleep(1)
    assert summary(deployment, 990001).reported == 1


def test_reports_that_arrive_while_the_api_server_is_down_are_retried_and_stored_once(
    deployment: Deployment, sandbox: InspectionClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    receive_reports(deployment, sandbox, statuses=[3, 11], tries=60)
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", deployment.connection(deployment.sandbox_url))
    api_server = deployment.processes["api-server"]
    api_server.stop()
    numbers = [f"336333{index:05d}" for index in range(100)]
    ticket = SmsHook("sms_default").send({"text": "Restart test", "pushtype": "alert"}, numbers).ticket
    assert ticket is not None
    wait_for(
        "the sandbox to try while the API server is down",
        lambda: sandbox.delivery_reports()["attempted"] >= 3,
        30,
    )
    time.sleep(2)
    deployment.start_component("api-server")
    wait_for(
        "every report to be acknowledged",
        lambda: len(acknowledged(sandbox, ticket)) == len(numbers),
        180,
        interval=1,
    )

    calls = sandbox.delivery_reports()
    assert calls["attempted"] > len(calls["acknowledged"])  # some were refused or unanswered, then retried
    wait_for(
        "every report to be counted",
        lambda: summary(deployment, int(ticket)).reported >= len(numbers),
        60,
        interval=0.5,
    )
    stored = summary(deployment, int(ticket))
    assert stored.reported == len(numbers)
    assert stored.by_status == {"delivered": 50, "network error": 50}
    assert [n for n in stored.failed or [] if n.startswith("336333")] == numbers[1::2]
