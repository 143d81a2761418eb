"""A deferrable SmsNpaiSensor run by real Airflow (`airflow dags test`) against the sandbox.

The DAG sends a campaign to a number the sandbox treats as unreachable; only then does the sandbox
add the NPAI entry. The sensor defers at once, its trigger (run inline by `airflow dags test`) polls
GET /npai until the campaign's entry shows up, and the entries reach the downstream task via XCom.
The connection is given as an ``AIRFLOW_CONN_...`` variable, or stored in the metadata database with
``airflow connections add``: since Airflow 3.1 the inline trigger reads connections through comms that
answer only blocking calls, and the provider must find the database's connection there too.

A wait for something that never comes ends at the sensor's timeout, failed or (``soft_fail``) skipped:
`airflow dags test` runs the trigger inline and ignores Airflow's deferral timeout, so only the
trigger's own timeout ends it. With StatsD on, the resumed sensor counts the trigger's polls and the
timeout, once each.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.conftest import AIRFLOW, airflow_env
from tests.metrics_receivers import StatsdServer

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = [pytest.mark.integration, pytest.mark.dags]

DAG_FILE = Path(__file__).parent / "sensor_dags" / "sms_npai_deferrable.py"
TIMEOUT_DAG_FILE = Path(__file__).parent / "sensor_dags" / "sms_wait_timeout.py"
TIMEOUT, POKE_INTERVAL = 20, 2  # the timeout DAG's
UNREACHABLE = "33700000042"  # the sandbox turns 337000... numbers into NPAI entries once sent to


@pytest.fixture
def connection_in_database(airflow_home: Path, sms_sandbox: Any) -> Iterator[dict[str, str]]:
    """sms_default stored in the metadata database (``airflow connections add``), removed afterwards."""

    def connections(*args: str) -> None:
        done = subprocess.run(
            [AIRFLOW, "connections", *args],
            env=airflow_env(airflow_home),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]

    connections("add", "sms_default", "--conn-json", sms_sandbox.connection_json("json"))
    yield {}
    connections("delete", "sms_default")


@pytest.fixture(params=["environment", "database"])
def connection_env(request: pytest.FixtureRequest, sms_sandbox: Any) -> dict[str, str]:
    """The variables that give the run its connection: AIRFLOW_CONN_SMS_DEFAULT, or none (the database's)."""
    if request.param == "database":
        return dict(request.getfixturevalue("connection_in_database"))
    return {"AIRFLOW_CONN_SMS_DEFAULT": sms_sandbox.connection_json("json")}


def test_deferrable_npai_sensor_waits_in_the_trigger_for_the_sent_campaign(
    sms_sandbox: Any, run_dag_test: Any, tmp_path: Path, connection_env: dict[str, str]
) -> None:
    assert UNREACHABLE not in {entry["destination"] for entry in sms_sandbox.inspect.npai()}
    result_file = tmp_path / "result.json"

    process = run_dag_test(
        DAG_FILE,
        "sms_npai_deferrable",
        {**connection_env, "SMS_TEST_UNREACHABLE": UNREACHABLE, "SMS_TEST_RESULT_FILE": str(result_file)},
    )

    output = process.stdout + process.stderr
    assert process.returncode == 0, output[-6000:]
    assert "state=success" in output
    # The sensor deferred and its trigger found the entry (not a poke on the worker).
    assert "running trigger in line" in output
    assert "1 matching NPAI entries found" in output
    (campaign,) = sms_sandbox.inspect.campaigns()
    result = json.loads(result_file.read_text())
    assert result["ticket"] == campaign["ticket"]
    assert result["npai"]["count"] == 1
    assert result["npai"]["destinations"] == [UNREACHABLE]
    assert result["npai"]["entries"][0]["campaign_id"] == int(campaign["ticket"])


@pytest.fixture
def statsd() -> Iterator[StatsdServer]:
    server = StatsdServer()
    yield server
    server.close()


@pytest.mark.parametrize("wait", ["npai", "webhook"])
@pytest.mark.parametrize("soft_fail", [True, False], ids=["soft_fail", "no_soft_fail"])
def test_a_deferrable_wait_ends_at_the_sensors_timeout_under_dags_test(
    sms_sandbox: Any, run_dag_test: Any, statsd: StatsdServer, wait: str, soft_fail: bool
) -> None:
    started = time.monotonic()
    process = run_dag_test(
        TIMEOUT_DAG_FILE,
        "sms_wait_timeout",
        {
            "AIRFLOW_CONN_SMS_DEFAULT": sms_sandbox.connection_json("json"),
            "SMS_TEST_WAIT": wait,
            "SMS_TEST_TIMEOUT": str(TIMEOUT),
            "SMS_TEST_SOFT_FAIL": "1" if soft_fail else "0",
            **statsd.env(),
        },
    )
    elapsed = time.monotonic() - started

    output = process.stdout + process.stderr
    assert "running trigger in line" in output
    assert "Sensor has timed out: still waiting for" in output, output[-6000:]
    # One poll every 2 s from the task's start, the last one at the timeout; then the run ends.
    polls = sms_sandbox.inspect.requests()[f"/{wait}"]
    assert 2 <= polls <= TIMEOUT // POKE_INTERVAL + 1, polls
    # Counted by the sensor as it resumed: under its fixed name and its plain-StatsD one.
    deadline = time.monotonic() + 10
    while (
        not statsd.total(f"airflow.sms.wait.timeouts.sms_default.{wait}.timeout")
        and time.monotonic() < deadline
    ):
        time.sleep(0.1)
    assert statsd.total(f"airflow.sms.wait.timeouts.sms_default.{wait}.timeout") == 1
    assert statsd.total("airflow.sms.wait.timeouts") == 1
    assert (
        statsd.total(f"airflow.sms.wait.polls.sms_default.{wait}")
        == statsd.total("airflow.sms.wait.polls")
        == polls
    )
    assert elapsed < 60, f"airflow dags test took {elapsed:.0f}s"
    if soft_fail:
        assert process.returncode == 0, output[-6000:]
        assert "state=skipped" in output, output[-6000:]
    else:
        assert process.returncode != 0, output[-6000:]
        assert "AirflowSensorTimeout" in output, output[-6000:]
