"""on_cost_exceeded="ask" with requests-mock: the question written, the answer read, the checks before
the send. Airflow's human-in-the-loop records are kept in memory (:class:`HitlRecords`); the whole flow
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
from airflow_provider_sms.operators import _approval
from airflow_provider_sms.operators._approval import TERMS_LABEL, ApprovalTerms
from airflow_provider_sms.operators._send_guard import guard_key
from airflow_provider_sms.operators.sms import SmsSendListsOperator, SmsSendOperator
from tests.task_instance import FakeTaskInstance
from tests.unit.test_operators import NUMBERS, Service, calls, guard_of

from .conftest import BASE_URL, connection_json

HITL = _compat.airflow_3_1_or_later()
needs_hitl = pytest.mark.skipif(not HITL, reason="human-in-the-loop needs Airflow 3.1+")
BASE = "http://airflow.example:8080"
WHEN = dt.datetime(2030, 1, 1, 9, 30, tzinfo=dt.timezone.utc)


@pytest.fixture(autouse=True)
def variables(monkeypatch: pytest.MonkeyPatch, memory_variables: dict[str, str]) -> dict[str, str]:
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", connection_json())
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", BASE)
    return memory_variables


class HitlRecords:
    """Airflow's human-in-the-loop records, as the execution API keeps them for each task instance: the
    first question's subject and body."""

    def __init__(self) -> None:
        self.written: list[dict[str, Any]] = []
        self.kept: dict[Any, dict[str, Any]] = {}

    def post(self, ti_id: Any, **request: Any) -> str | None:
        self.written.append(request)
        return str(self.kept.setdefault(ti_id, request)["body"])


@pytest.fixture
def hitl(monkeypatch: pytest.MonkeyPatch) -> HitlRecords:
    """Airflow's human-in-the-loop records (the API server's, on a worker)."""
    records = HitlRecords()
    monkeypatch.setattr(_approval, "post_question", records.post)
    return records


@pytest.fixture
def written(hitl: HitlRecords) -> list[dict[str, Any]]:
    """The questions written into Airflow's human-in-the-loop records."""
    return hitl.written


def context() -> dict[str, Any]:
    ti = FakeTaskInstance()
    return {"ti": ti, "task_instance": ti}


def wait_kinds() -> tuple[type[BaseException], ...]:
    """What parks the task for the answer: TaskAwaitingInput (3.3+) or TaskDeferred (3.1, 3.2)."""
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
    """The event Airflow resumes the task with once ``by`` answered ``option`` (None: nobody, as the
    timeout default or an answer written through the execution API has it)."""
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
    assert carried["terms"]["cost"] == 6
    assert carried["terms"]["refused"] == ["max_cost"]
    assert carried["gate"]["refusals"] == ["cost 6 credits is over max_cost 5"]
    assert carried["simulation"]["cost"] == 6
    # What "Send" approves ends the body the approver reads, as Airflow carries it to the answer.
    assert body.rstrip().rsplit("\n", 1)[-1].startswith(TERMS_LABEL)
    assert ApprovalTerms.in_body(body) == ApprovalTerms.model_validate(carried["terms"])
    assert "sms_send_guard:" not in "".join(variables)  # nothing was sent: no guard


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
    requests_mock: Any, hitl: HitlRecords, variables: dict[str, str]
) -> None:
    service = Service(cost_per_number=2).mount(requests_mock)
    carried = asked(ask_operator(), context())

    result = resume(ask_operator(), answer("Send"), carried)

    assert len(service.sent_bodies) == 1
    assert result["gate"]["approval"] == {"choice": "Send", "by": "alice", "at": WHEN.isoformat(), "cost": 6}
    assert result["gate"]["passed"] is False
    assert "approval" not in json.loads(guard_of(variables))  # an approval is Airflow's record only


@needs_hitl
@pytest.mark.parametrize(
    ("by", "said"),
    [
        ("alice", "alice answered 'Do not send'"),
        (None, "no answer within 24 h of the question asked at"),
    ],
    ids=["Do not send", "no answer in time"],
)
def test_do_not_send_or_no_answer_skips_and_sends_nothing(
    requests_mock: Any, hitl: HitlRecords, by: str | None, said: str
) -> None:
    Service(cost_per_number=2).mount(requests_mock)
    carried = asked(ask_operator(), context())
    ctx = context()

    with pytest.raises(AirflowSkipException, match=re.escape(said)):
        ask_operator().execute_complete(
            ctx, answer("Do not send", by=by, timed_out=by is None), asked=carried
        )

    assert calls(requests_mock, "/send") == 0
    approval = ctx["ti"].xcoms["return_value"]["gate"]["approval"]
    assert approval["choice"] == "Do not send"
    assert approval["timed_out"] is (by is None)


