"""on_cost_exceeded="ask" with requests-mock: the question written, the answer read, the checks before
the send. Airflow's human-in-the-loop request is captured where HITLOperator writes it; the whole flow
on real Airflow is in tests/dags/test_approval.py and the deployment suite."""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Any

import pytest
from airflow.providers.common.compat.sdk import AirflowFailException, AirflowSkipException

from airflow_provider_sms import _compat
from airflow_provider_sms._task_arguments import check_approvers, check_on_cost_exceeded
from airflow_provider_sms.exceptions import SmsTransportError, SmsValidationError
from airflow_provider_sms.operators._send_guard import ApprovalRecord, SendGuard, guard_key
from airflow_provider_sms.operators.sms import SmsSendListsOperator, SmsSendOperator
from tests.task_instance import FakeTaskInstance
from tests.unit.test_operators import NUMBERS, Service, calls, guard_of

from .conftest import BASE_URL, TOKEN, connection_json

HITL = _compat.airflow_3_1_or_later()
needs_hitl = pytest.mark.skipif(not HITL, reason="human-in-the-loop needs Airflow 3.1+")
BASE = "http://airflow.example:8080"
WHEN = dt.datetime(2030, 1, 1, 9, 30, tzinfo=dt.timezone.utc)


@pytest.fixture(autouse=True)
def variables(monkeypatch: pytest.MonkeyPatch, memory_variables: dict[str, str]) -> dict[str, str]:
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", connection_json())
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", BASE)
    return memory_variables


