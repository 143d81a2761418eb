"""SmsNotifier: templated alert SMS sent once from a callback (requests-mock)."""

from __future__ import annotations

import asyncio
import datetime as dt
import re
import traceback
from types import SimpleNamespace
from typing import TYPE_CHECKING

import pytest
import requests
from airflow.providers.common.compat.sdk import BaseNotifier

from airflow_provider_sms.exceptions import (
    SmsAuthError,
    SmsMaybeSentError,
    SmsNothingSentError,
    SmsValidationError,
)
from airflow_provider_sms.notifications.sms import SmsNotifier, send_sms_notification
from tests.compat import notification_fails
from tests.conftest import use_claim_store

from .conftest import BASE_URL, TOKEN, connection_json

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from tests.metrics_recorder import MetricsRecorder

RESULT = {"status": 1, "message": "OK", "ticket": "9", "cost": 1, "credits": 9, "total": 1, "sent": 1}


@pytest.fixture(autouse=True)
def connection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", connection_json(default_sender="Ops"))


@pytest.fixture(autouse=True)
def fold_store(monkeypatch: pytest.MonkeyPatch) -> Engine:
    """The claim store, where alerts are folded, empty in a database of its own (as under ``airflow dags
    test``, the notifier reaches it in process)."""
    return use_claim_store(monkeypatch)


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
    # Its advice is true for a flood: fold (already on), and a fallback; a second number would be flooded too.
    assert "this notifier already folds the alerts within 15 minutes of each other into one SMS" in text
    assert "give the notifier a fallback" in text
    assert "second recipient" not in text
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


# --- Folding, fallback and the advice (#53): alerts that are never lost silently. ---------------------

ON_CALL = ["33612000401", "33612000402"]
SENT_TO_BOTH = {**RESULT, "total": 2, "sent": 2}
FLOODED_BOTH = {**RESULT, "ticket": "5000009", "cost": 0, "total": 2, "sent": 0, "flood": 2}
BLACKLISTED_ONE = {**RESULT, "ticket": "5000010", "cost": 0, "sent": 0, "blacklisted": 1}


def notifier_metrics(recorder: MetricsRecorder) -> list[str]:
    """The notifier's metrics sent, in order (each once: under its fixed name, with its tags)."""
    return [sent.name for sent in recorder.sent if sent.tags is not None and ".notifier." in sent.name]


def task_context(task_id: str, **more: object) -> dict[str, object]:
    return {"dag": None, "ti": SimpleNamespace(task_id=task_id, dag_id="nightly"), "ds": "2026-05-01", **more}


def alert(task_id: str, **arguments: object) -> None:
    """A task's failure callback, as Airflow calls it: a notifier of its own, rendered, then notify (which
    raises on every Airflow when the notification fails)."""
    notifier = SmsNotifier(text="{{ ti.task_id }} failed", recipients=ON_CALL, **arguments)
    context = task_context(task_id)
    notifier.render_template_fields(context)
    notifier.notify(context)


def sent_texts(requests_mock) -> list[str]:
    return [call.json()["sms"]["message"]["text"] for call in requests_mock.request_history]


def test_a_burst_of_alerts_is_one_sms_and_the_next_after_the_interval_carries_the_rest(
    requests_mock, capsys, fold_store, metrics_recorder
):
    from tests.claim_store_checks import rewind_folds

    requests_mock.post(f"{BASE_URL}/send", json=SENT_TO_BOTH)
    alert("load")
    alert("extract")
    alert("transform")

    assert sent_texts(requests_mock) == ["load failed"]
    out = capsys.readouterr().out
    assert re.search(
        r"SMS alert held \(fold_interval 15 minutes\): its numbers got an alert at (\d\d:\d\d) UTC; this one "
        r"goes out, folded into it, with the next alert to them after \d\d:\d\d UTC\.",
        out,
    ), out
    assert "33612000401" not in out

    rewind_folds(fold_store, dt.timedelta(minutes=15))
    alert("report")

    assert len(sent_texts(requests_mock)) == 2
    assert re.fullmatch(
        r"report failed \(\+2 more alerts since \d\d:\d\d UTC: extract failed; transform failed\)",
        sent_texts(requests_mock)[1],
    )
    assert "carrying 2 held alerts" in capsys.readouterr().out
    assert metrics_recorder.total("send.sent", operator="SmsNotifier") == 4  # two SMS to two numbers
    assert notifier_metrics(metrics_recorder) == [
        "sms.notifier.sent",
        "sms.notifier.folded",
        "sms.notifier.folded",
        "sms.notifier.sent",
    ]


