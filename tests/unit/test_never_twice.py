"""Never twice across runs, per person: the claims, guards that fail closed, gates that fail closed.

The operators run with requests-mock, the guard in the in-memory Variable store, and the claim store in
a SQLite database of its own (the in-process path, as under ``airflow dags test``). The store's races
are in test_claim_store.py.
"""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

import pendulum
import pytest
from airflow import settings
from airflow.providers.common.compat.sdk import AirflowFailException, AirflowSkipException
from sqlalchemy import select

from airflow_provider_sms.api_server.claims import claim_chunk_table, claim_table
from airflow_provider_sms.exceptions import SmsValidationError
from airflow_provider_sms.operators import _claims
from airflow_provider_sms.operators._recipient_batches import NumberSetDigest
from airflow_provider_sms.operators._send_guard import guard_key
from airflow_provider_sms.operators.sms import SmsSendListsOperator, SmsSendOperator

from .conftest import BASE_URL, TOKEN, connection_json
from .test_operators import FUTURE, NUMBERS, Service, calls, context, numbers_of

DAY_AFTER = "2030-07-02T08:00:00+00:00"
HALF_AN_HOUR_LATER = "2030-07-01T08:30:00+00:00"


@pytest.fixture(autouse=True)
def variables(monkeypatch: pytest.MonkeyPatch, memory_variables: dict[str, str]) -> dict[str, str]:
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", connection_json())
    return memory_variables


def send(run_id: str, **kwargs: Any) -> dict[str, Any]:
    """Run a send task of the DAG ``campaigns`` in run ``run_id``."""
    arguments: dict[str, Any] = {"task_id": "send", "message": "Hi", "recipients": NUMBERS, **kwargs}
    return SmsSendOperator(**arguments).execute(context(run_id))


def claims() -> list[Any]:
    """The claim store's claims, oldest first."""
    with settings.engine.connect() as connection:
        return list(connection.execute(select(claim_table).order_by(claim_table.c.id)))


def claimed_numbers() -> int:
    with settings.engine.connect() as connection:
        return sum(connection.execute(select(claim_chunk_table.c.numbers)).scalars())


# ------------------------------------------------------------------------------- the same campaign


def test_a_second_run_of_the_same_campaign_is_refused_before_any_request(requests_mock):
    Service().mount(requests_mock)
    send("scheduled__2030-06-30", delay=FUTURE)
    requests_mock.reset_mock()

    with pytest.raises(AirflowFailException) as info:
        send("manual__2030-06-30", delay=FUTURE, max_cost=10)

    text = str(info.value)
    assert "DAG 'campaigns', run 'scheduled__2030-06-30', task 'send' sent it (ticket 101)" in text
    assert "for delivery at 2030-07-01 10:00:00 Europe/Paris" in text
    assert "on_duplicate='send'" in text
    assert "one transaction per send" in text
    assert "race" not in text
    assert requests_mock.call_count == 0  # not even the simulation


def test_skip_and_send_on_duplicate(requests_mock, capsys):
    service = Service().mount(requests_mock)
    send("run_a")

    with pytest.raises(AirflowSkipException, match="already sent"):
        send("run_b", on_duplicate="skip")
    result = send("run_c", on_duplicate="send")

    assert result["ticket"] == "102"
    assert len(service.sent_bodies) == 2
    assert "Sending it again (on_duplicate='send')" in capsys.readouterr().out


def test_a_daily_reminder_is_sent_on_consecutive_days_but_not_twice_in_an_hour(requests_mock):
    service = Service().mount(requests_mock)
    with pendulum.travel_to(pendulum.datetime(2030, 7, 1, 9, 0, tz="Europe/Paris"), freeze=True):
        send("scheduled__2030-07-01")
    with (
        pendulum.travel_to(pendulum.datetime(2030, 7, 1, 9, 50, tz="Europe/Paris"), freeze=True),
        pytest.raises(AirflowFailException, match="within 60 minutes"),
    ):
        send("manual__2030-07-01")
    with pendulum.travel_to(pendulum.datetime(2030, 7, 2, 9, 0, tz="Europe/Paris"), freeze=True):
        send("scheduled__2030-07-02")

    assert len(service.sent_bodies) == 2


