"""on_cost_exceeded="ask" on Airflow 3.0, which has no human-in-the-loop: refused, naming the version.

A literal "ask" is an import error of the DAG file; a templated one fails the task before any request.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_provider_sms._compat import airflow_3_1_or_later
from tests.conftest import plain_output

pytestmark = [
    pytest.mark.integration,
    pytest.mark.dags,
    pytest.mark.skipif(airflow_3_1_or_later(), reason="Airflow 3.0 only"),
]

DAGS = Path(__file__).parent / "approval_dags"
NEEDS = "needs Airflow 3.1 or later (this is Airflow 3.0"


def test_a_literal_ask_is_an_import_error_naming_the_airflow_version(
    sms_sandbox: Any, run_dag_test: Any
) -> None:
    process = run_dag_test(
        DAGS / "sms_send_approved.py",
        "sms_send_approved",
        {"AIRFLOW_CONN_SMS_DEFAULT": sms_sandbox.connection_json()},
    )

    output = plain_output(process)
    assert process.returncode != 0
    assert "on_cost_exceeded='ask'" in output
    assert NEEDS in output
    assert not any(sms_sandbox.inspect.requests().values())


def test_a_templated_ask_fails_the_task_before_any_request(sms_sandbox: Any, run_dag_test: Any) -> None:
    process = run_dag_test(
        DAGS / "sms_send_ask_templated.py",
        "sms_send_ask_templated",
        {"AIRFLOW_CONN_SMS_DEFAULT": sms_sandbox.connection_json()},
    )

    output = plain_output(process)
    assert "Invalid input (not retried): on_cost_exceeded='ask'" in output
    assert NEEDS in output
    assert not any(sms_sandbox.inspect.requests().values())