@pytest.fixture
def written(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The human-in-the-loop requests HITLOperator writes (to Airflow's API server, on a worker)."""
    from airflow.providers.standard.operators import hitl

    requests: list[dict[str, Any]] = []
    monkeypatch.setattr(hitl, "upsert_hitl_detail", lambda **request: requests.append(request))
    return requests


def context() -> dict[str, Any]:
    ti = FakeTaskInstance()
    return {"ti": ti, "task_instance": ti}


def wait_kinds() -> tuple[type[BaseException], ...]:
    """What HITLOperator raises to park the task: TaskAwaitingInput (3.3+) or TaskDeferred (3.1, 3.2)."""
    from airflow.providers.common.compat.sdk import TaskDeferred

    try:
        from airflow.sdk.exceptions import TaskAwaitingInput
    except ImportError:
        return (TaskDeferred,)
    return (TaskAwaitingInput, TaskDeferred)


def ask_operator(**kwargs: Any) -> SmsSendOperator:
    arguments: dict[str, Any] = {
        "task_id": "send",
        "message": "Spring sale",
        "recipients": NUMBERS,
        "max_cost": 5,
        "on_cost_exceeded": "ask",
        "approvers": ["alice"],
        **kwargs,
    }
    return SmsSendOperator(**arguments)


def asked(operator: SmsSendOperator, ctx: dict[str, Any]) -> dict[str, Any]:
    """Run execute() up to the question; what the wait carries to execute_complete."""
    with pytest.raises(wait_kinds()) as info:
        operator.execute(ctx)
    assert info.value.method_name == "execute_complete"  # type: ignore[union-attr]
    return dict(info.value.kwargs["asked"])  # type: ignore[union-attr]


def answer(option: str, *, by: str | None = "alice", timed_out: bool = False) -> dict[str, Any]:
    """The event Airflow resumes the task with."""
    user = {"id": by, "name": by} if by else None
    return {
        "chosen_options": [option],
        "params_input": {},
        "responded_at": WHEN,
        "responded_by_user": user,
        "timedout": timed_out,
    }


# ------------------------------------------------------------------------------- arguments


def test_ask_names_the_airflow_version_it_needs_on_airflow_3_0(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_compat, "airflow_3_1_or_later", lambda: False)
    with pytest.raises(SmsValidationError, match=r"needs Airflow 3\.1 or later \(this is Airflow 3"):
        check_on_cost_exceeded("ask")
    monkeypatch.setattr(_compat, "airflow_3_1_or_later", lambda: True)
    assert check_on_cost_exceeded("ask") == "ask"


@pytest.mark.skipif(HITL, reason="Airflow 3.0 only")
def test_a_literal_ask_is_an_import_error_of_the_dag_file_on_airflow_3_0() -> None:
    with pytest.raises(SmsValidationError, match=r"on_cost_exceeded='ask'.*needs Airflow 3\.1 or later"):
        ask_operator()


@pytest.mark.skipif(HITL, reason="Airflow 3.0 only")
def test_a_templated_ask_fails_the_task_before_any_request_on_airflow_3_0(requests_mock: Any) -> None:
    Service(cost_per_number=2).mount(requests_mock)
    operator = ask_operator(on_cost_exceeded="{{ params.mode }}")
    operator.on_cost_exceeded = "ask"  # as rendered

    with pytest.raises(AirflowFailException, match=r"needs Airflow 3\.1 or later"):
        operator.execute(context())
    assert requests_mock.request_history == []


@pytest.mark.parametrize(
    ("given", "users"),
    [
        (None, None),
        ([], None),
        ("alice", [{"id": "alice", "name": "alice"}]),
        (
            ["alice", {"id": 7, "name": "Bob B."}],
            [{"id": "alice", "name": "alice"}, {"id": "7", "name": "Bob B."}],
        ),
        ([{"id": "carol"}], [{"id": "carol", "name": "carol"}]),
    ],
)
def test_approvers_are_airflow_users(given: object, users: object) -> None:
    assert check_approvers(given) == users


@pytest.mark.parametrize("bad", [[""], [{"name": "no id"}], [3], [None]])
def test_a_bad_approver_is_named_when_the_dag_is_parsed(bad: object) -> None:
    with pytest.raises(SmsValidationError, match=r"approvers=.*: each approver is an Airflow user"):
        SmsSendOperator(task_id="s", message="Hi", recipients=NUMBERS, max_cost=1, approvers=bad)


@pytest.mark.parametrize("bad", [dt.timedelta(0), dt.timedelta(seconds=-5), 3600, "1h"])
def test_a_bad_approval_timeout_is_named_when_the_dag_is_parsed(bad: object) -> None:
    with pytest.raises(
        SmsValidationError, match=r"approval_timeout=.*: must be a positive datetime.timedelta"
    ):
        SmsSendOperator(task_id="s", message="Hi", recipients=NUMBERS, max_cost=1, approval_timeout=bad)


def test_approvers_are_templated() -> None:
    assert "approvers" in SmsSendOperator.template_fields
    assert "approvers" in SmsSendListsOperator.template_fields


# -------------------------------------------------------------------------------- the question


@needs_hitl
def test_a_refused_gate_asks_with_the_figures_and_sends_nothing(
    requests_mock: Any, written: list[dict[str, Any]], variables: dict[str, str]
) -> None:
    Service(cost_per_number=2).mount(requests_mock)
    carried = asked(ask_operator(approval_timeout=dt.timedelta(hours=2)), context())

    (request,) = written
    assert request["options"] == ["Send", "Do not send"]
    assert request["defaults"] == ["Do not send"]
    assert request["assigned_users"] == [{"id": "alice", "name": "alice"}]
    assert request["subject"] == "Send the SMS campaign of campaigns.send? It costs 6 credits, over its gate"
    body = request["body"]
    assert "- cost 6 credits is over max_cost 5" in body
    assert "| Simulated cost | **6 credits** (max_cost 5) |" in body
    assert "| Credits left after it | 994 |" in body
    assert "| Numbers | 3 given, 3 would be sent |" in body
    assert "| Message | alert, 1 SMS part per number, GSM 7-bit, 11 characters |" in body
    assert "| Goes out | at once, when approved |" in body
    assert "| DAG run | `campaigns` / `manual__2030`, task `send` |" in body
    assert "no answer means 'Do not send'" in body
    assert "```\nSpring sale\n```" in body
    assert calls(requests_mock, "/send/simulate") == 1
    assert calls(requests_mock, "/send") == 0
    assert carried["approval"]["state"] == "asked"
    assert carried["approval"]["cost"] == 6
    assert carried["gate"]["refusals"] == ["cost 6 credits is over max_cost 5"]
    assert carried["simulation"]["cost"] == 6
    assert json.loads(guard_of(variables))["approval"]["state"] == "asked"


@needs_hitl
def test_the_body_shows_each_link_beside_its_marker(
    requests_mock: Any, written: list[dict[str, Any]]
) -> None:
    Service(cost_per_number=2).mount(requests_mock)
    message = {
        "text": "Spring sale on everything in the shop, today only <-short->\nStop: <-short->",
        "links": ["https://shop.example/sale?from=`sms`", "https://shop.example/stop"],
        "pushtype": "alert",
    }
    asked(ask_operator(message=message), context())

    body = written[0]["body"]
    assert (
        "**Links** (each `<-short->` becomes a short URL to its link)\n\n"
        "- `…on everything in the shop, today only <-short->` → `` https://shop.example/sale?from=`sms` ``\n"
        "- `Stop: <-short->` → `https://shop.example/stop`\n\n"
    ) in body


@needs_hitl
def test_the_body_shows_filters_stop_mention_unicode_and_the_send_window(
    requests_mock: Any, written: list[dict[str, Any]]
) -> None:
    Service(cost_per_number=3, filtered=1).mount(requests_mock)
    message = {"text": "Soldes d\u2019été | ```code```", "pushtype": "marketing", "sender": "Shop"}
    asked(
        ask_operator(message=message, max_filtered_ratio=0.1, delay="2030-07-06 21:30:00"),
        context(),
    )

    body = written[0]["body"]
    assert "(33.3%, max_filtered_ratio 10.0%): invalid 1" in body
    assert "UCS-2 (Unicode)" in body
    assert "the service adds the STOP mention" in body
    assert "moved by the send window from 2030-07-06 21:30:00" in body
    assert "| Goes out | Monday 2030-07-08 08:00:00 Europe/Paris" in body
    # The text in a fence it cannot close; a table cell cannot be cut by a "|".
    assert "````\nSoldes d\u2019été | ```code```\n````" in body


@needs_hitl
def test_the_notifiers_hear_the_figures_and_the_link_and_a_failing_one_does_not_stop_the_question(
    requests_mock: Any, written: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    Service(cost_per_number=2).mount(requests_mock)
    heard: list[dict[str, Any]] = []

    def broken(_context: Any) -> None:
        raise RuntimeError("SMS gateway down")

    asked(ask_operator(approval_notifiers=[broken, heard.append]), context())

    (facts,) = [seen["sms_approval"] for seen in heard]
    assert facts["cost"] == 6
    assert facts["gate"] == "cost 6 credits is over max_cost 5"
    assert facts["credits_after"] == 994
    assert facts["approvers"] == ["alice"]
    assert (
        facts["link"] == f"{BASE}/dags/campaigns/runs/manual__2030/tasks/send/required_actions?map_index=-1"
    )
    log = capsys.readouterr().out
    assert "The approval notifier broken failed (SMS gateway down); the question is asked all the same" in log
    assert "answer within 24 h" in log
    assert len(written) == 1


@needs_hitl
def test_the_question_is_asked_once_the_duplicate_claim_is_released(
    requests_mock: Any, written: list[dict[str, Any]], variables: dict[str, str]
) -> None:
    """While people decide, another run of the same campaign is not refused as a duplicate: the
    claim store holds no claim from the time the question is asked (its notifiers run)."""
    from airflow import settings
    from sqlalchemy import func, select

    from airflow_provider_sms.api_server.claims import claim_chunk_table, claim_table

    Service(cost_per_number=2).mount(requests_mock)
    claims_seen: list[list[int]] = []

    def notifier(_context: Any) -> None:
        with settings.engine.connect() as connection:
            claims_seen.append(
                [
                    connection.scalar(select(func.count()).select_from(table)) or 0
                    for table in (claim_table, claim_chunk_table)
                ]
            )

    asked(ask_operator(approval_notifiers=[notifier]), context())

    assert claims_seen == [[0, 0]]
    assert len(written) == 1


@needs_hitl
def test_the_approval_text_of_sms_notifier_carries_cost_gate_and_link(
    requests_mock: Any, written: list[dict[str, Any]]
) -> None:
    from airflow_provider_sms.notifications.sms import APPROVAL_TEXT, SmsNotifier

    service = Service(cost_per_number=2).mount(requests_mock)
    notifier = SmsNotifier(text=APPROVAL_TEXT, recipients=["33699000001"])
    asked(ask_operator(approval_notifiers=[notifier]), context())

    (texted,) = service.sent_bodies
    assert texted["message"]["text"] == (
        "SMS campaign campaigns.send waits for your approval: 6 credits (cost 6 credits is over max_cost 5). "
        f"Answer in Airflow: {BASE}/dags/campaigns/runs/manual__2030/tasks/send/required_actions?map_index=-1"
    )


# ---------------------------------------------------------------------------------- the answer


def resume(operator: SmsSendOperator, event: dict[str, Any], carried: dict[str, Any]) -> dict[str, Any]:
    return operator.execute_complete(context(), event, asked=carried)


@needs_hitl
def test_send_sends_the_approved_campaign_and_records_who_and_when(
    requests_mock: Any, written: list[dict[str, Any]], variables: dict[str, str]
) -> None:
    service = Service(cost_per_number=2).mount(requests_mock)
    carried = asked(ask_operator(), context())

    result = resume(ask_operator(), answer("Send"), carried)

    assert len(service.sent_bodies) == 1
    assert result["gate"]["approval"] == {"choice": "Send", "by": "alice", "at": WHEN.isoformat(), "cost": 6}
    assert result["gate"]["passed"] is False
    guard = json.loads(guard_of(variables))
    assert guard["approval"]["state"] == "approved"
    assert guard["approval"]["by"] == "alice"


@needs_hitl
@pytest.mark.parametrize(
    ("event", "said"),
    [
        (answer("Do not send"), "alice answered 'Do not send'"),
        (answer("Do not send", by=None, timed_out=True), "no answer within 24 h of the question asked at"),
    ],
)
def test_do_not_send_or_no_answer_skips_and_sends_nothing(
    requests_mock: Any, written: list[dict[str, Any]], event: dict[str, Any], said: str
) -> None:
    Service(cost_per_number=2).mount(requests_mock)
    carried = asked(ask_operator(), context())
    ctx = context()

    with pytest.raises(AirflowSkipException, match=re.escape(said)):
        ask_operator().execute_complete(ctx, event, asked=carried)

    assert calls(requests_mock, "/send") == 0
    approval = ctx["ti"].xcoms["return_value"]["gate"]["approval"]
    assert approval["choice"] == "Do not send"
    assert approval["timed_out"] is event["timedout"]


@needs_hitl
def test_an_answer_outside_the_options_is_refused_by_airflows_check(
    requests_mock: Any, written: list[dict[str, Any]]
) -> None:
    Service(cost_per_number=2).mount(requests_mock)
    carried = asked(ask_operator(), context())

    with pytest.raises(ValueError, match="not in"):
        resume(ask_operator(), answer("Maybe"), carried)
    assert calls(requests_mock, "/send") == 0


@needs_hitl
def test_a_price_risen_since_the_answer_fails_naming_both_costs(
    requests_mock: Any, written: list[dict[str, Any]]
) -> None:
    service = Service(cost_per_number=2).mount(requests_mock)
    carried = asked(ask_operator(), context())
    service.cost_per_number = 3

    with pytest.raises(AirflowFailException, match="it now costs 9 credits, more than the 6 approved"):
        resume(ask_operator(), answer("Send"), carried)
    assert service.sent_bodies == []


@needs_hitl
def test_a_campaign_changed_since_the_answer_is_not_sent(
    requests_mock: Any, written: list[dict[str, Any]]
) -> None:
    service = Service(cost_per_number=2).mount(requests_mock)
    carried = asked(ask_operator(), context())

    with pytest.raises(AirflowFailException, match="its message or recipients changed since"):
        resume(ask_operator(message="Spring sale, now 30 % off"), answer("Send"), carried)
    assert service.sent_bodies == []


@needs_hitl
def test_a_retry_of_an_approved_campaign_sends_without_asking_again(
    requests_mock: Any, written: list[dict[str, Any]]
) -> None:
    Service(cost_per_number=2).mount(requests_mock)
    carried = asked(ask_operator(), context())
    requests_mock.post(f"{BASE_URL}/send", status_code=429, headers={"Retry-After": "0"})
    with pytest.raises(SmsTransportError):  # nothing sent: left to Airflow's retries
        resume(ask_operator(), answer("Send"), carried)
    Service(cost_per_number=2).mount(requests_mock)

    result = ask_operator().execute(context())  # the retry: a new try, no answer in hand

    assert len(written) == 1
    assert result["gate"]["approval"]["by"] == "alice"


@needs_hitl
def test_asking_again_after_a_dearer_question_of_an_earlier_try_fails(
    requests_mock: Any, written: list[dict[str, Any]]
) -> None:
    service = Service(cost_per_number=2).mount(requests_mock)
    asked(ask_operator(), context())  # try 1 asks about 6 credits; "Do not send"; cleared
    service.cost_per_number = 3

    with pytest.raises(AirflowFailException, match=r"already asked, at .* about this campaign at 6 credits"):
        ask_operator().execute(context())
    assert len(written) == 1


@needs_hitl
def test_asking_again_at_the_same_cost_carries_the_first_questions_figures(
    requests_mock: Any, written: list[dict[str, Any]]
) -> None:
    Service(cost_per_number=2).mount(requests_mock)
    first = asked(ask_operator(), context())
    second = asked(ask_operator(), context())

    assert second["approval"]["asked_at"] == first["approval"]["asked_at"]
    assert second["approval"]["cost"] == 6


@needs_hitl
def test_an_unreadable_approval_in_the_guard_fails_closed(
    requests_mock: Any, variables: dict[str, str], written: list[dict[str, Any]]
) -> None:
    Service(cost_per_number=2).mount(requests_mock)
    asked(ask_operator(), context())
    (key,) = [key for key in variables if key.startswith("sms_send_guard:")]
    document = json.loads(variables[key])
    document["approval"]["state"] = "approved"  # by hand, without who or when
    variables[key] = json.dumps(document)

    with pytest.raises(AirflowFailException, match="approval: state 'approved' without when"):
        ask_operator().execute(context())
    assert calls(requests_mock, "/send") == 0


# ------------------------------------------------------------------- what an approval covers


@needs_hitl
@pytest.mark.parametrize(
    ("gates", "change", "said"),
    [
        (
            {"min_credits_after": 990},
            {"credits": 995},
            "min_credits_after now refuses it and did not in the question: the question showed 994 credits "
            "left after it, now 989 credits left after it",
        ),
        (
            {"max_filtered_ratio": 0.2},
            {"filtered": 1},
            "max_filtered_ratio now refuses it and did not in the question: the question showed 0.0% of "
            "the numbers filtered, now 33.3% of the numbers filtered",
        ),
    ],
    ids=["credits fell while it waited", "more numbers filtered"],
)
def test_a_gate_that_refuses_only_after_the_question_fails_the_send_naming_it_and_both_figures(
    requests_mock: Any,
    written: list[dict[str, Any]],
    gates: dict[str, Any],
    change: dict[str, int],
    said: str,
) -> None:
    service = Service(cost_per_number=2).mount(requests_mock)
    carried = asked(ask_operator(**gates), context())  # only max_cost refuses in the question
    for name, value in change.items():
        setattr(service, name, value)

    with pytest.raises(AirflowFailException, match=re.escape(said)) as info:
        resume(ask_operator(**gates), answer("Send"), carried)

    assert "approved by alice" in str(info.value)
    assert "trigger a new DAG run" in str(info.value)
    assert service.sent_bodies == []
    assert len(written) == 1  # not asked again


@needs_hitl
def test_a_covered_gate_whose_figure_got_worse_fails_the_send(
    requests_mock: Any, written: list[dict[str, Any]]
) -> None:
    service = Service(cost_per_number=2).mount(requests_mock)
    # The question: 994 credits left after it, under min_credits_after 995 (and cost over max_cost).
    carried = asked(ask_operator(min_credits_after=995), context())
    assert carried["approval"]["refused"] == ["max_cost", "min_credits_after"]
    service.credits = 999  # 5 fewer credits than the question showed, at the same cost

    with pytest.raises(
        AirflowFailException,
        match=re.escape(
            "min_credits_after refused in the question at 994 credits left after it, and it is worse now: "
            "993 credits left after it"
        ),
    ):
        resume(ask_operator(min_credits_after=995), answer("Send"), carried)
    assert service.sent_bodies == []


@needs_hitl
def test_a_send_covered_by_the_approval_logs_who_approved_and_at_what_figures(
    requests_mock: Any, written: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    service = Service(cost_per_number=2).mount(requests_mock)
    carried = asked(ask_operator(min_credits_after=995), context())
    service.credits = 1001  # better than shown: more credits left after it

    resume(ask_operator(min_credits_after=995), answer("Send"), carried)

    assert len(service.sent_bodies) == 1
    log = " ".join(capsys.readouterr().out.split())
    assert (
        f"Sending it all the same: it was approved by alice at {WHEN.isoformat()} for 6 credits, covering "
        "max_cost, min_credits_after as the question showed cost 6 credits, 994 credits left after it, 0.0% "
        "of the numbers filtered; now cost 6 credits, 995 credits left after it, 0.0% of the numbers filtered"
    ) in log


@needs_hitl
def test_a_question_carried_by_an_earlier_version_is_not_sent(
    requests_mock: Any, written: list[dict[str, Any]]
) -> None:
    service = Service(cost_per_number=2).mount(requests_mock)
    carried = asked(ask_operator(), context())
    del carried["approval"]["refused"]  # what an earlier version carried with its wait

    with pytest.raises(AirflowFailException, match=r"the question's record .* cannot be read"):
        resume(ask_operator(), answer("Send"), carried)
    assert service.sent_bodies == []


# ----------------------------------------------------------------------- forged approvals


def signed_guard(
    variables: dict[str, str], approval: dict[str, Any], *, token: str = TOKEN, run_id: str = "manual__2030"
) -> dict[str, Any]:
    """The guard document of the run ``run_id``'s task instance holding ``approval``, signed with
    ``token`` as the send task signs it."""
    ti = FakeTaskInstance(run_id=run_id)
    identity = {"dag_id": ti.dag_id, "task_id": ti.task_id, "run_id": ti.run_id, "map_index": ti.map_index}
    key = guard_key(ti.dag_id, ti.task_id, ti.run_id, ti.map_index)
    SendGuard(key, identity).keep_approval(ApprovalRecord(**approval), token)
    return dict(json.loads(variables.pop(key)))


def edited(document: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """``document`` with its approval's ``fields`` changed by hand, its signature kept."""
    return {**document, "approval": {**document["approval"], **fields}}


ALICE = {"state": "approved", "by": "alice", "at": WHEN.isoformat()}
FORGERIES = {
    "asked turned into approved by alice at 1000 credits (the issue's patch)": lambda variables, asked: (
        edited(signed_guard(variables, asked), **ALICE, cost=1000)
    ),
    "cost raised in a signed approval": lambda variables, asked: edited(
        signed_guard(variables, {**asked, **ALICE}), cost=1000
    ),
    "approver changed in a signed approval": lambda variables, asked: edited(
        signed_guard(variables, {**asked, **ALICE, "by": "bob"}), by="alice"
    ),
    "unsigned": lambda variables, asked: {
        **signed_guard(variables, asked),
        "approval": {**asked, **ALICE},
    },
    "copied from another task instance's guard": lambda variables, asked: {
        **signed_guard(variables, asked),
        "approval": signed_guard(variables, {**asked, **ALICE}, run_id="manual__2031")["approval"],
    },
    "signed with another token (or before a token rotation)": lambda variables, asked: signed_guard(
        variables, {**asked, **ALICE}, token="the-token-before-rotation"
    ),
}


@needs_hitl
@pytest.mark.parametrize("forge", FORGERIES.values(), ids=FORGERIES.keys())
def test_an_approval_the_task_did_not_write_fails_closed_without_naming_its_approver(
    requests_mock: Any, written: list[dict[str, Any]], variables: dict[str, str], forge: Any
) -> None:
    service = Service(cost_per_number=2).mount(requests_mock)
    carried = asked(ask_operator(), context())
    with pytest.raises(AirflowSkipException):
        resume(ask_operator(), answer("Do not send"), carried)
    (key,) = [key for key in variables if key.startswith("sms_send_guard:")]
    variables[key] = json.dumps(forge(variables, carried["approval"]))
    before = len(requests_mock.request_history)

    with pytest.raises(AirflowFailException) as info:
        ask_operator().execute(context())  # the same task instance, run again

    text = str(info.value)
    assert f"the approval in Airflow Variable {key!r} cannot be verified (edited, or written by" in text
    assert "Trigger a new DAG run" in text
    assert "alice" not in text
    assert "1000" not in text
    assert len(requests_mock.request_history) == before  # not even a simulation
    assert service.sent_bodies == []
    assert len(written) == 1


@needs_hitl
def test_the_approval_the_task_signed_still_sends_on_a_retry(
    requests_mock: Any, written: list[dict[str, Any]], variables: dict[str, str]
) -> None:
    service = Service(cost_per_number=2).mount(requests_mock)
    carried = asked(ask_operator(), context())
    (key,) = [key for key in variables if key.startswith("sms_send_guard:")]
    variables[key] = json.dumps(signed_guard(variables, {**carried["approval"], **ALICE}))

    result = ask_operator().execute(context())

    assert result["gate"]["approval"]["by"] == "alice"
    assert len(service.sent_bodies) == 1


def test_a_guards_approval_verifies_only_for_its_task_instance_and_token(variables: dict[str, str]) -> None:
    approval = {
        "state": "approved",
        "cost": 6,
        "fingerprint": "f" * 32,
        "refusals": ["cost 6 credits is over max_cost 5"],
        "asked_at": WHEN.isoformat(),
        "refused": ["max_cost"],
        "credits_after": 994,
        "filtered_ratio": 0.0,
        **ALICE,
    }
    document = json.dumps(signed_guard(variables, approval))
    mine, other = FakeTaskInstance(), FakeTaskInstance(run_id="manual__2031")
    for ti in (mine, other):  # the other task instance's guard holds a copy
        variables[guard_key(ti.dag_id, ti.task_id, ti.run_id, ti.map_index)] = document

    assert SendGuard.for_task_instance(mine).trusted_approval(TOKEN) == ApprovalRecord(**approval)
    for ti, token in ((mine, "another-token"), (other, TOKEN)):
        with pytest.raises(AirflowFailException, match="cannot be verified"):
            SendGuard.for_task_instance(ti).trusted_approval(token)
