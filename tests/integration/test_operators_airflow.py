"""The send guard under real Airflow: kill the worker mid-send, run the task again, count campaigns.

Each run is ``dag.test()`` in a subprocess on the session's throwaway AIRFLOW_HOME, with a fixed
logical date so that every run is the same DAG run (same run_id): what an Airflow retry or a
cleared task sees. The guard is a real Airflow Variable written through the Task SDK.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from typing import TYPE_CHECKING, Any

import pytest

from tests.conftest import airflow_env

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.integration, pytest.mark.dags]

DAG_ID = "sms_guarded_send"
NUMBERS = ["33612345678", "33612345679", "33612345680"]
DAG_FILE = textwrap.dedent(
    '''
    """One guarded send; the result (XCom) is written to a file for the test."""
    import json
    import os
    from pathlib import Path

    import pendulum
    from airflow.sdk import DAG, task

    from airflow_provider_sms.operators.sms import SmsSendOperator

    with DAG("sms_guarded_send", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
        send = SmsSendOperator(
            task_id="send",
            message={"text": "Flash sale tonight", "pushtype": "alert"},
            recipients=json.loads(os.environ["SMS_TEST_NUMBERS"]),
            allow_resend=os.environ.get("SMS_TEST_ALLOW_RESEND") == "1",
        )

        @task
        def record(result):
            Path(os.environ["SMS_TEST_RESULT_FILE"]).write_text(json.dumps(result))

        record(send.output)
    '''
)
RUNNER = textwrap.dedent(
    """
    import importlib.util, sys
    import pendulum
    spec = importlib.util.spec_from_file_location("guarded_dag", sys.argv[1])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    when = pendulum.datetime(2030, 1, 1, tz="UTC")
    run = module.dag.test(run_after=when, logical_date=when)
    print("DAG_RUN_STATE", run.state, run.run_id, flush=True)
    """
)
# Bounds of one run, so that a hang fails the test instead of blocking the suite.
RUN_TIMEOUT = 240
KILL_WAIT = 120


@pytest.fixture
def dag_run(airflow_home: Path, tmp_path: Path, sms_sandbox: Any, token_canary: Any):
    """Start (or run to completion) ``dag.test()`` of the guarded DAG against the sandbox.

    The output of each run to completion is checked by the token canary.
    """
    dags = tmp_path / "dags"
    dags.mkdir()
    dag_file = dags / "sms_guarded_send.py"
    dag_file.write_text(DAG_FILE)
    result_file = tmp_path / "result.json"

    def start(allow_resend: bool = False) -> subprocess.Popen[str]:
        result_file.unlink(missing_ok=True)
        env = airflow_env(
            airflow_home,
            dags,
            AIRFLOW_CONN_SMS_DEFAULT=sms_sandbox.connection_json("json"),
            SMS_TEST_NUMBERS=json.dumps(NUMBERS),
            SMS_TEST_RESULT_FILE=str(result_file),
            SMS_TEST_ALLOW_RESEND="1" if allow_resend else "0",
        )
        return subprocess.Popen(
            [sys.executable, "-c", RUNNER, str(dag_file)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its own process group, killed as a whole
        )

    def run(allow_resend: bool = False) -> tuple[str, dict[str, Any] | None]:
        process = start(allow_resend)
        output, _ = process.communicate(timeout=RUN_TIMEOUT)
        token_canary.check_output(output, f"output of dag.test() of {DAG_ID}")
        result = json.loads(result_file.read_text()) if result_file.exists() else None
        return output, result

    start.run = run  # type: ignore[attr-defined]
    return start


def test_killed_mid_send_then_run_again_sends_exactly_one_campaign(dag_run, sms_sandbox):
    inspect = sms_sandbox.inspect
    # The sandbox records the campaign, then holds the answer: the worker dies with the POST in flight.
    # (No gate in this DAG: the slow fault would hold the simulation too.)
    inspect.set_faults(slow=20)
    process = dag_run()
    deadline = time.monotonic() + KILL_WAIT
    while not inspect.campaigns():
        assert process.poll() is None, process.stdout.read() if process.stdout else ""
        assert time.monotonic() < deadline, "the send never reached the sandbox"
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)  # kill -9: no cleanup, no answer recorded
    process.wait(timeout=30)
    inspect.clear_faults()
    assert len(inspect.campaigns()) == 1

    # The retry of the same task instance: the guard says "sending", no ticket: it must not resend.
    output, result = dag_run.run()
    assert "may have been sent by an earlier attempt" in output
    assert "DAG_RUN_STATE failed" in output
    assert result is None
    assert len(inspect.campaigns()) == 1

    # After checking, the author allows the resend of that batch: one more campaign, deliberately.
    output, result = dag_run.run(allow_resend=True)
    assert "DAG_RUN_STATE success" in output, output[-3000:]
    campaigns = inspect.campaigns()
    assert len(campaigns) == 2
    assert result is not None
    assert result["ticket"] == str(campaigns[-1]["ticket"])

    # Any later run of the task instance returns the recorded ticket without sending.
    output, again = dag_run.run()
    assert "DAG_RUN_STATE success" in output, output[-3000:]
    assert "already sent by an earlier attempt" in output
    assert again is not None
    assert again["ticket"] == result["ticket"]
    assert again["resumed_batches"] == 1
    assert len(inspect.campaigns()) == 2
