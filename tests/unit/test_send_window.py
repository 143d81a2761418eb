"""The marketing send window: the rule on explicit dates, the operators' modes and the notifier.

Expected times are written out as explicit Paris dates. The window function takes ``now``; only the
notifier, which has no such parameter, gets a fixed clock through ``send_window._now``.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pendulum
import pytest
from airflow.providers.common.compat.sdk import AirflowFailException

from airflow_provider_sms import send_window
from airflow_provider_sms.exceptions import SmsValidationError
from airflow_provider_sms.models import Message
from airflow_provider_sms.notifications.sms import SmsNotifier
from airflow_provider_sms.operators.sms import SmsSendListsOperator, SmsSendOperator, SmsSimulateOperator
from airflow_provider_sms.send_window import (
    apply_send_window,
    is_allowed,
    next_allowed,
    unsubscribe_length_warning,
)
from tests.compat import notification_fails
from tests.task_instance import FakeTaskInstance

from .conftest import BASE_URL, connection_json

PARIS = "Europe/Paris"
NUMBERS = ["33612345678", "33612345679"]
RESULT = {"status": 1, "message": "OK", "ticket": "7", "cost": 2, "credits": 98, "total": 2, "sent": 2}
# Future dates for the operators (the delay must not be in the past). 2030-06-01 is a Saturday.
SATURDAY_EVENING = "2030-06-01 20:30:00"
NEXT_MONDAY_8 = "2030-06-03 08:00:00"


def paris(*args: int) -> pendulum.DateTime:
    return pendulum.datetime(*args, tz=PARIS)


@pytest.mark.parametrize(
    ("moment", "expected"),
    [
        pytest.param(paris(2026, 11, 27, 19, 59), paris(2026, 11, 27, 19, 59), id="friday-19:59-stays"),
        pytest.param(paris(2026, 11, 27, 19, 59, 59), paris(2026, 11, 27, 19, 59, 59), id="19:59:59-stays"),
        pytest.param(paris(2026, 11, 27, 20, 0), paris(2026, 11, 28, 8, 0), id="friday-20:00-to-saturday"),
        pytest.param(paris(2026, 11, 28, 20, 0), paris(2026, 11, 30, 8, 0), id="saturday-20:00-to-monday"),
        pytest.param(paris(2026, 11, 28, 20, 30), paris(2026, 11, 30, 8, 0), id="saturday-20:30-to-monday"),
        pytest.param(paris(2026, 11, 29, 12, 0), paris(2026, 11, 30, 8, 0), id="sunday-to-monday"),
        pytest.param(paris(2026, 11, 30, 7, 59), paris(2026, 11, 30, 8, 0), id="monday-07:59-same-day"),
        pytest.param(paris(2026, 11, 30, 8, 0), paris(2026, 11, 30, 8, 0), id="08:00-is-inside"),
        pytest.param(paris(2026, 7, 14, 10, 0), paris(2026, 7, 15, 8, 0), id="14-july-tuesday"),
        pytest.param(paris(2026, 12, 24, 20, 30), paris(2026, 12, 26, 8, 0), id="christmas-eve-evening"),
        pytest.param(paris(2026, 5, 25, 9, 0), paris(2026, 5, 26, 8, 0), id="whit-monday"),
        pytest.param(
            pendulum.datetime(2026, 11, 27, 19, 30, tz="UTC"),
            paris(2026, 11, 28, 8, 0),
            id="utc-is-converted",
        ),
    ],
)
def test_next_allowed_time(moment, expected):
    assert next_allowed(moment) == expected
    assert is_allowed(moment) is (moment == expected)


@pytest.mark.parametrize(
    ("moment", "expected", "offset_hours"),
    [
        # Spring: clocks go forward in the night of Sunday 2026-03-29.
        (paris(2026, 3, 28, 21, 0), "2026-03-30 08:00:00", 2),
        # Autumn: clocks go back in the night of Sunday 2026-10-25.
        (paris(2026, 10, 24, 21, 0), "2026-10-26 08:00:00", 1),
    ],
)
def test_dst_weekend_keeps_wall_clock_8(moment, expected, offset_hours):
    allowed = next_allowed(moment)

    assert allowed.strftime("%Y-%m-%d %H:%M:%S") == expected
    assert allowed.utcoffset() == dt.timedelta(hours=offset_hours)


def marketing(**fields: Any) -> Message:
    return Message(text="Soldes -20%", pushtype="marketing", **fields)


def test_postpone_sets_a_delay_when_sending_now_outside_the_window(caplog):
    message = apply_send_window(marketing(), "postpone", now=paris(2026, 11, 28, 20, 30))

    assert message.delay == "2026-11-30 08:00:00"
    assert "sending now (Saturday 2026-11-28 20:30:00 Europe/Paris)" in caplog.text
    assert "postponed to Monday 2026-11-30 08:00:00 Europe/Paris" in caplog.text


def test_inside_the_window_nothing_changes(caplog):
    original = marketing()
    assert apply_send_window(original, "fail", now=paris(2026, 11, 27, 19, 59)) is original
    delayed = marketing(delay="2030-06-01 19:59:00")
    assert apply_send_window(delayed, "fail", now=paris(2030, 6, 1, 21, 0)) is delayed
    assert "send window" not in caplog.text


@pytest.mark.parametrize("mode", ["postpone", "fail", "ignore"])
def test_alerts_at_3am_are_untouched(mode):
    alert = Message(text="Disk full", pushtype="alert")
    assert apply_send_window(alert, mode, now=paris(2026, 11, 29, 3, 0)) is alert
    delayed = Message(text="Disk full", pushtype="alert", delay="2030-06-02 03:00:00")
    assert apply_send_window(delayed, mode).delay == "2030-06-02 03:00:00"


def test_no_pushtype_is_not_marketing():
    plain = Message(text="Hello")
    assert apply_send_window(plain, "fail", now=paris(2026, 11, 29, 3, 0)) is plain


def test_fail_names_the_rule_and_the_next_allowed_time():
    with pytest.raises(SmsValidationError) as info:
        apply_send_window(marketing(delay="2030-06-02 10:00:00"), "fail")

    text = str(info.value)
    assert "delay Sunday 2030-06-02 10:00:00 Europe/Paris is outside the marketing send window" in text
    assert "08:00-20:00 Europe/Paris time, Monday to Saturday" in text
    assert "next allowed time is Monday 2030-06-03 08:00:00 Europe/Paris" in text
    assert info.value.errors[0][0] == "delay"


def test_ignore_keeps_the_message(caplog):
    message = marketing(delay="2030-06-02 10:00:00")
    assert apply_send_window(message, "ignore") is message
    assert "send_window='ignore'" in caplog.text


def test_unknown_mode_is_refused():
    with pytest.raises(SmsValidationError, match=r"send_window='later': use 'postpone', 'fail' or 'ignore'"):
        apply_send_window(Message(text="x", pushtype="alert"), "later")


@pytest.mark.parametrize(
    ("text", "sender", "pushtype", "expected"),
    [
        (
            "a" * 150,
            "Boutique",
            "marketing",
            "2 SMS parts, not 1 (GSM-7, 150 + 16 characters); shorten the text by 6",
        ),
        (
            "a" * 300,
            "Boutique",
            "marketing",
            "3 SMS parts, not 2 (GSM-7, 300 + 16 characters); shorten the text by 10",
        ),
        (
            "\u2019" * 60,
            "Boutique",
            "marketing",
            "2 SMS parts, not 1 (UCS-2, 60 + 16 characters); shorten the text by 6",
        ),
        ("a" * 144, "Boutique", "marketing", None),
        ("a" * 150, None, "marketing", None),
        ("a" * 150, "Boutique", "alert", None),
    ],
    ids=["150-gsm", "300-gsm", "60-unicode", "144-fits", "no-sender", "alert"],
)
def test_unsubscribe_mention_length_hint(text, sender, pushtype, expected):
    hint = unsubscribe_length_warning(Message(text=text, sender=sender, pushtype=pushtype))

    if expected is None:
        assert hint is None
    else:
        assert expected in hint
        assert "'Boutique'" in hint


# ------------------------------------------------------------------------------------ operators


@pytest.fixture
def service(requests_mock: Any, monkeypatch: pytest.MonkeyPatch, memory_variables: dict[str, str]) -> Any:
    """requests-mock answering every campaign endpoint with RESULT."""
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", connection_json())
    for path in ("/send", "/send/simulate", "/send/lists", "/send/lists/simulate"):
        requests_mock.post(f"{BASE_URL}{path}", json=RESULT)
    return requests_mock


def context() -> dict[str, Any]:
    return {"ti": FakeTaskInstance()}


def sent_delay(service: Any) -> str | None:
    return service.last_request.json()["sms"]["message"].get("delay")


@pytest.mark.parametrize(
    ("delay", "expected"),
    [
        (SATURDAY_EVENING, NEXT_MONDAY_8),
        ("2030-06-01T18:30:00+00:00", NEXT_MONDAY_8),  # the same instant, given in UTC
        ("2031-07-14 10:00:00", "2031-07-15 08:00:00"),  # Bastille Day, a Monday
        ("2030-03-30 21:00:00", "2030-04-01 08:00:00"),  # DST weekend: Monday 08:00, summer time
        ("2030-06-01 19:59:00", "2030-06-01 19:59:00"),
    ],
)
def test_send_operator_postpones_by_default_and_returns_the_delay_sent(service, capsys, delay, expected):
    message = {"text": "Soldes -20%", "pushtype": "marketing"}
    result = SmsSendOperator(task_id="send", message=message, recipients=NUMBERS, delay=delay).execute(
        context()
    )

    assert sent_delay(service) == expected
    assert result["delay"] == expected
    out = capsys.readouterr().out
    assert f"delay {expected} Europe/Paris" in out
    if expected != delay:
        assert "postponed to" in out
        assert f"{expected} Europe/Paris (send_window='postpone')" in out


def test_lists_and_simulate_operators_postpone_too(service):
    message = {"text": "Soldes", "pushtype": "marketing", "delay": SATURDAY_EVENING}

    simulated = SmsSimulateOperator(task_id="sim", message=message, lists=[1]).execute(context())
    assert sent_delay(service) == NEXT_MONDAY_8
    assert simulated["delay"] == NEXT_MONDAY_8
    sent = SmsSendListsOperator(task_id="send", message=message, lists=[1]).execute(context())
    assert service.last_request.path == "/send/lists"
    assert sent_delay(service) == NEXT_MONDAY_8
    assert sent["delay"] == NEXT_MONDAY_8


def test_fail_mode_raises_before_any_request(service):
    operator = SmsSendOperator(
        task_id="send",
        message={"text": "Soldes", "pushtype": "marketing"},
        recipients=NUMBERS,
        delay=SATURDAY_EVENING,
        send_window="fail",
        max_cost=10,
    )

    with pytest.raises(AirflowFailException, match="next allowed time is Monday 2030-06-03 08:00:00") as info:
        operator.execute(context())
    assert "Monday to Saturday, never on Sundays or French public holidays" in str(info.value)
    assert service.call_count == 0


def test_ignore_mode_sends_the_delay_as_given(service):
    message = {"text": "Soldes", "pushtype": "marketing", "delay": "2030-06-02 10:00:00"}
    SmsSendOperator(task_id="send", message=message, recipients=NUMBERS, send_window="ignore").execute(
        context()
    )

    assert sent_delay(service) == "2030-06-02 10:00:00"


def test_alert_at_3am_on_a_sunday_is_sent_as_given(service):
    message = {"text": "Disk full", "pushtype": "alert"}
    result = SmsSendOperator(
        task_id="send", message=message, recipients=NUMBERS, delay="2030-06-02 03:00:00", send_window="fail"
    ).execute(context())

    assert sent_delay(service) == "2030-06-02 03:00:00"
    assert result["delay"] == "2030-06-02 03:00:00"


def test_send_window_is_checked_at_parse_time_and_after_rendering(service):
    with pytest.raises(SmsValidationError, match="send_window='later'"):
        SmsSendOperator(task_id="send", message="Hi", recipients=NUMBERS, send_window="later")
    assert "send_window" in SmsSendOperator.template_fields
    assert "send_window" in SmsSimulateOperator.template_fields
    operator = SmsSendOperator(
        task_id="send", message="Hi", recipients=NUMBERS, send_window="{{ var.value.sms_send_window }}"
    )
    operator.send_window = "later"  # what a template might render to

    with pytest.raises(AirflowFailException, match="send_window='later'"):
        operator.execute(context())
    assert service.call_count == 0


def test_operator_warns_when_the_stop_mention_adds_a_part(service, capsys):
    message = {
        "text": "a" * 150,
        "pushtype": "marketing",
        "sender": "Boutique",
        "delay": "2030-06-01 10:00:00",
    }
    SmsSendOperator(task_id="send", message=message, recipients=NUMBERS).execute(context())

    assert "each recipient gets 2 SMS parts, not 1" in capsys.readouterr().out


# ------------------------------------------------------------------------------------- notifier


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Set the window module's clock (the notifier has no ``now`` parameter)."""

    def set_to(moment: pendulum.DateTime) -> None:
        monkeypatch.setattr(send_window, "_now", lambda: moment)

    return set_to