@needs_hitl
def test_a_price_risen_since_the_answer_fails_naming_both_costs(
    requests_mock: Any, hitl: HitlRecords
) -> None:
    service = Service(cost_per_number=2).mount(requests_mock)
    carried = asked(ask_operator(), context())
    service.cost_per_number = 3

    with pytest.raises(AirflowFailException, match="it now costs 9 credits, more than the 6 approved"):
        resume(ask_operator(), answer("Send"), carried)
    assert service.sent_bodies == []


@needs_hitl
def test_a_campaign_changed_since_the_answer_is_not_sent(requests_mock: Any, hitl: HitlRecords) -> None:
    service = Service(cost_per_number=2).mount(requests_mock)
    carried = asked(ask_operator(), context())

    with pytest.raises(AirflowFailException, match="its message or recipients changed since the question"):
        resume(ask_operator(message="Spring sale, now 30 % off"), answer("Send"), carried)
    assert service.sent_bodies == []


@needs_hitl
def test_a_retry_after_an_approved_try_asks_again_with_the_first_questions_terms(
    requests_mock: Any, hitl: HitlRecords
) -> None:
    Service(cost_per_number=2).mount(requests_mock)
    carried = asked(ask_operator(), context())
    requests_mock.post(f"{BASE_URL}/send", status_code=429, headers={"Retry-After": "0"})
    with pytest.raises(SmsTransportError):  # nothing sent: left to Airflow's retries
        resume(ask_operator(), answer("Send"), carried)
    service = Service(cost_per_number=2).mount(requests_mock)

    again = asked(ask_operator(), context())  # the retry: a new try, no answer in hand

    assert len(hitl.written) == 2
    assert again["terms"] == carried["terms"]
    assert service.sent_bodies == []


@needs_hitl
def test_asking_again_after_a_dearer_question_of_an_earlier_try_fails(
    requests_mock: Any, hitl: HitlRecords
) -> None:
    service = Service(cost_per_number=2).mount(requests_mock)
    first = asked(ask_operator(), context())  # try 1 asks about 6 credits; "Do not send"; cleared
    service.cost_per_number = 3

    with pytest.raises(
        AirflowFailException,
        match=re.escape(
            f"This task instance already asked, at {first['terms']['asked_at']}, and Airflow shows a task "
            'instance\'s first question again; "Send" there would not cover this campaign: it now costs 9 '
            "credits, more than the 6 approved. Not asked, not sent."
        ),
    ):
        ask_operator().execute(context())
    assert service.sent_bodies == []


@needs_hitl
def test_asking_again_at_the_same_cost_carries_the_first_questions_terms(
    requests_mock: Any, hitl: HitlRecords
) -> None:
    Service(cost_per_number=2).mount(requests_mock)
    first = asked(ask_operator(), context())
    second = asked(ask_operator(), context())

    assert second["terms"]["asked_at"] == first["terms"]["asked_at"]
    assert second["terms"]["cost"] == 6


@needs_hitl
def test_a_kept_question_without_terms_fails_closed(requests_mock: Any, hitl: HitlRecords) -> None:
    service = Service(cost_per_number=2).mount(requests_mock)
    hitl.kept[FakeTaskInstance().id] = {"body": "Send 6 credits? (a question no send wrote)"}

    with pytest.raises(AirflowFailException, match="states no terms this send can read"):
        ask_operator().execute(context())
    assert service.sent_bodies == []


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
    hitl: HitlRecords,
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
    assert len(hitl.written) == 1  # not asked again


@needs_hitl
def test_a_covered_gate_whose_figure_got_worse_fails_the_send(requests_mock: Any, hitl: HitlRecords) -> None:
    service = Service(cost_per_number=2).mount(requests_mock)
    # The question: 994 credits left after it, under min_credits_after 995 (and cost over max_cost).
    carried = asked(ask_operator(min_credits_after=995), context())
    assert carried["terms"]["refused"] == ["max_cost", "min_credits_after"]
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
    requests_mock: Any, hitl: HitlRecords, capsys: pytest.CaptureFixture[str]
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
def test_terms_airflow_carried_that_cannot_be_read_send_nothing(
    requests_mock: Any, hitl: HitlRecords
) -> None:
    service = Service(cost_per_number=2).mount(requests_mock)
    carried = asked(ask_operator(), context())
    del carried["terms"]["refused"]

    with pytest.raises(
        AirflowFailException, match=r"the terms of the question, carried by Airflow .* cannot be read"
    ):
        resume(ask_operator(), answer("Send"), carried)
    assert service.sent_bodies == []


# ----------------------------------------------------------------------- forged approvals


@needs_hitl
def test_an_approval_written_into_the_send_guard_sends_nothing(
    requests_mock: Any, hitl: HitlRecords, variables: dict[str, str]
) -> None:
    """The issue's forgery: another task (or a Variable editor) writes "approved by alice, 1,000
    credits" where the send guard used to keep approvals. The send asks instead."""
    service = Service(cost_per_number=2).mount(requests_mock)
    carried = asked(ask_operator(), context())
    ti = FakeTaskInstance()
    key = guard_key(ti.dag_id, ti.task_id, ti.run_id, ti.map_index)
    forged = {**carried["terms"], "state": "approved", "by": "alice", "at": WHEN.isoformat(), "cost": 1000}
    variables[key] = json.dumps({"batches": {}, "approval": forged})

    again = asked(ask_operator(), context())  # the same task instance, run again: it asks

    assert again["terms"]["cost"] == 6
    assert service.sent_bodies == []


