"""Operators with requests-mock: the gates, validation before any request, the send guard, batching."""

from __future__ import annotations

import datetime
import io
import itertools
import json
import re
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pendulum
import pytest
import requests
from airflow.providers.common.compat.sdk import AirflowFailException, AirflowSkipException

from airflow_provider_sms.exceptions import (
    FILTER_MEANINGS,
    SmsApiError,
    SmsTransportError,
    SmsValidationError,
)
from airflow_provider_sms.models import FILTER_FIELDS
from airflow_provider_sms.operators._send_guard import guard_key
from airflow_provider_sms.operators.sms import (
    SmsSendListsOperator,
    SmsSendOperator,
    SmsSimulateOperator,
)
from tests.task_instance import FakeTaskInstance

from .conftest import BASE_URL, TOKEN, connection_json

if TYPE_CHECKING:
    from collections.abc import Callable

NUMBERS = ["33612345678", "33612345679", "33612345680"]
FUTURE = "2030-07-01T08:00:00+00:00"  # 10:00 in Paris (summer time)


@pytest.fixture(autouse=True)
def variables(monkeypatch: pytest.MonkeyPatch, memory_variables: dict[str, str]) -> dict[str, str]:
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", connection_json())
    return memory_variables


def context(run_id: str = "manual__2030-01-01", map_index: int = -1) -> dict[str, Any]:
    ti = FakeTaskInstance(run_id=run_id, map_index=map_index)
    return {"ti": ti}


class Service:
    """A requests-mock answer computing the figures from the request, like the service would."""

    def __init__(self, credits: int = 1000, cost_per_number: int = 1, filtered: int = 0) -> None:
        self.credits = credits
        self.cost_per_number = cost_per_number
        self.filtered = filtered
        self.tickets = itertools.count(101)
        self.sent_bodies: list[dict[str, Any]] = []

    def __call__(self, request: requests.PreparedRequest, context: Any) -> dict[str, Any]:
        body = json.loads(request.body)["sms"]
        count = len(body["recipients"]["gsm"]) if "recipients" in body else 10 * len(body["lists"])
        sent = count - self.filtered
        cost = sent * self.cost_per_number
        result = {"status": 1, "message": "OK", "cost": cost, "credits": self.credits - cost}
        result.update(total=count, sent=sent, invalid=self.filtered)
        if not request.path.endswith("simulate"):
            self.credits -= cost
            self.sent_bodies.append(body)
            result["ticket"] = str(next(self.tickets))
        return result

    def mount(self, requests_mock: Any) -> Service:
        for path in ("/send", "/send/simulate", "/send/lists", "/send/lists/simulate"):
            requests_mock.post(f"{BASE_URL}{path}", json=self)
        return self


def guard_of(variables: dict[str, str]) -> str:
    """The one send guard Variable in the store."""
    (value,) = [value for key, value in variables.items() if key.startswith("sms_send_guard:")]
    return value


def calls(requests_mock: Any, path: str) -> int:
    return sum(1 for request in requests_mock.request_history if request.path == path)


def numbers_of(body: dict[str, Any]) -> list[str]:
    return [gsm["value"] for gsm in body["recipients"]["gsm"]]


# ------------------------------------------------------------------------------------------- simulate


def test_simulate_numbers_returns_the_figures_and_logs_one_line(requests_mock, capsys):
    Service().mount(requests_mock)
    operator = SmsSimulateOperator(task_id="sim", message="Hello {{ ds }}", recipients=NUMBERS)

    result = operator.execute(context())

    assert result["cost"] == 3
    assert result["sent"] == 3
    assert result["total"] == 3
    assert result["credits"] == 997
    assert result["filtered"] == 0
    assert result["batches"] == 1
    # "{" and "}" are GSM-7 extension characters: two septets each.
    assert result["estimate"] == {"encoding": "GSM-7", "length": 18, "parts": 1, "parts_total": 3}
    assert calls(requests_mock, "/send/simulate") == 1
    assert "Simulation: cost 3 credits, 997 credits left, 3/3 numbers sent" in capsys.readouterr().out


def test_simulate_lists_uses_the_lists_endpoint(requests_mock):
    Service().mount(requests_mock)
    result = SmsSimulateOperator(task_id="sim", message="Hi", lists=["1", 2]).execute(context())

    assert result["total"] == 20
    assert requests_mock.last_request.json()["sms"]["lists"] == [{"value": 1}, {"value": 2}]
    assert requests_mock.last_request.path == "/send/lists/simulate"


@pytest.mark.parametrize("target", [{}, {"recipients": NUMBERS, "lists": [1]}])
def test_simulate_needs_exactly_one_of_recipients_and_lists(requests_mock, target):
    with pytest.raises(AirflowFailException, match="give either recipients"):
        SmsSimulateOperator(task_id="sim", message="Hi", **target).execute(context())
    assert requests_mock.call_count == 0


