"""What a new user meets in the first hour, on real Airflow: errors shown where they look for them.

- a literal mistake in a DAG file (a ``<-short->`` marker without its link, a naive ``delay``) is an
  import error of the file, as the UI shows it, not a failed run;
- ``airflow connections test`` on a Base URL without a scheme says what to write instead.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from typing import TYPE_CHECKING

import pytest

from tests.conftest import AIRFLOW, airflow_env
from tests.dags.test_examples import load_dagbag

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.integration, pytest.mark.dags]

BAD_DAG = textwrap.dedent(
    """
    import datetime

    import pendulum
    from airflow.sdk import DAG

    from airflow_provider_sms.operators.sms import SmsSendOperator

    with DAG("sms_{name}", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")):
        SmsSendOperator(task_id="send", recipients=["33612345678"], {arguments})
    """
)


@pytest.mark.parametrize(
    ("name", "arguments", "error"),
    [
        (
            "marker_without_link",
            'message={"text": "Sale tonight: <-short->", "pushtype": "marketing"}',
            "message.text: text has 1 '<-short->' marker(s) but 0 link(s) are given",
        ),
        (
            "naive_delay",
            'message="Hi", delay=datetime.datetime(2030, 12, 1, 10, 0)',
            "delay=datetime.datetime(2030, 12, 1, 10, 0): naive datetime",
        ),
    ],
)
def test_a_literal_mistake_is_an_import_error_of_the_dag_file(
    airflow_home: Path, tmp_path: Path, name: str, arguments: str, error: str
) -> None:
    (tmp_path / f"{name}.py").write_text(BAD_DAG.format(name=name, arguments=arguments))

    bag = load_dagbag(airflow_home, tmp_path)

    assert bag["dags"] == {}
    (import_error,) = bag["import_errors"].values()
    assert error in import_error


def test_airflow_connections_test_names_the_missing_scheme(airflow_home: Path) -> None:
    connection = json.dumps({"conn_type": "sms", "host": "127.0.0.1:35509", "password": "dev-token"})

    process = subprocess.run(
        [AIRFLOW, "connections", "test", "sms_default"],
        env=airflow_env(
            airflow_home, AIRFLOW__CORE__TEST_CONNECTION="Enabled", AIRFLOW_CONN_SMS_DEFAULT=connection
        ),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    output = process.stdout + process.stderr
    assert "the Base URL (host) '127.0.0.1:35509' has no scheme" in output, output[-3000:]
    assert "'http://127.0.0.1:35509' for a local sandbox" in output
    assert "SSLError" not in output