# Airflow always passes the DAG (Airflow 3.0's BaseNotifier reads context["dag"]).
CALLBACK_CONTEXT: dict[str, Any] = {"dag": None}


def test_notifier_alert_is_sent_at_night_without_delay(service, clock):
    clock(paris(2026, 11, 29, 3, 0))
    SmsNotifier(text="load failed", recipients=NUMBERS)(CALLBACK_CONTEXT)

    assert service.call_count == 1
    assert sent_delay(service) is None


def test_notifier_marketing_is_postponed(service, clock, capsys):
    clock(paris(2026, 11, 28, 20, 30))
    SmsNotifier(text="New arrivals", recipients=NUMBERS, pushtype="marketing")(CALLBACK_CONTEXT)

    assert sent_delay(service) == "2026-11-30 08:00:00"
    assert "delayed to 2026-11-30 08:00:00 Europe/Paris" in capsys.readouterr().out


def test_notifier_marketing_fail_mode_sends_nothing(service, clock):
    clock(paris(2026, 7, 14, 12, 0))
    notifier = SmsNotifier(text="New arrivals", recipients=NUMBERS, pushtype="marketing", send_window="fail")

    with notification_fails(
        SmsNotifier, SmsValidationError, match="next allowed time is Wednesday 2026-07-15 08:00:00"
    ):
        notifier(CALLBACK_CONTEXT)
    assert service.call_count == 0