def test_simulate_in_batches_adds_up_the_figures(requests_mock):
    Service(credits=1000).mount(requests_mock)
    recipients = [f"336000000{i:02d}" for i in range(25)]

    result = SmsSimulateOperator(task_id="sim", message="Hi", recipients=recipients, batch_size=10).execute(
        context()
    )

    assert calls(requests_mock, "/send/simulate") == 3
    assert (result["cost"], result["sent"], result["batches"]) == (25, 25, 3)
    # Each batch's simulation reports the balance after that batch alone; the total is subtracted once.
    assert result["credits"] == 975


# ----------------------------------------------------------------------------------------- cost gate


def test_gate_over_budget_fails_with_the_figures_and_never_posts_send(requests_mock):
    Service(cost_per_number=2).mount(requests_mock)
    operator = SmsSendOperator(task_id="send", message="Hi", recipients=NUMBERS, max_cost=5)

    with pytest.raises(AirflowFailException, match="cost 6 credits is over max_cost 5") as info:
        operator.execute(context())

    assert "3/3 numbers sent" in str(info.value)
    assert calls(requests_mock, "/send/simulate") == 1
    assert calls(requests_mock, "/send") == 0


def test_gate_over_budget_skips_when_asked(requests_mock):
    Service(cost_per_number=2).mount(requests_mock)
    operator = SmsSendOperator(
        task_id="send", message="Hi", recipients=NUMBERS, max_cost="5", on_cost_exceeded="skip"
    )

    with pytest.raises(AirflowSkipException, match="over max_cost 5"):
        operator.execute(context())
    assert calls(requests_mock, "/send") == 0


def test_gate_within_budget_sends_the_exact_campaign_it_simulated(requests_mock):
    service = Service().mount(requests_mock)
    message = {"text": "Sale <-short->", "pushtype": "marketing", "links": ["https://example.com/sale"]}
    operator = SmsSendOperator(task_id="send", message=message, recipients=NUMBERS, max_cost=3, delay=FUTURE)

    result = operator.execute(context())

    simulated, sent = (r.json()["sms"] for r in requests_mock.request_history)
    assert simulated == sent
    assert sent["message"]["delay"] == "2030-07-01 10:00:00"
    assert result["ticket"] == "101"
    assert result["tickets"] == ["101"]
    assert result["simulation"]["cost"] == 3
    assert result["cost"] == 3
    assert result["gate"]["passed"] is True
    assert result["gate"]["max_cost"] == 3
    assert result["delay"] == "2030-07-01 10:00:00"
    assert service.credits == 997
    assert result["credits"] == 997
    assert TOKEN not in json.dumps(result)


def test_gate_on_filtered_ratio(requests_mock):
    Service(filtered=1).mount(requests_mock)
    operator = SmsSendOperator(task_id="send", message="Hi", recipients=NUMBERS, max_filtered_ratio=0.2)

    with pytest.raises(AirflowFailException, match=r"33\.3% of the numbers would be filtered"):
        operator.execute(context())
    assert calls(requests_mock, "/send") == 0


def test_gate_on_credits_left(requests_mock):
    Service(credits=10).mount(requests_mock)
    operator = SmsSendListsOperator(task_id="send", message="Hi", lists=[1], min_credits_after=5)

    with pytest.raises(AirflowFailException, match="0 credits would be left, under min_credits_after 5"):
        operator.execute(context())
    assert calls(requests_mock, "/send/lists") == 0


def test_no_gate_means_no_simulation(requests_mock):
    Service().mount(requests_mock)
    result = SmsSendListsOperator(task_id="send", message="Hi", lists=[3]).execute(context())

    assert [r.path for r in requests_mock.request_history] == ["/send/lists"]
    assert result["simulation"] is None
    assert result["gate"] is None
    assert result["ticket"] == "101"


