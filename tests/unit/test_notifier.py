"""SmsNotifier: templated alert SMS sent once from a callback (requests-mock)."""

from __future__ import annotations

import asyncio
import traceback
from types import SimpleNamespace

import pytest
from airflow.providers.common.compat.sdk import BaseNotifier

from airflow_provider_sms.exceptions import (
    SmsAuthError,
    SmsMaybeSentError,
    SmsNothingSentError,
    SmsValidationError,
)
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


FLOODED = {**RESULT, "ticket": "5000008", "cost": 0, "credits": 10, "sent": 0, "flood": 1}


def test_a_notification_that_reached_nobody_is_not_called_sent_and_fails_naming_why(requests_mock, capsys):
    requests_mock.post(f"{BASE_URL}/send", json=FLOODED)

    with notification_fails(SmsNotifier, SmsNothingSentError) as failure:
        SmsNotifier(text="nightly.load failed", recipients=["33612345678"])(callback_context())

    assert requests_mock.call_count == 1  # never sent again
    assert "SMS notification sent" not in capsys.readouterr().out
    text = str(failure.error)
    assert text.startswith(
        "The SMS notification reached nobody: 0 of 1 numbers sent, 1 filtered (flood 1), ticket 5000008. "
        "flood: messages held back by the service's anti-flood"
    )
    assert "give the notifier a second recipient" in text
    assert failure.error.figures["flood"] == 1


@pytest.mark.parametrize(
    ("answer", "raised"),
    [
        ({"status_code": 502}, SmsMaybeSentError),
        (
            {"json": {"status": -1, "message": "invalid or missing access token"}, "status_code": 401},
            SmsAuthError,
        ),
        ({"json": FLOODED}, SmsNothingSentError),
    ],
)
def test_a_failed_notification_carries_no_frame_of_the_provider_below_notify(requests_mock, answer, raised):
    """Airflow logs a failed callback with its traceback: the provider's part of it is one frame."""
    requests_mock.post(f"{BASE_URL}/send", **answer)
    notifier = SmsNotifier(text="down", recipients="33612345678")

    with notification_fails(SmsNotifier, raised) as failure:
        notifier(callback_context())

    error = failure.error
    assert "".join(traceback.format_exception(error)).count("Traceback") == 1  # nothing chained
    frames = [
        frame
        for frame in traceback.extract_tb(error.__traceback__)
        if "airflow_provider_sms" in frame.filename
    ]
    assert [frame.name for frame in frames] == ["notify"]


def test_the_options_after_the_recipients_are_keyword_only():
    notifier = SmsNotifier("down", ["33612345678"], pushtype="marketing", sender="Ops")
    assert (notifier.text, notifier.pushtype, notifier.sender) == ("down", "marketing", "Ops")
    with pytest.raises(TypeError):
        SmsNotifier("down", ["33612345678"], "marketing")  # type: ignore[misc]


@pytest.mark.skipif(not hasattr(BaseNotifier, "__await__"), reason="Airflow 3.0 never awaits a notifier")
def test_an_awaited_notifier_renders_its_templates_and_sends_one_alert(requests_mock, capsys):
    """As the triggerer runs it: the context given to the notifier, the notifier awaited."""
    requests_mock.post(f"{BASE_URL}/send", json=RESULT)
    notifier = SmsNotifier(
        text="{{ ti.dag_id }}.{{ ti.task_id }} failed on {{ ds }}",
        recipients=["33612345678"],
        context=callback_context(),
    )

    async def awaited() -> None:
        await notifier

    asyncio.run(awaited())

    assert requests_mock.call_count == 1
    assert requests_mock.last_request.json()["sms"]["message"]["text"] == "nightly.load failed on 2026-05-01"
    assert "SMS notification sent: ticket 9" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("answer", "raised"),
    [({"status_code": 502}, SmsMaybeSentError), ({"json": FLOODED}, SmsNothingSentError)],
)
def test_async_notify_sends_once_and_fails_as_notify_does(requests_mock, answer, raised):
    requests_mock.post(f"{BASE_URL}/send", **answer)
    notifier = SmsNotifier(text="down", recipients="33612345678")

    with pytest.raises(raised) as failure:
        asyncio.run(notifier.async_notify(callback_context()))

    assert requests_mock.call_count == 1  # never sent again
    assert "".join(traceback.format_exception(failure.value)).count("Traceback") == 1
    frames = [
        frame
        for frame in traceback.extract_tb(failure.value.__traceback__)
        if "airflow_provider_sms" in frame.filename
    ]
    assert [frame.name for frame in frames] == ["async_notify"]