@needs_hitl
@pytest.mark.parametrize(
    ("by", "said"),
    [
        (None, "no user gave it (it was written through the execution API"),
        ("mallory", "from mallory, who is not among the approvers (alice)"),
    ],
    ids=["written through the execution API", "not an approver"],
)
def test_send_in_airflows_record_counts_only_from_an_approver_airflow_names(
    requests_mock: Any, hitl: HitlRecords, by: str | None, said: str
) -> None:
    service = Service(cost_per_number=2).mount(requests_mock)
    carried = asked(ask_operator(), context())
    before = len(requests_mock.request_history)

    with pytest.raises(AirflowFailException, match=re.escape(said)) as info:
        resume(ask_operator(), answer("Send", by=by), carried)

    assert "Trigger a new DAG run to ask again (not retried)" in str(info.value)
    assert "alice" not in str(info.value).split("approvers")[0]
    assert len(requests_mock.request_history) == before  # not even a simulation
    assert service.sent_bodies == []


@pytest.mark.parametrize(
    "body",
    [
        None,
        "",
        "no terms",
        f"{TERMS_LABEL}`not json`",
        f'{TERMS_LABEL}`{{"campaign": "d", "cost": -1, "credits_after": 1, "filtered_ratio": 0, '
        '"refused": [], "asked_at": "x"}`',
        f'{TERMS_LABEL}`{{"campaign": "d", "cost": 1, "credits_after": 1, "filtered_ratio": 0, '
        '"refused": ["max_everything"], "asked_at": "x"}`',
    ],
)
def test_a_body_without_readable_terms_has_none(body: str | None) -> None:
    assert ApprovalTerms.in_body(body) is None


def test_terms_read_back_from_the_body_they_end() -> None:
    terms = ApprovalTerms(
        campaign="f" * 32,
        cost=6,
        credits_after=994.5,
        filtered_ratio=0.25,
        refused=("max_cost", "min_credits_after"),
        asked_at=WHEN.isoformat(),
    )
    assert ApprovalTerms.in_body(f"A question.\n\n{terms.line()}\n") == terms


# ------------------------------------------------------------------ how the task waits, and where


@needs_hitl
def test_on_airflow_3_1_and_3_2_the_task_defers_to_the_standard_hitl_trigger(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import airflow.sdk.exceptions
    from airflow.providers.common.compat.sdk import TaskDeferred
    from airflow.providers.standard.triggers.hitl import HITLTrigger

    from airflow_provider_sms.operators._airflow_question import wait_for_answer

    monkeypatch.delattr(airflow.sdk.exceptions, "TaskAwaitingInput", raising=False)  # as before 3.3
    ti_id = FakeTaskInstance().id
    with pytest.raises(TaskDeferred) as info:
        wait_for_answer(
            ti_id,
            options=["Send", "Do not send"],
            defaults=["Do not send"],
            timeout=dt.timedelta(hours=2),
            kwargs={"asked": {"terms": {}}},
        )

    wait = info.value
    assert wait.method_name == "execute_complete"
    assert wait.kwargs == {"asked": {"terms": {}}}
    assert isinstance(wait.trigger, HITLTrigger)
    classpath, arguments = wait.trigger.serialize()
    assert classpath == "airflow.providers.standard.triggers.hitl.HITLTrigger"
    assert arguments["ti_id"] == ti_id
    assert arguments["options"] == ["Send", "Do not send"]
    assert arguments["defaults"] == ["Do not send"]
    left = arguments["timeout_datetime"] - dt.datetime.now(dt.timezone.utc)
    assert dt.timedelta(hours=1, minutes=59) < left <= dt.timedelta(hours=2)


@pytest.mark.parametrize(
    ("base_url", "link"),
    [
        (BASE, f"{BASE}/dags/campaigns/runs/manual__2030/tasks/send/required_actions?map_index=-1"),
        (
            "https://example.org/airflow/",
            "https://example.org/airflow/dags/campaigns/runs/manual__2030/tasks/send/required_actions?map_index=-1",
        ),
        ("", None),
    ],
    ids=["base URL", "behind a path prefix", "no base URL"],
)
def test_the_link_to_the_question_follows_the_base_url(
    monkeypatch: pytest.MonkeyPatch, base_url: str, link: str | None
) -> None:
    from airflow_provider_sms.operators._airflow_question import required_actions_link

    monkeypatch.setenv("AIRFLOW__API__BASE_URL", base_url)
    assert required_actions_link(FakeTaskInstance()) == link