# ---------------------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"recipients": ["0612345678"]}, "national number"),
        ({"recipients": ["33612345678", "+33 6 12 ab"]}, r"recipients\[1\]"),
        ({"message": {"text": "Go <-short->"}}, "1 '<-short->' marker"),
        ({"message": {"text": "Hi", "pushtype": "promo"}}, "pushtype"),
        (
            {"message": {"text": "Go <-short->", "links": ["https://example.com/a"]}},
            "pushtype is required when sending with short URLs",
        ),
        ({"delay": "2030-07-01T10:00:00"}, "no timezone"),
        ({"delay": "2020-01-01 10:00:00"}, "in the past"),
        ({"delay": "2030-03-31 02:30:00"}, "does not exist in Europe/Paris"),
        ({"message": {"text": "Hi", "delay": FUTURE}, "delay": FUTURE}, "give it once"),
        ({"max_cost": "lots"}, "max_cost='lots': must be a number >= 0"),
        ({"max_filtered_ratio": 20}, "between 0 and 1"),
        ({"recipients": []}, "no recipients given"),
        ({"message": {"text": "Hi", "sender": "Way too long sender"}}, "sender"),
    ],
)
def test_bad_input_fails_before_any_request(requests_mock, kwargs, error):
    """Literal mistakes fail when the DAG file is parsed (SmsValidationError), the rest when the task runs."""
    arguments = {"task_id": "send", "message": "Hi", "recipients": NUMBERS, "max_cost": 100, **kwargs}
    with pytest.raises((AirflowFailException, SmsValidationError), match=error) as info:
        SmsSendOperator(**arguments).execute(context())
    if isinstance(info.value, AirflowFailException):
        assert "Invalid input (not retried)" in str(info.value)
    assert requests_mock.call_count == 0


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"message": "Go <-short->"}, r"message.text: text has 1 '<-short->' marker\(s\) but 0 link\(s\)"),
        (
            {"message": {"text": "Go", "links": ["https://example.com/a"], "pushtype": "alert"}},
            r"message.links: text has 0 '<-short->' marker\(s\) but 1 link\(s\)",
        ),
        ({"delay": "2030-07-01T10:00:00"}, r"delay='2030-07-01T10:00:00': no timezone"),
        ({"delay": "2030-03-31 02:30:00"}, "does not exist in Europe/Paris"),
        ({"message": {"text": "Hi", "delay": "tomorrow"}}, r"message.delay='tomorrow': not a date"),
    ],
)
def test_literal_mistakes_are_import_errors_of_the_dag_file(kwargs, error):
    arguments = {"task_id": "send", "message": "Hi", "recipients": NUMBERS, **kwargs}
    with pytest.raises(SmsValidationError, match=error):
        SmsSendOperator(**arguments)


def test_templated_message_and_delay_wait_for_the_run(requests_mock):
    operator = SmsSendOperator(
        task_id="send",
        message={"text": "{{ params.text }}", "links": ["{{ params.url }}"], "pushtype": "alert"},
        recipients=NUMBERS,
        delay="{{ params.delay }}",
    )
    operator.render_template_fields({"params": {"text": "Go", "url": "https://example.com/a", "delay": "x"}})

    with pytest.raises(AirflowFailException, match="delay='x': not a date"):
        operator.execute(context())
    assert requests_mock.call_count == 0


def test_a_naive_delay_names_the_argument_given_and_points_to_paris():
    naive = datetime.datetime(2030, 12, 1, 10, 0)
    with pytest.raises(SmsValidationError) as info:
        SmsSendOperator(task_id="send", message="Hi", recipients=NUMBERS, delay=naive)

    text = str(info.value)
    assert text.startswith("delay=datetime.datetime(2030, 12, 1, 10, 0): naive datetime")
    assert "message.delay" not in text
    assert "tz='Europe/Paris'" in text
    assert "read as Paris time" in text
    assert "UTC" not in text


def test_following_the_naive_delay_hint_sends_at_that_paris_time(requests_mock):
    service = Service().mount(requests_mock)
    paris_ten = pendulum.datetime(2030, 12, 2, 10, 0, tz="Europe/Paris")

    result = SmsSendOperator(task_id="send", message="Hi", recipients=NUMBERS, delay=paris_ten).execute(
        context()
    )

    assert result["delay"] == "2030-12-02 10:00:00"
    assert service.sent_bodies[0]["message"]["delay"] == "2030-12-02 10:00:00"


@pytest.mark.parametrize(
    ("lists", "error"),
    [(["abc"], "list id must be an integer"), ([{"value": 1, "gsmsmsid": "x"}], "gsmsmsid"), ([], "no list")],
)
def test_bad_lists_fail_before_any_request(requests_mock, lists, error):
    with pytest.raises(AirflowFailException, match=error):
        SmsSendListsOperator(task_id="send", message="Hi", lists=lists, max_cost=1).execute(context())
    assert requests_mock.call_count == 0


def test_wrong_on_cost_exceeded_is_refused_when_the_dag_is_parsed():
    with pytest.raises(SmsValidationError, match="on_cost_exceeded='warn'"):
        SmsSendOperator(task_id="send", message="Hi", recipients=NUMBERS, on_cost_exceeded="warn")


def test_every_bad_number_of_every_batch_is_reported_with_its_position(requests_mock):
    recipients = [*NUMBERS, "12", *[f"336000000{i:02d}" for i in range(20)], "0611111111"]
    operator = SmsSendOperator(task_id="send", message="Hi", recipients=recipients, batch_size=10)

    with pytest.raises(AirflowFailException) as info:
        operator.execute(context())

    assert "recipients[3]" in str(info.value)
    assert "recipients[24]" in str(info.value)
    assert requests_mock.call_count == 0