def test_the_carried_alerts_are_quoted_short_and_bounded():
    from airflow_provider_sms.api_server.claims import FoldGroup, HeldAlert
    from airflow_provider_sms.notifications._alerts import CARRIED_TEXT_LENGTH, carried, quote

    at = dt.datetime(2026, 5, 1, 2, 14, tzinfo=dt.timezone.utc)
    long = quote("The nightly export of the orders\nto the warehouse failed at step 3 of 7", 50)
    assert long == "The nightly export of the orders to the warehou..."
    group = FoldGroup(positions=[0], held=9, texts=[HeldAlert(at=at, text=long)] * 5)
    suffix = carried(group)
    assert suffix.startswith(f" (+9 more alerts since 02:14 UTC: {long}; {long}; {long}; +6)")
    assert len(suffix) < CARRIED_TEXT_LENGTH + 50
    assert carried(FoldGroup(positions=[0])) == ""


def test_numbers_within_their_interval_hold_the_alert_the_others_get_it(requests_mock, capsys):
    requests_mock.post(f"{BASE_URL}/send", json=RESULT)
    first = SmsNotifier(text="load failed", recipients=ON_CALL[:1])
    first.notify(task_context("load"))
    both = SmsNotifier(text="report failed", recipients=ON_CALL)
    both.notify(task_context("report"))

    assert [call.json()["sms"]["recipients"]["gsm"] for call in requests_mock.request_history] == [
        [{"value": "33612000401"}],
        [{"value": "33612000402"}],
    ]
    assert "held (fold_interval 15 minutes): 1 of its 2 numbers (336•••••401) got an alert" in (
        capsys.readouterr().out
    )


@pytest.mark.parametrize("off", [None, 0, dt.timedelta(0)])
def test_fold_interval_none_or_zero_sends_every_alert(requests_mock, off):
    requests_mock.post(f"{BASE_URL}/send", json=SENT_TO_BOTH)
    for task_id in ("load", "extract", "transform"):
        alert(task_id, fold_interval=off)
    assert sent_texts(requests_mock) == ["load failed", "extract failed", "transform failed"]


def test_marketing_notifications_and_approval_questions_are_never_held(requests_mock):
    from airflow_provider_sms.operators._approval import CONTEXT_KEY

    requests_mock.post(f"{BASE_URL}/send", json=SENT_TO_BOTH)
    for _ in range(2):
        SmsNotifier(text="waits for you", recipients=ON_CALL).notify(
            task_context("send", **{CONTEXT_KEY: {}})
        )
    for _ in range(2):
        SmsNotifier(text="promo", recipients=ON_CALL, pushtype="marketing", send_window="ignore").notify(
            task_context("send")
        )
    assert sent_texts(requests_mock) == ["waits for you", "waits for you", "promo", "promo"]


def test_a_fold_store_that_cannot_answer_never_holds_an_alert(requests_mock, capsys, fold_store):
    from airflow_provider_sms.api_server.claims import fold_table

    fold_table.drop(fold_store)
    requests_mock.post(f"{BASE_URL}/send", json=SENT_TO_BOTH)
    alert("load")
    alert("extract")

    assert sent_texts(requests_mock) == ["load failed", "extract failed"]
    out = capsys.readouterr().out
    assert "The SMS alert is sent unfolded: the store that folds alerts did not answer" in out
    assert "airflow db migrate" in out


def test_a_task_with_no_api_server_to_fold_through_sends_its_alert_unfolded(
    requests_mock, capsys, monkeypatch
):
    """A worker's task (no database): the fold store is on the API server, whose URL is not set."""
    from airflow_provider_sms.operators import _claims

    monkeypatch.setattr(_claims, "database_in_process", lambda: False)
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "")
    requests_mock.post(f"{BASE_URL}/send", json=SENT_TO_BOTH)
    alert("load")
    alert("extract")

    assert sent_texts(requests_mock) == ["load failed", "extract failed"]
    assert (
        "sent unfolded: the store that folds alerts did not answer (The claim store"
        in capsys.readouterr().out
    )


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"fold_interval": 15}, "fold_interval"),
        ({"fold_interval": dt.timedelta(days=2)}, "fold_interval"),
        ({"fold_interval": dt.timedelta(minutes=-1)}, "fold_interval"),
        ({"fallback": "slack"}, "fallback"),
    ],
)
def test_a_wrong_fold_interval_or_fallback_is_refused_when_the_dag_is_parsed(value, field):
    with pytest.raises(SmsValidationError, match=f"^{field}="):
        SmsNotifier(text="down", recipients=ON_CALL, **value)


