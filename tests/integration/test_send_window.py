"""The marketing send window over loopback: the sandbox receives the postponed delay, refuses the rest."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import requests
from airflow.providers.common.compat.sdk import AirflowFailException

from airflow_provider_sms.exceptions import SmsApiError
from airflow_provider_sms.hooks.sms import SmsHook
from airflow_provider_sms.operators.sms import SmsSendOperator
from tests.task_instance import FakeTaskInstance

if TYPE_CHECKING:
    from airflow_provider_sms.sandbox import SandboxServer

pytestmark = pytest.mark.integration

NUMBERS = ["33612345678", "33612345679"]
# 2030-06-01 is a Saturday; 2030-06-02 a Sunday; the next opening is Monday 2030-06-03 08:00 (Paris).
SATURDAY_EVENING = "2030-06-01 20:30:00"
SUNDAY_MORNING = "2030-06-02 10:00:00"
NEXT_MONDAY_8 = "2030-06-03 08:00:00"


def context() -> dict[str, Any]:
    return {"ti": FakeTaskInstance()}


@pytest.fixture(params=["json", "xml"])
def connection(
    request: pytest.FixtureRequest, sms_sandbox: SandboxServer, monkeypatch: pytest.MonkeyPatch
) -> SandboxServer:
    """The sms_default connection on the sandbox, in each wire format."""
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", sms_sandbox.connection_json(request.param))
    return sms_sandbox


def test_sandbox_receives_the_postponed_delay(connection, memory_variables):
    operator = SmsSendOperator(
        task_id="send",
        message={"text": "Soldes -20%", "pushtype": "marketing"},
        recipients=NUMBERS,
        delay=SATURDAY_EVENING,
        max_cost=10,
    )

    result = operator.execute(context())

    (campaign,) = connection.inspect.campaigns()
    assert campaign["delay"] == NEXT_MONDAY_8
    assert result["delay"] == NEXT_MONDAY_8
    assert campaign["ticket"] == result["ticket"]


def test_sandbox_refuses_marketing_outside_the_window(connection):
    hook = SmsHook()
    credits = connection.inspect.credits()
    message = {"text": "Soldes -20%", "pushtype": "marketing", "delay": SUNDAY_MORNING}

    for call in (hook.simulate, hook.send):
        with pytest.raises(SmsApiError) as info:
            call(message, NUMBERS)
        assert info.value.status == -7
        assert info.value.http_status == 400
        assert "outside the marketing send window" in info.value.message
        assert "next allowed time: Monday 2030-06-03 08:00:00 Europe/Paris" in info.value.message
    assert connection.inspect.campaigns() == []
    assert connection.inspect.credits() == credits


def test_sandbox_accepts_an_alert_on_sunday_night(connection):
    SmsHook().send({"text": "Disk full", "pushtype": "alert", "delay": "2030-06-02 03:00:00"}, NUMBERS)

    (campaign,) = connection.inspect.campaigns()
    assert campaign["delay"] == "2030-06-02 03:00:00"


def test_operator_with_ignore_fails_on_the_sandbox_answer_without_retry(connection, memory_variables):
    operator = SmsSendOperator(
        task_id="send",
        message={"text": "Soldes -20%", "pushtype": "marketing"},
        recipients=NUMBERS,
        delay=SUNDAY_MORNING,
        send_window="ignore",
    )

    with pytest.raises(
        AirflowFailException, match=r"status -7, HTTP 400: .*outside the marketing send window.*not retried"
    ):
        operator.execute(context())
    assert connection.inspect.campaigns() == []


def test_raw_request_outside_the_window_gets_status_minus_7(sms_sandbox):
    body = {
        "sms": {
            "message": {"text": "Soldes", "pushtype": "marketing", "delay": SATURDAY_EVENING},
            "recipients": {"gsm": [{"value": NUMBERS[0]}]},
        }
    }
    response = requests.post(
        f"{sms_sandbox.url}/send",
        json=body,
        headers={"Authorization": f"Bearer {sms_sandbox.token}", "Accept": "application/json"},
        timeout=10,
    )

    assert response.status_code == 400
    answer = response.json()
    assert answer["status"] == -7
    assert answer["message"].startswith(
        f"message.delay {SATURDAY_EVENING}: outside the marketing send window"
    )
    assert sms_sandbox.inspect.campaigns() == []