def test_templated_fields_are_declared():
    for operator in (SmsSendOperator, SmsSendListsOperator):
        assert {"message", "recipients", "lists", "delay", "max_cost"} <= set(operator.template_fields)
    assert {"message", "recipients", "lists", "delay"} <= set(SmsSimulateOperator.template_fields)


def test_sms_conn_id_is_templated_on_every_task_class():
    from airflow_provider_sms.notifications.sms import SmsNotifier
    from airflow_provider_sms.sensors.sms import SmsDeliveryReportsSensor, SmsNpaiSensor, SmsWebhookSensor

    for task_class in (
        SmsSimulateOperator,
        SmsSendOperator,
        SmsSendListsOperator,
        SmsNpaiSensor,
        SmsWebhookSensor,
        SmsDeliveryReportsSensor,
    ):
        assert task_class.template_fields[0] == "sms_conn_id", task_class
        assert len(set(task_class.template_fields)) == len(task_class.template_fields), task_class
    assert "sms_conn_id" in SmsNotifier.template_fields


def test_rendered_sms_conn_id_is_the_hooks_connection(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SMS_EU", connection_json())
    operator = SmsSimulateOperator(
        task_id="simulate", message="Hi", lists=[1], sms_conn_id="{{ params.conn }}"
    )

    operator.render_template_fields({"params": {"conn": "sms_eu"}})

    assert operator.hook.sms_conn_id == "sms_eu"


@pytest.mark.parametrize(
    ("operator_class", "arguments", "match"),
    [
        (
            SmsSendOperator,
            {"lists": [1]},
            r"lists: SmsSendOperator sends to recipients only; use SmsSendListsOperator",
        ),
        (SmsSendOperator, {}, r"recipients: SmsSendOperator needs recipients; none given"),
        (
            SmsSendListsOperator,
            {"recipients": NUMBERS},
            r"recipients: SmsSendListsOperator sends to lists only",
        ),
        (SmsSendListsOperator, {}, r"lists: SmsSendListsOperator needs lists; none given"),
    ],
)
def test_send_operators_name_the_audience_they_need_when_the_dag_is_parsed(operator_class, arguments, match):
    with pytest.raises(SmsValidationError, match=match):
        operator_class(task_id="send", message="Hi", **arguments)


# ------------------------------------------------------------------------------------- errors, guard


def test_maybe_sent_fails_without_retry_and_the_retry_does_not_resend(requests_mock, variables):
    requests_mock.post(f"{BASE_URL}/send", json={"status": -8, "message": "Campaign held for moderation"})
    operator = SmsSendOperator(task_id="send", message="Hi", recipients=NUMBERS)

    with pytest.raises(AirflowFailException, match="may have been sent") as info:
        operator.execute(context())
    assert "campaign history" in str(info.value)
    assert "sms_send_guard:campaigns:send:" in str(info.value)
    (record,) = json.loads(guard_of(variables))["batches"].values()
    assert record["state"] == "sending"
    assert "status -8" in record["note"]

    # Airflow would not retry an AirflowFailException, but a cleared task or a dead worker does run
    # again: it must not POST the campaign a second time.
    with pytest.raises(AirflowFailException, match="may have been sent by an earlier attempt"):
        SmsSendOperator(task_id="send", message="Hi", recipients=NUMBERS).execute(context())
    assert calls(requests_mock, "/send") == 1


def test_allow_resend_sends_a_batch_of_unknown_outcome_again(requests_mock, variables):
    requests_mock.post(f"{BASE_URL}/send", [{"json": {"status": -8, "message": "held"}}, {"json": Service()}])
    with pytest.raises(AirflowFailException):
        SmsSendOperator(task_id="send", message="Hi", recipients=NUMBERS).execute(context())

    result = SmsSendOperator(task_id="send", message="Hi", recipients=NUMBERS, allow_resend=True).execute(
        context()
    )

    assert result["ticket"] == "101"
    assert calls(requests_mock, "/send") == 2


def test_a_recorded_ticket_is_returned_without_any_request(requests_mock):
    Service().mount(requests_mock)
    first = SmsSendOperator(task_id="send", message="Hi", recipients=NUMBERS, max_cost=10).execute(context())
    requests_mock.reset_mock()

    again = SmsSendOperator(task_id="send", message="Hi", recipients=NUMBERS, max_cost=10).execute(context())

    assert requests_mock.call_count == 0
    assert again["ticket"] == first["ticket"] == "101"
    assert again["resumed_batches"] == 1
    assert again["cost"] == first["cost"]


def test_guard_is_per_task_instance(requests_mock):
    service = Service().mount(requests_mock)
    for run_id, map_index in [("run_a", -1), ("run_b", -1), ("run_b", 0), ("run_b", 1)]:
        operator = SmsSendOperator(task_id="send", message="Hi", recipients=NUMBERS, on_duplicate="send")
        operator.execute(context(run_id, map_index))
    assert len(service.sent_bodies) == 4


def test_transport_error_releases_the_guard_and_is_left_to_airflow_retries(requests_mock, variables):
    requests_mock.post(f"{BASE_URL}/send", [{"exc": requests.ConnectTimeout("connect timed out")}])
    with pytest.raises(SmsTransportError, match="nothing was sent"):
        SmsSendOperator(task_id="send", message="Hi", recipients=NUMBERS).execute(context())
    assert json.loads(guard_of(variables))["batches"] == {}

    Service().mount(requests_mock)
    result = SmsSendOperator(task_id="send", message="Hi", recipients=NUMBERS).execute(context())
    assert result["ticket"] == "101"


@pytest.mark.parametrize(("status", "outcome"), [(-7, AirflowFailException), (-3, SmsApiError)])
def test_api_errors_fail_at_once_only_when_a_retry_cannot_help(requests_mock, status, outcome):
    requests_mock.post(f"{BASE_URL}/send", json={"status": status, "message": "refused"})
    with pytest.raises(outcome, match=f"status {status}"):
        SmsSendOperator(task_id="send", message="Hi", recipients=NUMBERS).execute(context())


def test_changed_input_after_a_sent_batch_is_refused(requests_mock):
    Service().mount(requests_mock)
    SmsSendOperator(task_id="send", message="Hi", recipients=NUMBERS).execute(context())

    with pytest.raises(AirflowFailException, match="input changed between attempts"):
        SmsSendOperator(task_id="send", message="Hello", recipients=NUMBERS).execute(context())
    assert calls(requests_mock, "/send") == 1


# ------------------------------------------------------------------------------------------ batching


def test_large_campaign_is_sent_in_batches_with_progress_and_no_cross_batch_duplicate(requests_mock, capsys):
    service = Service().mount(requests_mock)
    recipients = [f"336000000{i:02d}" for i in range(25)] + [f"336000000{3:02d}", "+33 6 00 00 00 07"]

    result = SmsSendOperator(
        task_id="send", message="Hi", recipients=recipients, batch_size=10, max_cost=100
    ).execute(context())

    assert [len(numbers_of(body)) for body in service.sent_bodies] == [10, 10, 5]
    sent_numbers = [n for body in service.sent_bodies for n in numbers_of(body)]
    assert len(sent_numbers) == len(set(sent_numbers)) == 25
    assert result["tickets"] == ["101", "102", "103"]
    assert result["batches"] == 3
    assert (result["total"], result["duplicated"], result["sent"], result["cost"]) == (27, 2, 25, 25)
    assert result["simulation"]["cost"] == 25
    assert result["credits"] == 975
    assert "Progress: batch 2/3, 20 numbers sent so far, 20 credits spent so far" in capsys.readouterr().out


def test_a_retry_resumes_after_the_last_confirmed_batch(requests_mock):
    service = Service()
    answers = [{"json": service}, {"exc": requests.ConnectTimeout("connect timed out")}]
    requests_mock.post(f"{BASE_URL}/send", answers)
    recipients = [f"336000000{i:02d}" for i in range(25)]
    arguments = {"task_id": "send", "message": "Hi", "recipients": recipients, "batch_size": 10}

    with pytest.raises(SmsTransportError):
        SmsSendOperator(**arguments).execute(context())
    assert len(service.sent_bodies) == 1

    requests_mock.post(f"{BASE_URL}/send", json=service)
    result = SmsSendOperator(**arguments).execute(context())

    assert [numbers_of(body)[0] for body in service.sent_bodies] == [
        "33600000000",
        "33600000010",
        "33600000020",
    ]
    assert result["resumed_batches"] == 1
    assert result["tickets"] == ["101", "102", "103"]
    assert result["sent"] == 25


def test_a_resumed_gate_counts_sent_batches_at_their_real_cost(requests_mock):
    service = Service(credits=100)
    requests_mock.post(f"{BASE_URL}/send/simulate", json=service)
    requests_mock.post(f"{BASE_URL}/send", [{"json": service}, {"exc": requests.ConnectTimeout("x")}])
    recipients = [f"336000000{i:02d}" for i in range(20)]
    arguments = {"task_id": "send", "message": "Hi", "recipients": recipients, "batch_size": 10}
    with pytest.raises(SmsTransportError):
        SmsSendOperator(**arguments, max_cost=20).execute(context())

    requests_mock.post(f"{BASE_URL}/send", json=service)
    with pytest.raises(AirflowFailException, match="cost 20 credits is over max_cost 19"):
        SmsSendOperator(**arguments, max_cost=19).execute(context())
    # Only the batch still to send was simulated again.
    assert calls(requests_mock, "/send/simulate") == 2 + 1


@pytest.mark.parametrize("kind", ["path", "text file", "binary file", "generator"])
def test_recipients_from_a_file_or_a_one_shot_iterator(requests_mock, tmp_path: Path, kind):
    service = Service().mount(requests_mock)
    lines = ["value,gsmsmsid", "33612345678,a1", "", "33612345679", "+33 6 12 34 56 80,a3"]
    path = tmp_path / "numbers.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    sources: dict[str, Callable[[], Any]] = {
        "path": lambda: path,
        "text file": lambda: io.StringIO(path.read_text()),
        "binary file": lambda: io.BytesIO(path.read_bytes()),
        "generator": lambda: (line.split(",")[0] for line in lines[1:] if line),
    }

    result = SmsSendOperator(task_id="send", message="Hi", recipients=sources[kind](), max_cost=10).execute(
        context()
    )

    (body,) = service.sent_bodies
    assert numbers_of(body) == NUMBERS
    assert result["cost"] == 3
    if kind != "generator":
        assert [gsm.get("gsmsmsid") for gsm in body["recipients"]["gsm"]] == ["a1", None, "a3"]


