"""The campaign record a send task leaves in XCom (key ``sms_campaign``) for the campaigns page."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
import requests
from airflow.providers.common.compat.sdk import AirflowFailException, AirflowSkipException

from airflow_provider_sms.campaigns.record import RECORD_KEY, CampaignRecord, TaskInstance, signed_by_holder
from airflow_provider_sms.exceptions import SmsTransportError
from airflow_provider_sms.operators.sms import SmsSendListsOperator, SmsSendOperator

from .conftest import BASE_URL, TOKEN, connection_json
from .test_operators import NUMBERS, Service, context

if TYPE_CHECKING:
    from tests.task_instance import FakeTaskInstance

RECIPIENTS = [f"336000000{i:02d}" for i in range(25)]


@pytest.fixture(autouse=True)
def _connection(monkeypatch: pytest.MonkeyPatch, memory_variables: dict[str, str]) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", connection_json())


def record_in(ctx: dict[str, Any]) -> CampaignRecord:
    ti: FakeTaskInstance = ctx["ti"]
    value = ti.xcoms[RECORD_KEY]
    # What the SDK stores: JSON types only, read back by the API server without Airflow's serde.
    assert json.loads(json.dumps(value)) == value
    return CampaignRecord.model_validate(value)


def test_a_send_leaves_its_record_with_tickets_figures_and_times(requests_mock):
    Service(filtered=0).mount(requests_mock)
    ctx = context()

    result = SmsSendOperator(
        task_id="send", message="Hi", recipients=RECIPIENTS, batch_size=10, max_cost=100
    ).execute(ctx)

    record = record_in(ctx)
    assert record.outcome == "sent"
    assert record.operator == "SmsSendOperator"
    assert (record.conn_id, record.pushtype, record.lists) == ("sms_default", None, None)
    assert record.tickets == [101, 102, 103]
    assert (record.batches, record.unknown_batches) == (3, [])
    assert (record.total, record.sent, record.cost, record.credits) == (25, 25, 25, 975)
    assert record.max_cost == 100
    assert record.sent_at.isoformat() == result["sent_at"]
    assert record.delivery_at == record.sent_at


def test_the_record_is_signed_for_its_task_instance_with_the_connections_token(requests_mock):
    Service().mount(requests_mock)
    ctx = context()
    SmsSendOperator(task_id="send", message="Hi", recipients=NUMBERS).execute(ctx)

    value = ctx["ti"].xcoms[RECORD_KEY]
    ti = ctx["ti"]
    task = TaskInstance(ti.dag_id, ti.run_id, ti.task_id, ti.map_index)
    assert signed_by_holder(value, task, TOKEN)
    assert not signed_by_holder(value, task._replace(dag_id="another_dag"), TOKEN)
    assert not signed_by_holder(value, task, "another-token")
    assert not signed_by_holder({**value, "sent": value["sent"] + 1}, task, TOKEN)
    assert TOKEN not in json.dumps(value)


def test_the_record_holds_no_phone_number(requests_mock):
    Service().mount(requests_mock)
    ctx = context()
    SmsSendOperator(task_id="send", message="Hi", recipients=NUMBERS).execute(ctx)

    text = json.dumps(ctx["ti"].xcoms[RECORD_KEY])
    assert not any(number in text or number[-6:] in text for number in NUMBERS)


def test_filtered_counts_are_kept_by_reason(requests_mock):
    Service(filtered=1).mount(requests_mock)
    ctx = context()
    SmsSendOperator(task_id="send", message="Hi", recipients=NUMBERS).execute(ctx)

    record = record_in(ctx)
    assert (record.total, record.sent, record.filtered) == (3, 2, {"invalid": 1})


def test_a_list_campaign_names_its_lists(requests_mock):
    Service().mount(requests_mock)
    ctx = context()
    SmsSendListsOperator(task_id="send", message="Hi", lists=[12, 7]).execute(ctx)

    assert record_in(ctx).lists == [12, 7]
    assert record_in(ctx).operator == "SmsSendListsOperator"


def test_a_moved_marketing_campaign_says_from_when_to_when(requests_mock):
    Service().mount(requests_mock)
    ctx = context()
    # Sunday 2030-06-02 10:00 Paris: the marketing window is closed on Sundays.
    SmsSendOperator(
        task_id="send",
        message={"text": "Sale", "pushtype": "marketing"},
        recipients=NUMBERS,
        delay="2030-06-02T10:00:00+02:00",
    ).execute(ctx)

    record = record_in(ctx)
    assert record.pushtype == "marketing"
    assert record.send_window is not None
    assert record.send_window.requested == "2030-06-02 10:00:00"
    assert record.send_window.moved_to == "2030-06-03 08:00:00"
    assert record.delivery_at.isoformat() == "2030-06-03T08:00:00+02:00"


def test_a_failure_after_a_sent_batch_leaves_a_partly_sent_record(requests_mock):
    service = Service()
    requests_mock.post(f"{BASE_URL}/send", [{"json": service}, {"exc": requests.ConnectTimeout("x")}])
    ctx = context()

    with pytest.raises(SmsTransportError):
        SmsSendOperator(task_id="send", message="Hi", recipients=RECIPIENTS, batch_size=10).execute(ctx)

    record = record_in(ctx)
    assert record.outcome == "partly_sent"
    assert record.tickets == [101]
    assert (record.batches, record.sent, record.cost) == (3, 10, 10)


def test_a_batch_of_unknown_outcome_is_recorded_as_maybe_sent(requests_mock):
    requests_mock.post(f"{BASE_URL}/send", json={"status": -8, "message": "held"})
    ctx = context()

    with pytest.raises(AirflowFailException, match="may have been sent"):
        SmsSendOperator(task_id="send", message="Hi", recipients=NUMBERS).execute(ctx)

    record = record_in(ctx)
    assert (record.outcome, record.tickets, record.unknown_batches) == ("maybe_sent", [], [1])

    # The next try (a cleared task) refuses to send, and records the same.
    again = context()
    with pytest.raises(AirflowFailException, match="earlier attempt"):
        SmsSendOperator(task_id="send", message="Hi", recipients=NUMBERS).execute(again)
    assert record_in(again).outcome == "maybe_sent"


@pytest.mark.parametrize("on_cost_exceeded", ["fail", "skip"])
def test_nothing_is_recorded_when_nothing_went_out(requests_mock, on_cost_exceeded):
    Service().mount(requests_mock)
    ctx = context()
    refused = AirflowSkipException if on_cost_exceeded == "skip" else AirflowFailException

    with pytest.raises(refused):
        SmsSendOperator(
            task_id="send", message="Hi", recipients=NUMBERS, max_cost=1, on_cost_exceeded=on_cost_exceeded
        ).execute(ctx)

    assert RECORD_KEY not in ctx["ti"].xcoms


def test_a_record_that_cannot_be_pushed_does_not_hide_the_send(requests_mock, capsys):
    Service().mount(requests_mock)
    ctx = context()

    def refuse(key: str, value: Any) -> None:
        if key == RECORD_KEY:
            raise RuntimeError("XCom backend down")

    ctx["ti"].xcom_push = refuse
    result = SmsSendOperator(task_id="send", message="Hi", recipients=NUMBERS).execute(ctx)

    assert result["ticket"] == "101"
    assert (
        "campaign record (XCom 'sms_campaign') could not be pushed: XCom backend down"
        in capsys.readouterr().out
    )
