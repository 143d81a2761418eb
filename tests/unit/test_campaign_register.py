"""Never twice across runs: the campaign register, guards that fail closed, gates that fail closed.

The operators run with requests-mock and the in-memory Variable store; the register's race is played
by two threads on one store.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pendulum
import pytest
from airflow.providers.common.compat.sdk import AirflowFailException, AirflowSkipException

from airflow_provider_sms.exceptions import SmsValidationError
from airflow_provider_sms.models import Message
from airflow_provider_sms.operators._campaign import content_digest
from airflow_provider_sms.operators._campaign_register import CampaignRegister
from airflow_provider_sms.operators._recipient_batches import NumberSetDigest
from airflow_provider_sms.operators._send_guard import guard_key
from airflow_provider_sms.operators.sms import SmsSendListsOperator, SmsSendOperator
from tests.conftest import MemoryVariables

from .conftest import BASE_URL, connection_json
from .test_operators import FUTURE, NUMBERS, Service, calls, context

# Taken before the unit tests' fixture records sleeps instead of sleeping: the race needs real ones.
REAL_SLEEP = time.sleep
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


def registers(variables: dict[str, str]) -> dict[str, dict[str, Any]]:
    return {key: json.loads(value) for key, value in variables.items() if key.startswith("sms_campaign:")}


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
    assert "max_active_runs=1" in text
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
        ({"recipients": NUMBERS[:2]}, False),
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


# ------------------------------------------------------------------------ what the register keeps


def test_a_refused_send_releases_its_claim(requests_mock, variables):
    requests_mock.post(
        f"{BASE_URL}/send", [{"json": {"status": -7, "message": "bad data"}}, {"json": Service()}]
    )
    with pytest.raises(AirflowFailException, match="status -7"):
        send("run_a")
    assert [register["entries"] for register in registers(variables).values()] == [[]]

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


def test_a_cleared_task_is_not_its_own_duplicate(requests_mock, variables):
    Service().mount(requests_mock)
    first = send("run_a")
    again = send("run_a")

    assert again["ticket"] == first["ticket"] == "101"
    assert calls(requests_mock, "/send") == 1
    ((entry,),) = [register["entries"] for register in registers(variables).values()]
    assert (entry["state"], entry["tickets"], entry["run_id"]) == ("sent", ["101"], "run_a")


def test_entries_past_the_window_are_dropped_at_the_next_write(requests_mock, variables):
    Service().mount(requests_mock)
    with pendulum.travel_to(pendulum.datetime(2030, 7, 1, 9, 0, tz="UTC"), freeze=True):
        send("run_a")
    with pendulum.travel_to(pendulum.datetime(2030, 7, 3, 9, 0, tz="UTC"), freeze=True):
        send("run_b")
    ((entry,),) = [register["entries"] for register in registers(variables).values()]
    assert entry["run_id"] == "run_b"


@pytest.mark.parametrize(
    ("record", "problem"),
    [
        ("{not json", "cannot be read"),
        ('{"entries": {}}', "no 'entries' list"),
        ('{"entries": [{"state": "done"}]}', "entries[0]"),
    ],
)
def test_an_unreadable_register_fails_closed(requests_mock, variables, record, problem):
    Service().mount(requests_mock)
    message = Message(text="Hi")
    from airflow_provider_sms.operators._recipient_batches import RecipientSource

    source = RecipientSource(NUMBERS)
    key = f"sms_campaign:{content_digest('sms_default', message, source.plan(10).audience)}"
    variables[key] = record

    with pytest.raises(AirflowFailException, match="cannot be read") as info:
        send("run_a")
    assert problem in str(info.value)
    assert "'sending' or 'sent'" in str(info.value)
    assert requests_mock.call_count == 0


def test_an_unknown_entry_state_fails_closed():
    entry = {
        "dag_id": "d",
        "task_id": "t",
        "run_id": "r",
        "map_index": -1,
        "delivery": FUTURE,
        "delayed": True,
        "state": "Sent",
        "claimed": FUTURE,
        "nonce": "n",
        "tickets": [],
    }
    MemoryVariables.store = {"sms_campaign:x": json.dumps({"entries": [entry]})}
    register = CampaignRegister("x", "sms_default", ("d", "t", "r2", -1))
    with pytest.raises(AirflowFailException, match="state 'Sent' is not one of 'sending', 'sent'"):
        register.load()


# ------------------------------------------------------------------------------ two at the same time


class InterleavedVariables(MemoryVariables):
    """Variables whose first read by each of two threads waits for the other: both see no claim."""

    barrier = threading.Barrier(2, timeout=5)
    first_reads: set[int] = set()

    @classmethod
    def get(cls, key: str, default: object = None) -> object:
        value = cls.store.get(key, default)
        thread = threading.get_ident()
        if thread not in cls.first_reads:
            cls.first_reads.add(thread)
            cls.barrier.wait()
        return value


def test_two_claims_at_the_same_moment_let_exactly_one_send(monkeypatch):
    from airflow_provider_sms.operators import _campaign_register

    monkeypatch.setattr(_campaign_register, "Variable", InterleavedVariables)
    monkeypatch.setattr(_campaign_register.time, "sleep", REAL_SLEEP)
    monkeypatch.setattr(InterleavedVariables, "store", {})
    monkeypatch.setenv("AIRFLOW__SMS__DUPLICATE_CHECK_SETTLE_SECONDS", "0.3")
    outcomes: dict[str, str] = {}
    delivery = pendulum.parse(FUTURE)

    def claim(run_id: str) -> None:
        register = CampaignRegister("digest", "sms_default", ("campaigns", "send", run_id, -1))
        try:
            register.claim(delivery, delayed=True, on_duplicate="fail", log=_Log())
            outcomes[run_id] = "claimed"
        except AirflowFailException as exc:
            outcomes[run_id] = str(exc)

    threads = [threading.Thread(target=claim, args=(run_id,)) for run_id in ("run_a", "run_b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)

    assert sorted(outcome == "claimed" for outcome in outcomes.values()) == [False, True]
    (refusal,) = [outcome for outcome in outcomes.values() if outcome != "claimed"]
    assert "is sending it" in refusal


class _Log:
    def info(self, *args: object) -> None:
        pass

    def warning(self, *args: object) -> None:
        pass


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


def test_a_register_that_cannot_be_written_after_a_refusal_keeps_the_tasks_own_error(
    requests_mock, monkeypatch, capsys
):
    requests_mock.post(f"{BASE_URL}/send", json={"status": -7, "message": "bad data"})
    writes: list[str] = []

    def set_variable(key: str, value: str, description: str | None = None) -> None:
        writes.append(key)
        if key.startswith("sms_campaign:") and sum(w.startswith("sms_campaign:") for w in writes) > 1:
            raise RuntimeError("API server unreachable")
        MemoryVariables.store[key] = value

    monkeypatch.setattr(MemoryVariables, "set", staticmethod(set_variable))

    with pytest.raises(AirflowFailException, match="status -7"):
        send("run_a")
    assert "Could not forget this send in the campaign register" in capsys.readouterr().out
    # Failing closed: the claim stays, so another run of the campaign is refused until it is removed.
    with pytest.raises(AirflowFailException, match="is sending it, or may have sent it"):
        send("run_b")