def test_estimate_counts_parts_before_simulating(requests_mock, capsys):
    Service().mount(requests_mock)
    SmsSimulateOperator(task_id="sim", message="é" * 150 + "€" * 10, recipients=NUMBERS).execute(context())
    out = capsys.readouterr().out
    assert "2 SMS parts per recipient (GSM-7, 170 characters" in out
    assert "about 6 SMS parts" in out
    assert out.index("Estimate:") < out.index("POST /send/simulate")


def test_guard_keys_are_readable_bounded_and_never_shared():
    assert guard_key("dag", "send", "manual__2030-01-01T00:00:00+00:00", -1) == (
        "sms_send_guard:dag:send:manual__2030-01-01T00:00:00+00:00:-1"
    )
    # Characters a Variable key should not carry are replaced, and a hash keeps the key unique.
    spaced, slashed = guard_key("dag", "send", "run 1", 0), guard_key("dag", "send", "run/1", 0)
    assert spaced != slashed
    assert " " not in spaced
    assert "/" not in slashed
    long_key = guard_key("d" * 250, "t" * 250, "r" * 250, 3)
    assert len(long_key) <= 250
    assert long_key != guard_key("d" * 250, "t" * 250, "r" * 250, 4)


def test_the_ticket_is_also_pushed_under_its_own_xcom_key(requests_mock):
    Service().mount(requests_mock)
    ctx = context()

    result = SmsSendOperator(task_id="send", message="Hi", recipients=NUMBERS).execute(ctx)

    assert ctx["ti"].xcoms.keys() == {"ticket", "sms_campaign"}
    assert ctx["ti"].xcoms["ticket"] == result["ticket"] == "101"  # the return value is unchanged


