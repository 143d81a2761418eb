"""A send with a delivery-report wait downstream checks, before any request to the service, that the
wait can work (real Airflow: ``airflow dags test`` against the sandbox): each mistake of the receiving
side fails the send with what to set, and the sandbox sees no campaign.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import plain_output

pytestmark = [pytest.mark.integration, pytest.mark.dags]

DAG_FILE = Path(__file__).parent / "sensor_dags" / "sms_send_then_wait.py"


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize(
    ("extra", "expected", "retried"),
    [
        (
            {},
            "the delivery-report wait wait_for_delivery downstream cannot work, so nothing was sent: "
            "connection 'sms_default' receives no delivery reports; set dlr_webhook_id in its extra",
            False,
        ),
        (
            # Down, restarting or a wrong URL: the try fails, Airflow's retries (if any) look again.
            {"dlr_webhook_id": "1", "dlr_api_url": "http://127.0.0.1:{closed}"},
            "the delivery-report wait wait_for_delivery downstream cannot work, so nothing was sent yet: "
            "the Airflow API server does not answer at http://127.0.0.1:{closed}/sms/delivery-reports/_health",
            True,
        ),
        (
            # Something answers there, but not Airflow's API server with the provider: the sandbox itself.
            {"dlr_webhook_id": "1", "dlr_api_url": "{sandbox}"},
            "the delivery-report wait wait_for_delivery downstream cannot work, so nothing was sent: "
            "the Airflow API server answered HTTP 404 at {sandbox}/sms/delivery-reports/_health",
            False,
        ),
    ],
    ids=["no-dlr-webhook-id", "nothing-answers", "not-the-api-server"],
)
def test_a_send_whose_wait_cannot_work_sends_nothing(
    sms_sandbox: Any, run_dag_test: Any, extra: dict[str, str], expected: str, retried: bool
) -> None:
    fill = {"closed": closed_port(), "sandbox": sms_sandbox.url}
    extra = {name: value.format(**fill) for name, value in extra.items()}

    process = run_dag_test(
        DAG_FILE, "sms_send_then_wait", {"AIRFLOW_CONN_SMS_DEFAULT": sms_sandbox.connection_json(**extra)}
    )

    output = plain_output(process)
    assert process.returncode != 0
    assert expected.format(**fill) in output, output[-5000:]
    assert ("Invalid input (not retried)" in output) is not retried
    assert sms_sandbox.inspect.campaigns() == []
    assert sms_sandbox.inspect.requests().get("/send", 0) == 0