class FileNotifier(BaseNotifier):
    """A notifier of another channel (Slack, email...): its templated message, kept in a list."""

    template_fields = ("message",)

    def __init__(self, message: str, inbox: list[str], fail: bool = False) -> None:
        super().__init__()
        self.message = message
        self.inbox = inbox
        self.fail = fail

    def notify(self, context: object) -> None:
        if self.fail:
            raise RuntimeError("the other channel is down too")
        self.inbox.append(self.message)


FALLBACK_MESSAGE = "{{ ti.task_id }}: {{ sms_alert.text }} [{{ sms_alert.reason }}] {{ sms_alert.what }}"


def test_an_alert_every_number_of_which_was_flooded_goes_to_the_fallback_and_the_log_says_so(
    requests_mock, capsys, metrics_recorder
):
    requests_mock.post(f"{BASE_URL}/send", json=FLOODED_BOTH)
    inbox: list[str] = []
    fallback = FileNotifier(FALLBACK_MESSAGE, inbox)

    alert("load", fallback=fallback)  # does not raise: the alert reached someone

    assert inbox == ["load: load failed [flood] 0 of 2 numbers sent, 2 filtered (flood 2), ticket 5000009"]
    assert fallback.message == FALLBACK_MESSAGE  # rendered on a copy: the next alert renders it again
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if "handed to the fallback" in line)
    assert re.search(
        r"The SMS notification reached nobody \(0 of 2 numbers sent, 2 filtered \(flood 2\), "
        r"ticket 5000009\); handed to the fallback FileNotifier: sent\. The anti-flood counts every SMS to "
        r"a number, from any DAG: this notifier already folds",
        line,
    ), line
    assert "warning" in line.lower()
    assert "second recipient" not in line
    assert "give the notifier a fallback" not in line
    assert metrics_recorder.total("notifier.not_delivered", conn_id="sms_default", reason="flood") == 1
    assert metrics_recorder.total("notifier.fallback", conn_id="sms_default", outcome="sent") == 1
    assert notifier_metrics(metrics_recorder) == ["sms.notifier.not_delivered", "sms.notifier.fallback"]
    # The send's own figures, as every send's (tagged with the task the callback is for).
    assert (
        metrics_recorder.total("send.filtered", reason="flood", operator="SmsNotifier", task_id="load") == 2
    )
    assert metrics_recorder.personal_data([*ON_CALL, "load failed", TOKEN]) == []


def test_a_fallback_that_fails_too_is_logged_with_the_sms_and_the_callback_fails(
    requests_mock, capsys, metrics_recorder
):
    requests_mock.post(f"{BASE_URL}/send", json=FLOODED_BOTH)
    notifier = SmsNotifier(text="load failed", recipients=ON_CALL, fallback=FileNotifier("x", [], fail=True))

    with notification_fails(SmsNotifier, SmsNothingSentError, match="reached nobody: 0 of 2 numbers sent"):
        notifier(task_context("load"))

    assert re.search(
        r"The SMS notification reached nobody \(.*\); handed to the fallback FileNotifier: failed "
        r"\(RuntimeError: the other channel is down too\)\.",
        capsys.readouterr().out,
    )
    assert metrics_recorder.total("notifier.fallback", outcome="failed") == 1


def test_without_a_fallback_the_callback_fails_and_the_fallback_is_counted_none(
    requests_mock, metrics_recorder
):
    requests_mock.post(f"{BASE_URL}/send", json=FLOODED_BOTH)
    with notification_fails(SmsNotifier, SmsNothingSentError):
        SmsNotifier(text="load failed", recipients=ON_CALL)(task_context("load"))
    assert metrics_recorder.total("notifier.fallback", outcome="none") == 1