def test_no_ticket_key_is_pushed_when_xcoms_are_off(requests_mock):
    Service().mount(requests_mock)
    ctx = context()

    SmsSendOperator(task_id="send", message="Hi", recipients=NUMBERS, do_xcom_push=False).execute(ctx)

    # The campaign record is the provider's, not the DAG's return value: the campaigns page needs it.
    assert ctx["ti"].xcoms.keys() == {"sms_campaign"}


# ------------------------------------------------------------------------- what a new user reads


def test_the_gate_decision_is_logged_as_one_sentence(requests_mock, capsys):
    Service().mount(requests_mock)
    SmsSendOperator(
        task_id="send", message="Hi", recipients=NUMBERS, max_cost=10, max_filtered_ratio=0.5
    ).execute(context())

    out = capsys.readouterr().out
    assert (
        "Gate passed: cost 3 credits is within max_cost 10; 0.0% of the numbers would be filtered, within "
        "max_filtered_ratio 50.0%. Simulated: " in out
    )
    assert "{'max_cost'" not in out


def test_the_result_says_when_it_was_sent_and_when_it_goes_out_with_their_offsets(requests_mock):
    Service().mount(requests_mock)
    before = pendulum.now("UTC")

    delayed = SmsSendOperator(task_id="send", message="Hi", recipients=NUMBERS, delay=FUTURE).execute(
        context()
    )
    now = SmsSendOperator(task_id="send", message="Hello", recipients=NUMBERS).execute(context("run_b"))

    assert delayed["delay"] == "2030-07-01 10:00:00"  # the service's Paris wall time, as sent
    assert delayed["delivery_at"] == "2030-07-01T10:00:00+02:00"
    sent_at = pendulum.parse(delayed["sent_at"])
    assert sent_at.utcoffset() == datetime.timedelta(0)
    assert before <= sent_at <= pendulum.now("UTC")
    assert now["delay"] is None
    assert pendulum.parse(now["delivery_at"]) == pendulum.parse(now["sent_at"])
    assert now["delivery_at"].endswith(("+01:00", "+02:00"))


