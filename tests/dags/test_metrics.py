"""The provider's metrics reach the user's backend through real Airflow, equal to what the service answered.

``airflow dags test`` runs ``metrics_dags/sms_metrics.py`` against the sandbox (a campaign in two batches
to three numbers, one of them blacklisted; a simulation; a campaign a gate skips), with Airflow's metrics
sent to a StatsD server, or exported to an OpenTelemetry collector, on 127.0.0.1. Metrics off (Airflow's
default) sends nothing.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from airflow_provider_sms._compat import airflow_3_1_or_later
from airflow_provider_sms.metrics import FILTER_REASONS
from airflow_provider_sms.sandbox.testing import TEST_TOKEN
from tests.dashboard import prometheus_name, queried_metrics
from tests.metrics_receivers import OtlpReceiver, StatsdServer

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = [pytest.mark.integration, pytest.mark.dags]

DAG_FILE = Path(__file__).parent / "metrics_dags" / "sms_metrics.py"
DAG_ID = "sms_metrics"
RECIPIENTS = ["33612000501", "33600000001", "33612000502"]
CONN = "sms_default"


@pytest.fixture
def statsd() -> Iterator[StatsdServer]:
    server = StatsdServer()
    yield server
    server.close()


@pytest.fixture
def otlp() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    yield receiver
    receiver.close()


def returned(airflow_home: Path, task_id: str) -> dict[str, Any]:
    """The return value of ``task_id`` in the latest run of the DAG."""
    with sqlite3.connect(airflow_home / "airflow.db") as db:
        row = db.execute(
            "SELECT value FROM xcom WHERE dag_id = ? AND task_id = ? AND key = 'return_value' "
            "ORDER BY timestamp DESC LIMIT 1",
            (DAG_ID, task_id),
        ).fetchone()
    assert row is not None, f"{task_id} returned nothing"
    return dict(json.loads(row[0]))


def run(sandbox: Any, run_dag_test: Any, env: dict[str, str]) -> str:
    process = run_dag_test(DAG_FILE, DAG_ID, {"AIRFLOW_CONN_SMS_DEFAULT": sandbox.connection_json(), **env})
    output = str(process.stdout + process.stderr)
    assert process.returncode == 0, output[-4000:]
    return output


def assert_nothing_personal(texts: list[str]) -> None:
    """No number of the campaign, no text of it and not the token in anything the backend received."""
    for text in texts:
        for number in RECIPIENTS:
            assert number not in text, f"a telephone number went out in a metric: {text!r}"
        assert TEST_TOKEN not in text
        assert "order" not in text.lower(), f"the message's text went out in a metric: {text!r}"


def test_statsd_receives_the_figures_the_service_answered(
    sms_sandbox: Any, run_dag_test: Any, airflow_home: Path, statsd: StatsdServer
) -> None:
    run(sms_sandbox, run_dag_test, statsd.env())
    sent = returned(airflow_home, "send")
    simulated = returned(airflow_home, "simulate")
    assert sent["blacklisted"] == 1, sent
    assert sent["sent"] == 2, sent

    # Plain StatsD drops tags: the fixed name adds up every connection, the name with the connection
    # in it holds this one's.
    for name in (f"airflow.sms.send.sent.{CONN}", "airflow.sms.send.sent"):
        assert statsd.total(name) == sent["sent"]
    assert statsd.total(f"airflow.sms.send.numbers.{CONN}") == sent["total"]
    assert statsd.total(f"airflow.sms.send.credits_spent.{CONN}") == sent["cost"]
    assert statsd.total(f"airflow.sms.send.batches.{CONN}") == sent["batches"] == 2
    for reason in FILTER_REASONS:
        assert statsd.total(f"airflow.sms.send.filtered.{CONN}.{reason}") == sent[reason], reason
    assert statsd.last(f"airflow.sms.credits_left.{CONN}") == sent["credits"]
    assert statsd.last(f"airflow.sms.send.duration.{CONN}") is not None
    assert statsd.total(f"airflow.sms.campaigns.{CONN}.sent") == 1
    assert statsd.total(f"airflow.sms.campaigns.{CONN}.gated") == 1
    assert statsd.total(f"airflow.sms.gate.refused.{CONN}.max_cost") == 1
    assert statsd.total(f"airflow.sms.simulate.credits.{CONN}") == simulated["cost"]
    assert_nothing_personal(statsd.lines)


@pytest.mark.skipif(
    not airflow_3_1_or_later(),
    reason="Airflow 3.0 does not flush its OpenTelemetry metrics when a process exits: those of the last "
    "export interval are lost (Airflow 3.1 flushes them); the Metrics page says so",
)
def test_opentelemetry_receives_the_figures_with_their_attributes(
    sms_sandbox: Any, run_dag_test: Any, airflow_home: Path, otlp: OtlpReceiver
) -> None:
    run(sms_sandbox, run_dag_test, otlp.env())
    otlp.wait_for("airflow.sms.send.sent")
    sent = returned(airflow_home, "send")
    assert otlp.paths
    assert set(otlp.paths) == {"/v1/metrics"}

    task = {"conn_id": CONN, "dag_id": DAG_ID, "task_id": "send"}
    assert otlp.total("airflow.sms.send.sent", **task) == sent["sent"] == 2
    assert otlp.total("airflow.sms.send.numbers", **task) == sent["total"]
    assert otlp.total("airflow.sms.send.credits_spent", **task) == sent["cost"]
    assert otlp.total("airflow.sms.send.filtered", reason="blacklisted", **task) == 1
    assert otlp.total("airflow.sms.send.filtered", reason="flood", **task) == 0
    points = otlp.latest("airflow.sms.send.sent")
    assert {point.attributes.get("operator") for point in points.values()} == {"SmsSendOperator"}
    assert {point.attributes.get("pushtype") for point in points.values()} == {"alert"}
    gated = {"conn_id": CONN, "task_id": "send_gated"}
    assert otlp.total("airflow.sms.campaigns", outcome="gated", **gated) == 1
    assert otlp.total("airflow.sms.gate.refused", gate="max_cost", **gated) == 1
    assert_nothing_personal([repr(point) for point in otlp.points()])
    # As Prometheus names what the collector exports: the dashboard's queries of a send find them.
    exported = {
        point.name.replace(".", "_") + ("_total" if point.kind == "sum" else "") for point in otlp.points()
    }
    sends = {"campaigns", "send.sent", "send.filtered", "send.numbers", "send.credits_spent", "credits_left"}
    assert {prometheus_name(metric) for metric in queried_metrics() if metric.name in sends} <= exported


def test_metrics_off_sends_nothing(
    sms_sandbox: Any, run_dag_test: Any, airflow_home: Path, statsd: StatsdServer
) -> None:
    # Where StatsD would send, were it on: Airflow's default leaves it off.
    env = {**statsd.env(), "AIRFLOW__METRICS__STATSD_ON": "False"}
    run(sms_sandbox, run_dag_test, env)
    assert returned(airflow_home, "send")["sent"] == 2
    assert statsd.lines == []


def test_a_metrics_backend_that_cannot_be_reached_costs_the_send_nothing(
    sms_sandbox: Any, run_dag_test: Any, airflow_home: Path
) -> None:
    # A StatsD host that does not resolve: Airflow falls back to no metrics; the sends go on.
    env = {
        "AIRFLOW__METRICS__STATSD_ON": "True",
        "AIRFLOW__METRICS__STATSD_HOST": "statsd.invalid",
        "AIRFLOW__METRICS__STATSD_PORT": "8125",
    }
    run(sms_sandbox, run_dag_test, env)
    assert returned(airflow_home, "send")["sent"] == 2
    assert returned(airflow_home, "simulate")["sent"] == 2