@pytest.mark.parametrize(
    ("second_delay", "refused"),
    [(FUTURE, True), (HALF_AN_HOUR_LATER, True), (DAY_AFTER, False)],
)
def test_delayed_campaigns_are_the_same_within_the_window(requests_mock, second_delay, refused):
    service = Service().mount(requests_mock)
    send("run_a", delay=FUTURE)

    if refused:
        with pytest.raises(AirflowFailException, match="already sent"):
            send("run_b", delay=second_delay)
    else:
        send("run_b", delay=second_delay)

    assert len(service.sent_bodies) == (1 if refused else 2)


def test_the_window_is_a_setting(requests_mock, monkeypatch):
    service = Service().mount(requests_mock)
    monkeypatch.setenv("AIRFLOW__SMS__DUPLICATE_WINDOW_MINUTES", "10")
    send("run_a", delay=FUTURE)
    send("run_b", delay=HALF_AN_HOUR_LATER)
    assert len(service.sent_bodies) == 2


@pytest.mark.parametrize(
    ("second", "same"),
    [
        ({"recipients": list(reversed(NUMBERS))}, True),
        ({"recipients": [{"value": n, "gsmsmsid": f"id{i}"} for i, n in enumerate(NUMBERS)]}, True),
        ({"recipients": [*NUMBERS, NUMBERS[0]]}, True),
        # Per person: these two already got it, so nobody is left.
        ({"recipients": NUMBERS[:2]}, True),
        ({"message": "Hello"}, False),
        ({"message": {"text": "Hi", "sender": "Shop"}}, False),
        ({"sms_conn_id": "sms_other"}, False),
    ],
)
def test_what_makes_two_campaigns_the_same(requests_mock, monkeypatch, second, same):
    monkeypatch.setenv(
        "AIRFLOW_CONN_SMS_OTHER", json.dumps({"conn_type": "sms", "host": BASE_URL, "password": "t2"})
    )
    service = Service().mount(requests_mock)
    send("run_a")

    if same:
        with pytest.raises(AirflowFailException, match="already sent"):
            send("run_b", **second)
    else:
        send("run_b", **second)

    assert len(service.sent_bodies) == (1 if same else 2)


def test_lists_in_another_order_are_the_same_campaign(requests_mock):
    Service().mount(requests_mock)
    SmsSendListsOperator(task_id="send", message="Hi", lists=[3, 1, 2]).execute(context("run_a"))
    with pytest.raises(AirflowFailException, match="already sent"):
        SmsSendListsOperator(task_id="send", message="Hi", lists=[{"value": 2}, 1, "3"]).execute(
            context("run_b")
        )
    SmsSendListsOperator(task_id="send", message="Hi", lists=[1, 2]).execute(context("run_c"))
    assert calls(requests_mock, "/send/lists") == 2


def test_the_audience_digest_ignores_order_and_tells_sets_apart():
    def digest(numbers: list[str]) -> str:
        audience = NumberSetDigest()
        for start in range(0, len(numbers), 2):
            audience.add(numbers[start : start + 2])
        return audience.hexdigest()

    numbers = [f"3361234{i:04d}" for i in range(7)]
    assert digest(numbers) == digest(list(reversed(numbers)))
    assert digest(numbers) != digest(numbers[:-1])
    # Same count and same sum, other numbers: told apart by the sum of squares.
    swapped = [*numbers[:2], str(int(numbers[2]) - 1), str(int(numbers[3]) + 1), *numbers[4:]]
    assert digest(numbers) != digest(swapped)


# --------------------------------------------------------------------------------------- per person


def test_the_old_list_plus_one_row_reaches_only_the_new_row(requests_mock):
    service = Service().mount(requests_mock)
    send("run_a", delay=FUTURE)
    grown = [*NUMBERS, "33612345699"]

    result = send("run_b", recipients=grown, delay=FUTURE, max_cost=10)

    assert numbers_of(service.sent_bodies[-1]) == ["33612345699"]
    assert result["sent"] == 1
    assert result["already_sent"]["numbers"] == 3
    assert result["already_sent"]["tickets"] == ["101"]
    assert "run 'run_a'" in result["already_sent"]["sends"][0]
    # The gate's simulation was of the campaign sent: the one new number.
    assert result["simulation"]["total"] == 1