@pytest.mark.parametrize(
    ("answer", "recipients", "reason", "what"),
    [
        (
            {"status_code": 502},
            ON_CALL,
            "maybe_sent",
            "The SMS notification's outcome is unknown (POST /send",
        ),
        (
            {"json": {"status": -7, "message": "invalid sender"}, "status_code": 400},
            ON_CALL,
            "refused",
            "The SMS notification reached nobody (the service refused it: ",
        ),
        (
            {"exc": requests.ConnectTimeout("connect timed out")},
            ON_CALL,
            "unreachable",
            "The SMS notification reached nobody (the service was unreachable or busy: ",
        ),
        (
            {"json": RESULT},
            ["0612345678"],
            "invalid",
            "The SMS notification reached nobody (not sent: recipients",
        ),
        (
            {"json": BLACKLISTED_ONE},
            ON_CALL[:1],
            "filtered",
            "reached nobody (0 of 1 numbers sent, 1 filtered",
        ),
    ],
)
def test_whatever_stopped_it_a_notification_that_reached_nobody_goes_to_the_fallback(
    requests_mock, capsys, metrics_recorder, answer, recipients, reason, what
):
    requests_mock.post(f"{BASE_URL}/send", **answer)
    seen: list[dict[str, object]] = []

    SmsNotifier(text="load failed", recipients=recipients, fallback=seen.append).notify(task_context("load"))

    (context,) = seen
    assert context["sms_alert"]["reason"] == reason
    assert context["sms_alert"]["text"] == "load failed"
    assert context["ti"].task_id == "load"  # the callback's own context
    assert requests_mock.call_count <= 1  # a send is never repeated
    out = capsys.readouterr().out
    assert what in out
    assert "handed to the fallback list.append: sent." in out
    assert ("told twice rather than lost" in out) == (reason == "maybe_sent")
    assert ("second recipient" in out) == (reason == "filtered")
    assert metrics_recorder.total("notifier.not_delivered", pushtype="alert", reason=reason) == 1


def test_another_sms_connection_can_be_the_fallback(requests_mock, monkeypatch, capsys):
    backup = "https://backup.sms.test"
    monkeypatch.setenv("AIRFLOW_CONN_SMS_BACKUP", connection_json().replace(BASE_URL, backup))
    requests_mock.post(f"{BASE_URL}/send", json=FLOODED_BOTH)
    requests_mock.post(f"{backup}/send", json=RESULT)
    fallback = SmsNotifier(
        text="{{ ti.task_id }} failed (by the backup: {{ sms_alert.reason }})",
        recipients=["33612000499"],
        sms_conn_id="sms_backup",
    )

    alert("load", fallback=fallback)

    assert requests_mock.request_history[-1].url == f"{backup}/send"
    assert sent_texts(requests_mock)[-1] == "load failed (by the backup: flood)"
    assert "handed to the fallback SmsNotifier: sent" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("figures", "numbers", "fold", "fallback", "says", "never"),
    [
        (
            {"flood": 2},
            2,
            dt.timedelta(minutes=15),
            False,
            ["already folds", "give the notifier a fallback"],
            ["second recipient"],
        ),
        (
            {"flood": 1},
            1,
            None,
            False,
            ["set fold_interval", "give the notifier a fallback"],
            ["second recipient"],
        ),
        (
            {"flood": 2},
            2,
            dt.timedelta(minutes=15),
            True,
            ["already folds"],
            ["fallback", "second recipient"],
        ),
        ({"blacklisted": 1}, 1, dt.timedelta(minutes=15), False, ["second recipient", "fallback"], ["fold"]),
        (
            {"blacklisted": 1, "npai": 1},
            2,
            dt.timedelta(minutes=15),
            False,
            ["give the notifier a fallback"],
            ["second recipient", "fold"],
        ),
        ({"npai": 2}, 2, None, True, [], ["second recipient", "fallback", "fold"]),
    ],
)
def test_the_advice_is_true_for_the_case(figures, numbers, fold, fallback, says, never):
    from airflow_provider_sms.notifications._alerts import nobody_advice

    advice = nobody_advice(figures, numbers=numbers, fold_interval=fold, fallback=fallback)
    for phrase in says:
        assert phrase in advice
    for phrase in never:
        assert phrase not in advice


@pytest.mark.skipif(not hasattr(BaseNotifier, "__await__"), reason="Airflow 3.0 never awaits a notifier")
def test_an_awaited_notifier_hands_an_alert_that_reached_nobody_to_the_fallback(requests_mock):
    requests_mock.post(f"{BASE_URL}/send", json=FLOODED_BOTH)
    inbox: list[str] = []
    notifier = SmsNotifier(
        text="{{ ti.task_id }} failed",
        recipients=ON_CALL,
        fallback=FileNotifier("{{ sms_alert.text }} (triggerer)", inbox),
        context=task_context("deadline"),
    )

    async def awaited() -> None:
        await notifier

    asyncio.run(awaited())
    assert inbox == ["deadline failed (triggerer)"]


def test_the_new_arguments_are_not_templated():
    assert {"fallback", "fold_interval"}.isdisjoint(SmsNotifier.template_fields)
