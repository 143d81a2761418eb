"""The API server's log over a minute with a send-only connection that has campaigns: quiet until a call.

A send-only connection (an XML one without ``dlr_webhook_id``) has campaigns, so it has a flusher row
and every API server's flusher reads its settings on its timer. A second API server knows the
connection; the first does not (for it the name is no connection at all). Neither logs anything
about it for a minute; then three calls for it reach the second one, whose log says once why they are
refused (each call's refusal line aside).
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

import httpx
import pytest

from tests.deployment.harness import wait_for

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.deployment.harness import Deployment

pytestmark = pytest.mark.deployment

CONN_ID = "sms_send_only"
WHY = f"Delivery reports: calls for {CONN_ID!r} are refused"
QUIET_FOR = 65.0  # longer than two of the receiver's 30 s connection re-reads


@pytest.fixture
def send_only_with_campaigns(deployment: Deployment) -> Iterator[None]:
    """The flusher row the campaigns' indexer makes for a connection with campaigns, removed afterwards."""
    deployment.query(
        "INSERT INTO sms_delivery_flush (conn_id, last_batch, reports) VALUES (:conn_id, 0, 0) "
        "ON CONFLICT (conn_id) DO NOTHING",
        conn_id=CONN_ID,
    )
    yield
    deployment.query("DELETE FROM sms_delivery_flush WHERE conn_id = :conn_id", conn_id=CONN_ID)


def test_a_send_only_connection_is_warned_about_when_a_call_names_it_not_on_a_timer(
    deployment: Deployment, send_only_with_campaigns: None
) -> None:
    connection = {
        "conn_type": "sms",
        "host": deployment.sandbox_url,
        "password": deployment.token,
        "extra": {"format": "xml"},
    }
    first = deployment.processes["api-server"]
    first_log_before = len(first.log())
    second = deployment.start_api_server(1, AIRFLOW_CONN_SMS_SEND_ONLY=json.dumps(connection))
    try:
        time.sleep(QUIET_FOR)
        assert WHY not in second.log()
        assert WHY not in first.log()[first_log_before:]

        url = f"{deployment.api_url(1)}/sms/delivery-reports/{CONN_ID}"
        answers = [httpx.post(url, json={}, timeout=30).status_code for _ in range(3)]
        assert answers == [404] * 3
        wait_for("the refusals in the log", lambda: second.log().count("refused a call from") >= 3, 30)
        reasons = [line for line in second.log().splitlines() if WHY in line]
        assert len(reasons) == 1, reasons
        assert "its extra has no dlr_webhook_id" in reasons[0]
    finally:
        deployment.stop_api_server(1)