def test_two_overlapping_sends_in_batches_send_each_number_once(requests_mock):
    service = Service(credits=10**6).mount(requests_mock)
    first = [f"3361000{i:04d}" for i in range(0, 60)]
    second = [f"3361000{i:04d}" for i in range(30, 90)]
    send("run_a", recipients=first, batch_size=7)
    result = send("run_b", recipients=second, batch_size=7)

    sent = [number for body in service.sent_bodies for number in numbers_of(body)]
    assert sorted(sent) == sorted(set(first) | set(second))
    assert result["already_sent"]["numbers"] == 30
    # A batch whose every number was taken is not posted.
    assert calls(requests_mock, "/send") == 9 + 5


def test_the_store_keeps_digests_never_the_numbers(requests_mock):
    Service().mount(requests_mock)
    send("run_a")
    with settings.engine.connect() as connection:
        (packed,) = connection.execute(select(claim_chunk_table.c.number_keys)).scalars()
    assert len(packed) == 3 * 16
    stored = bytes(packed) + str([tuple(row) for row in claims()]).encode()
    assert not any(number.encode() in stored for number in NUMBERS)
    # Keyed: the same number under another token has another digest.
    assert _claims.NumberKeys(TOKEN).digests(NUMBERS[:1]) != _claims.NumberKeys("other").digests(NUMBERS[:1])


# ------------------------------------------------------------------------------ what a claim keeps


def test_a_refused_send_releases_its_claim(requests_mock):
    requests_mock.post(
        f"{BASE_URL}/send", [{"json": {"status": -7, "message": "bad data"}}, {"json": Service()}]
    )
    with pytest.raises(AirflowFailException, match="status -7"):
        send("run_a")
    assert claims() == []
    assert claimed_numbers() == 0

    assert send("run_b")["ticket"] == "101"


def test_a_gate_refusal_releases_its_claim(requests_mock):
    Service(cost_per_number=10).mount(requests_mock)
    with pytest.raises(AirflowSkipException, match="over max_cost"):
        send("run_a", max_cost=5, on_cost_exceeded="skip")
    assert send("run_b", max_cost=50)["ticket"] == "101"


def test_a_send_of_unknown_outcome_keeps_its_claim(requests_mock):
    requests_mock.post(f"{BASE_URL}/send", json={"status": -8, "message": "held for moderation"})
    with pytest.raises(AirflowFailException, match="may have been sent"):
        send("run_a")

    with pytest.raises(AirflowFailException, match="is sending it, or may have sent it"):
        send("run_b")
    assert calls(requests_mock, "/send") == 1


def test_a_cleared_task_is_not_its_own_duplicate(requests_mock):
    Service().mount(requests_mock)
    first = send("run_a")
    again = send("run_a")

    assert again["ticket"] == first["ticket"] == "101"
    assert calls(requests_mock, "/send") == 1
    (claim,) = claims()
    assert (claim.state, json.loads(claim.tickets), claim.run_id) == ("sent", ["101"], "run_a")


def test_a_store_that_cannot_decide_refuses_before_any_request(requests_mock):
    Service().mount(requests_mock)
    with settings.engine.begin() as connection:
        claim_table.drop(connection)

    with pytest.raises(_claims.ClaimStoreError, match="did not decide") as info:
        send("run_a")

    assert "airflow db migrate" in str(info.value)
    assert "Not sending" in str(info.value)
    assert requests_mock.call_count == 0


def test_the_settle_setting_is_ignored_with_one_warning(requests_mock, monkeypatch, capsys):
    Service().mount(requests_mock)
    monkeypatch.setenv("AIRFLOW__SMS__DUPLICATE_CHECK_SETTLE_SECONDS", "5")
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    monkeypatch.setattr(_claims, "_settle_warnings", itertools.count())

    send("run_a")
    send("run_b", recipients=["33699999999"])

    assert slept == []
    assert capsys.readouterr().out.count("duplicate_check_settle_seconds is set but no longer used") == 1