def test_a_cleared_send_that_went_out_reads_its_guard_before_any_gate(requests_mock, capsys):
    Service().mount(requests_mock)
    SmsSendOperator(task_id="send", message="Hi", recipients=NUMBERS, max_cost=10).execute(context())
    capsys.readouterr()
    requests_mock.reset_mock()

    again = SmsSendOperator(task_id="send", message="Hi", recipients=NUMBERS, max_cost=10).execute(context())

    assert requests_mock.call_count == 0
    assert (again["simulation"], again["gate"]) == (None, None)
    out = capsys.readouterr().out
    assert "Gate passed" not in out
    assert "was already sent by an earlier attempt (ticket 101)" in out


def test_the_delivery_wait_check_runs_before_a_first_send_and_not_when_a_send_resumes(
    monkeypatch: pytest.MonkeyPatch, requests_mock: Any
) -> None:
    import types

    import pendulum
    from airflow.sdk import DAG

    from airflow_provider_sms.exceptions import SmsValidationError
    from airflow_provider_sms.operators.sms import SmsSendOperator
    from airflow_provider_sms.sensors.sms import SmsDeliveryReportsSensor

    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", connection_json())  # receives no delivery reports
    with DAG("checked", start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), schedule=None):
        send = SmsSendOperator(task_id="send", message="Hi", recipients=["33612345678"])
        send >> SmsDeliveryReportsSensor(task_id="wait", campaign=send.output)
        lone = SmsSendOperator(task_id="lone", message="Hi", recipients=["33612345678"])

    first_try = types.SimpleNamespace(batches={})
    with pytest.raises(SmsValidationError, match="set dlr_webhook_id"):
        send.check_delivery_waits(first_try)  # type: ignore[arg-type]
    # A try that resumes a send (batches recorded) sends the rest; a send with no wait checks nothing.
    send.check_delivery_waits(types.SimpleNamespace(batches={0: object()}))  # type: ignore[arg-type]
    lone.check_delivery_waits(first_try)  # type: ignore[arg-type]
    assert requests_mock.call_count == 0


# ------------------------------------------------------------------------- a send that reached nobody


def test_a_send_that_reached_nobody_fails_once_everything_is_recorded_and_is_never_sent_again(
    requests_mock, variables
):
    Service(filtered=3).mount(requests_mock)  # the service filters all 3 numbers (as invalid)
    ctx = context()

    with pytest.raises(AirflowFailException) as info:
        SmsSendOperator(task_id="send", message="Hi", recipients=NUMBERS).execute(ctx)

    text = str(info.value)
    assert text.startswith(
        "The campaign reached nobody: 0 of 3 numbers sent, 3 filtered (invalid 3), ticket 101. invalid: "
        "numbers the service does not take as valid: check their country code and length. "
        "on_nothing_sent='warn' lets such a send succeed. Not retried: the campaign exists"
    )
    # The answer is read after the send: the result, the ticket, the record and the guard are all there.
    assert ctx["ti"].xcoms.keys() == {"return_value", "ticket", "sms_campaign"}
    assert ctx["ti"].xcoms["return_value"]["sent"] == 0
    (record,) = json.loads(guard_of(variables))["batches"].values()
    assert record["state"] == "sent"
    # A clear runs the task again: the guard answers, nothing is posted, the task fails the same way.
    with pytest.raises(AirflowFailException, match="reached nobody"):
        SmsSendOperator(task_id="send", message="Hi", recipients=NUMBERS).execute(context())
    assert calls(requests_mock, "/send") == 1


def test_nothing_sent_counts_every_batch_of_the_campaign(requests_mock):
    nobody = {"status": 1, "message": "OK", "cost": 0, "credits": 10, "total": 2, "sent": 0, "blacklisted": 2}
    one = {**nobody, "cost": 1, "credits": 9, "sent": 1, "blacklisted": 1}
    recipients = [f"336000000{i:02d}" for i in range(4)]
    arguments = {"task_id": "send", "message": "Hi", "recipients": recipients, "batch_size": 2}
    answers = [{"json": {**nobody, "ticket": "1"}}, {"json": {**one, "ticket": "2"}}]
    requests_mock.post(f"{BASE_URL}/send", answers)

    assert SmsSendOperator(**arguments).execute(context())["sent"] == 1  # 0 + 1: someone was reached

    answers = [{"json": {**nobody, "ticket": "3"}}, {"json": {**nobody, "ticket": "4"}}]
    requests_mock.post(f"{BASE_URL}/send", answers)
    with pytest.raises(
        AirflowFailException, match=r"0 of 4 numbers sent, 4 filtered \(blacklisted 4\), tickets 3, 4"
    ):
        SmsSendOperator(**arguments, on_duplicate="send").execute(context("run_b"))


