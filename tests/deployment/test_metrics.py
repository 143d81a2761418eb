"""Scenario: every component's metrics reach StatsD on a real deployment (Celery workers, triggerer, API
server on PostgreSQL), with the figures of what happened, and every metric the dashboard and the alert
rules query among them.

Every Airflow process of the deployment sends its metrics to the harness's StatsD server. The scenario
sends a campaign (one number blacklisted), waits for its delivery reports (deferred: the triggerer
polls), a notifier reaches nobody, then posts signed, replayed and refused reports to the receiver.
Plain StatsD drops tags: the counts read here are the names that embed the connection or the reason.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from tests.dashboard import queried_metrics
from tests.deployment.harness import AirflowApi, Deployment, wait_for
from tests.deployment.test_delivery_reports import post, receive_reports

if TYPE_CHECKING:
    from airflow_provider_sms.sandbox.server import InspectionClient
    from tests.metrics_receivers import StatsdServer

pytestmark = pytest.mark.deployment

DAG_ID = "deployment_metrics"
NUMBERS = ["33655530001", "33655530002", "33655530003", "33600000001"]
REPORT = {
    "date": "2026-11-29T10:00:00+01:00",
    "status": 3,
    "destination": "33699053001",
    "campaign_id": 990053,
}


def counts(statsd: StatsdServer, *names: str) -> dict[str, float]:
    return {name: statsd.total(f"airflow.sms.{name}") for name in names}


def test_the_deployment_emits_what_happened_from_each_component(
    deployment: Deployment, api: AirflowApi, sandbox: InspectionClient
) -> None:
    statsd = deployment.statsd
    receiver = (
        "receiver.stored.sms_default",
        "receiver.duplicates.sms_default",
        "receiver.refused.signature",
        "receiver.refused.unknown_name",
        "receiver.refused.size",
        "receiver.refused.body",
    )
    before = counts(statsd, *receiver, "campaigns.sms_default.sent", "delivery.reports.sms_default.delivered")
    receive_reports(deployment, sandbox, statuses=[3, 3, 2])
    api.unpause(DAG_ID)

    run_id = api.trigger(DAG_ID, {"recipients": NUMBERS})

    assert api.wait_run(DAG_ID, run_id, timeout=180) == "success"
    send = api.xcom(DAG_ID, run_id, "send")
    delivery = api.xcom(DAG_ID, run_id, "wait_for_delivery")
    assert (send["sent"], send["blacklisted"]) == (3, 1)
    # The worker: the send's answer, as the service gave it.
    assert statsd.total("airflow.sms.campaigns.sms_default.sent") - before["campaigns.sms_default.sent"] == 1
    assert statsd.last("airflow.sms.credits_left.sms_default") is not None
    # The triggerer polled the deferred wait; the worker counted its end.
    assert statsd.total("airflow.sms.wait.polls.sms_default.delivery_reports") >= 1
    delivered = statsd.total("airflow.sms.delivery.reports.sms_default.delivered")
    assert delivered - before["delivery.reports.sms_default.delivered"] == delivery["by_status"]["delivered"]
    # The notifier's only number is blacklisted: it reached nobody, with no fallback.
    wait_for("the notifier", lambda: statsd.total("airflow.sms.notifier.fallback.sms_default.none") >= 1, 60)
    assert statsd.total("airflow.sms.notifier.not_delivered.sms_default.filtered") >= 1

    # The API server: reports stored, a replay, and refusals by reason.
    body = json.dumps(REPORT).encode()
    answers = [
        post(deployment, body),
        post(deployment, body),
        post(deployment, body, **{"X-SMSFactor-Signature": "forged"}),
        post(deployment, body, conn_id="nobody"),
        post(deployment, b"{" + b" " * 40_000 + b"}"),
        post(deployment, b"{not json"),
    ]
    assert [answer.status_code for answer in answers] == [200, 200, 403, 404, 413, 400]
    after = counts(statsd, *receiver)
    delta = {name: after[name] - before[name] for name in receiver}
    assert delta["receiver.stored.sms_default"] == sum(delivery["by_status"].values()) + 1
    assert delta["receiver.duplicates.sms_default"] >= 1
    assert {name: delta[name] for name in receiver[2:]} == dict.fromkeys(receiver[2:], 1)
    wait_for("an asset event", lambda: statsd.total("airflow.sms.flusher.asset_events.sms_default") >= 1, 60)

    # Nothing personal went out: no number, no token.
    for line in statsd.lines:
        assert not any(number in line for number in [*NUMBERS, REPORT["destination"]]), line
        assert deployment.token not in line

    # Every metric the dashboard and the alert rules query is one this deployment emitted.
    received = statsd.names()
    missing = sorted(
        metric.full_name for metric in queried_metrics() if f"airflow.{metric.full_name}" not in received
    )
    assert missing == []