@pytest.mark.parametrize("operator_class", [SmsSendOperator, SmsSimulateOperator])
def test_the_result_says_when_the_send_window_moved_the_delay(service, operator_class):
    result = operator_class(
        task_id="send",
        message={"text": "Soldes", "pushtype": "marketing"},
        recipients=["33612345678"],
        delay="2030-06-02 10:00:00",  # a Sunday
    ).execute(context())

    assert result["send_window"] == {
        "requested": "2030-06-02 10:00:00",
        "moved_to": "2030-06-03 08:00:00",
        "reason": (
            "it is a Sunday: marketing SMS may only be sent 08:00-20:00 Europe/Paris time, "
            "Monday to Saturday, never on Sundays or French public holidays (send_window='postpone')"
        ),
    }
    assert result["delay"] == "2030-06-03 08:00:00"


def test_the_result_names_the_public_holiday_and_says_nothing_when_nothing_moved(service):
    moved = SmsSendOperator(
        task_id="send",
        message={"text": "Soldes", "pushtype": "marketing"},
        recipients=["33612345678"],
        delay="2030-12-25 10:00:00",
    ).execute(context())
    kept = SmsSendOperator(
        task_id="send",
        message={"text": "Soldes", "pushtype": "marketing"},
        recipients=["33612345678"],
        delay="2030-12-24 10:00:00",
    ).execute(context())

    assert moved["send_window"]["reason"].startswith("it is a French public holiday (Christmas Day)")
    assert moved["send_window"]["moved_to"] == "2030-12-26 08:00:00"
    assert "send_window" not in kept


def test_the_demo_summary_says_when_the_send_window_moved_the_delay():
    from dags_examples.demo import summary

    send = {
        "ticket": "5000001",
        "sent": 8,
        "total": 10,
        "filtered": 2,
        "cost": 8,
        "delay": "2030-06-03 08:00:00",
        "gate": None,
        "send_window": {
            "requested": "2030-06-02 10:00:00",
            "moved_to": "2030-06-03 08:00:00",
            "reason": "it is a Sunday: marketing SMS ...",
        },
    }

    lines = summary({"send": "success"}, {"send": send}, [], credits=9992, max_cost=50)

    assert (
        "Send window: requested 2030-06-02 10:00:00, moved to 2030-06-03 08:00:00 Europe/Paris "
        "because it is a Sunday: marketing SMS ..."
    ) in lines