def test_every_filter_of_the_result_has_its_meaning_and_fix():
    assert tuple(FILTER_MEANINGS) == FILTER_FIELDS


def test_on_nothing_sent_warn_succeeds_with_the_same_explanation(requests_mock, capsys):
    Service(filtered=10).mount(requests_mock)  # the 10 numbers of list 1
    ctx = context()

    result = SmsSendListsOperator(task_id="send", message="Hi", lists=[1], on_nothing_sent="warn").execute(
        ctx
    )

    assert result["sent"] == 0
    assert ctx["ti"].xcoms.keys() == {"ticket", "sms_campaign"}  # the return value is Airflow's to push
    # The task log's warning level, as Airflow 3.1+ (structlog) and 3.0 write it.
    line = r"(\[warning\s*\]|WARNING -) The campaign reached nobody: 0 of 10 numbers sent, 10 filtered"
    out = capsys.readouterr().out
    assert re.search(line + r".*The task succeeds: on_nothing_sent='warn'\.", out), out


@pytest.mark.parametrize("rendered", ["maybe", "", "None"])
def test_a_templated_on_nothing_sent_is_checked_before_any_request(requests_mock, rendered):
    operator = SmsSendOperator(
        task_id="send", message="Hi", recipients=NUMBERS, on_nothing_sent="{{ params.on_nothing_sent }}"
    )
    operator.render_template_fields({"params": {"on_nothing_sent": rendered}})

    with pytest.raises(AirflowFailException, match=rf"on_nothing_sent={rendered!r}: use 'fail' or 'warn'"):
        operator.execute(context())
    assert requests_mock.call_count == 0


def test_a_literal_on_nothing_sent_is_checked_when_the_dag_is_parsed():
    with pytest.raises(SmsValidationError, match="on_nothing_sent='skip': use 'fail' or 'warn'"):
        SmsSendOperator(task_id="send", message="Hi", recipients=NUMBERS, on_nothing_sent="skip")
    assert "on_nothing_sent" in SmsSendOperator.template_fields
    assert "on_nothing_sent" in SmsSendListsOperator.template_fields


# --------------------------------------------------------------------- one line in the task log


@pytest.mark.parametrize(
    ("kwargs", "answer", "error"),
    [
        ({"recipients": ["0612345678"]}, None, r"Invalid input \(not retried\): recipients"),
        (
            {},
            {"status_code": 401, "json": {"status": -1, "message": "bad token"}},
            "connection 'sms_default'",
        ),
        ({}, {"json": {"status": -8, "message": "held"}}, "may have been sent"),
        ({"max_cost": 1}, None, "Gate refused the send"),
    ],
)
def test_a_refusal_carries_one_frame_of_the_provider_and_nothing_chained(
    requests_mock, kwargs, answer, error
):
    """Airflow logs a failed task's traceback: the provider's part of it is the one frame that raised."""
    Service().mount(requests_mock)
    if answer is not None:
        requests_mock.post(f"{BASE_URL}/send", **answer)
    arguments = {"task_id": "send", "message": "Hi", "recipients": NUMBERS, **kwargs}

    with pytest.raises(AirflowFailException, match=error) as info:
        SmsSendOperator(**arguments).execute(context())

    frames = [
        frame
        for frame in traceback.extract_tb(info.value.__traceback__)
        if "airflow_provider_sms" in frame.filename
    ]
    assert [(Path(frame.filename).name, frame.name) for frame in frames] == [("sms.py", "run")]
    assert "".join(traceback.format_exception(info.value)).count("Traceback") == 1


def test_batch_fingerprints_stay_those_earlier_versions_wrote_in_guards():
    # A retry compares its batches with the fingerprints an earlier attempt (perhaps of an earlier
    # version) recorded in the send guard: the digest of each batch must never change.
    from types import SimpleNamespace

    from airflow_provider_sms.models import Message, Recipient
    from airflow_provider_sms.operators._campaign import Campaign, fingerprint

    message = Message(text="Hi")
    with_id = Recipient(value="33698765432", gsmsmsid="c1")
    batch = SimpleNamespace(message=message, lists=None)
    assert Campaign.fingerprint(batch, ["33612345678", with_id]) == "adeb9aa5c271acc585afcdc45f8624dd"
    assert fingerprint(message, []) == "a8c984cc7e1aab72dd60408f242ffe52"
    assert fingerprint(message, iter(["list:1", "list:2"])) == "8e7a58c829547375ae0d8ea28c2b3e43"