# --------------------------------------------------------------------------- the guard fails closed


@pytest.mark.parametrize(
    ("guard", "problem"),
    [
        ("{not json", "Expecting property name"),
        ('{"batches": {"0": {"state": "done", "fingerprint": "f", "started": "s"}}}', "state 'done'"),
        ('{"batches": {"0": {"state": "Sent", "fingerprint": "f", "started": "s"}}}', "state 'Sent'"),
        ('{"batches": {"0": {"state": "sent", "fingerprint": "f", "started": "s"}}}', "without its result"),
        ('{"batches": {"first": {"state": "sending", "fingerprint": "f", "started": "s"}}}', "batch index"),
        ('{"batches": {"0": {"state": "sending", "started": "s"}}}', "fingerprint"),
        ('{"batches": []}', "'batches' object"),
    ],
)
def test_a_guard_that_cannot_be_read_refuses_to_send(requests_mock, variables, guard, problem):
    Service().mount(requests_mock)
    key = guard_key("campaigns", "send", "run_a", -1)
    variables[key] = guard

    with pytest.raises(AirflowFailException, match="cannot be read") as info:
        send("run_a", max_cost=10)

    assert problem in str(info.value)
    assert key in str(info.value)
    assert 'state "sending" means the batch may have been sent' in str(info.value)
    assert requests_mock.call_count == 0


# ---------------------------------------------------------------------------- gates fail closed


@pytest.mark.parametrize("rendered", ["", "None", None, " ", "nan", "1e400", "inf", "-inf"])
@pytest.mark.parametrize("gate", ["max_cost", "max_filtered_ratio", "min_credits_after"])
def test_a_gate_given_but_rendered_to_nothing_or_infinity_refuses(requests_mock, gate, rendered):
    Service().mount(requests_mock)
    operator = SmsSendOperator(
        task_id="send", message="Hi", recipients=NUMBERS, **{gate: "{{ params.gate }}"}
    )
    operator.render_template_fields({"params": {"gate": rendered}})
    if rendered is None:
        setattr(operator, gate, None)  # what render_template_as_native_obj gives for None

    with pytest.raises(AirflowFailException, match=f"Invalid input.*{gate}=") as info:
        operator.execute(context())

    assert repr(getattr(operator, gate)) in str(info.value)
    assert requests_mock.call_count == 0


def test_a_gate_not_given_is_no_gate(requests_mock):
    Service().mount(requests_mock)
    result = send("run_a")
    assert result["gate"] is None
    assert calls(requests_mock, "/send/simulate") == 0


def test_on_duplicate_is_checked_when_parsed_or_once_rendered(requests_mock):
    with pytest.raises(SmsValidationError, match="on_duplicate='twice': use 'fail', 'skip' or 'send'"):
        SmsSendOperator(task_id="send", message="Hi", recipients=NUMBERS, on_duplicate="twice")
    operator = SmsSendOperator(
        task_id="send", message="Hi", recipients=NUMBERS, on_duplicate="{{ params.on_duplicate }}"
    )
    assert "on_duplicate" in operator.template_fields
    operator.render_template_fields({"params": {"on_duplicate": "again"}})
    with pytest.raises(AirflowFailException, match="on_duplicate='again'"):
        operator.execute(context())
    assert requests_mock.call_count == 0


def test_a_release_that_fails_keeps_the_tasks_own_error_and_the_claim(requests_mock, monkeypatch, capsys):
    requests_mock.post(f"{BASE_URL}/send", json={"status": -7, "message": "bad data"})

    def unreachable(self: Any, claim_id: int, request: Any) -> None:
        raise _claims.ClaimStoreError("API server unreachable")

    monkeypatch.setattr(_claims.LocalClaimStore, "release", unreachable)

    with pytest.raises(AirflowFailException, match="status -7"):
        send("run_a")
    assert "Could not forget this send in the claim store" in capsys.readouterr().out
    # Failing closed: the claim stays, so another run of the campaign is refused until it is removed.
    with pytest.raises(AirflowFailException, match="is sending it, or may have sent it"):
        send("run_b")
