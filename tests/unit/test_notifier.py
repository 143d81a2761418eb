"""SmsNotifier: templated alert SMS sent once from a callback (requests-mock)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from airflow_provider_sms.exceptions import SmsMaybeSentError, SmsValidationError
from airflow_provider_sms.notifications.sms import SmsNotifier, send_sms_notification
from tests.compat import notification_fails

from .conftest import BASE_URL, connection_json

RESULT = {"status": 1, "message": "OK", "ticket": "9", "cost": 1, "credits": 9, "total": 1, "sent": 1}


@pytest.fixture(autouse=True)
def connection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", connection_json(default_sender="Ops"))


def callback_context() -> dict[str, object]:
    # Airflow always passes the DAG (Airflow 3.0's BaseNotifier reads context["dag"]).
    return {"dag": None, "ti": SimpleNamespace(task_id="load", dag_id="nightly"), "ds": "2026-05-01"}


def test_notifier_renders_its_templates_and_sends_one_alert(requests_mock, capsys):
    requests_mock.post(f"{BASE_URL}/send", json=RESULT)
    notifier = SmsNotifier(
        text="{{ ti.dag_id }}.{{ ti.task_id }} failed on {{ ds }}",
        recipients=["{{ '+33 6 12 34 56 78' }}"],
    )

    notifier(callback_context())

    assert requests_mock.call_count == 1
    body = requests_mock.last_request.json()["sms"]
    assert body["message"] == {
        "text": "nightly.load failed on 2026-05-01",
        "pushtype": "alert",
        "sender": "Ops",
    }
    assert body["recipients"]["gsm"] == [{"value": "33612345678"}]
    assert "SMS notification sent: ticket 9" in capsys.readouterr().out


def test_notifier_is_never_retried_when_the_outcome_is_unknown(requests_mock):
    requests_mock.post(f"{BASE_URL}/send", status_code=502)
    with notification_fails(SmsNotifier, SmsMaybeSentError):
        send_sms_notification(text="down", recipients="33612345678", sender="Alerts")(callback_context())
    assert requests_mock.call_count == 1
    assert requests_mock.last_request.json()["sms"]["message"]["sender"] == "Alerts"


def test_notifier_validates_before_sending(requests_mock):
    with notification_fails(SmsNotifier, SmsValidationError, match="national number"):
        SmsNotifier(text="down", recipients=["0612345678"])(callback_context())
    assert requests_mock.call_count == 0


def test_alias_and_template_fields():
    assert send_sms_notification is SmsNotifier
    assert {"text", "recipients"} <= set(SmsNotifier.template_fields)
