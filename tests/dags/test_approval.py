"""A person approves a campaign over its gate (``on_cost_exceeded="ask"``), on real Airflow.

``airflow dags test`` runs ``approval_dags/sms_send_approved.py`` against the sandbox while an
``airflow api-server`` on the same database takes the answer, as Airflow's UI gives it: the question
is read and answered through the REST endpoints the Required actions page uses, as alice (the approver)
or bob (an admin who is not); oscar (Op) edits Variables through the REST API. The sandbox says what
was sent.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import pendulum
import pytest

from airflow_provider_sms._compat import airflow_3_1_or_later
from airflow_provider_sms.operators._send_guard import guard_key
from tests.approvals import (
    APPROVER_PHONE,
    CAMPAIGN_TEXT,
    DAG_ID,
    MIN_CREDITS_DAG_ID,
    Approvals,
    approval_server,
    campaigns,
)

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = [
    pytest.mark.integration,
    pytest.mark.dags,
    pytest.mark.skipif(not airflow_3_1_or_later(), reason="human-in-the-loop needs Airflow 3.1+"),
]


@pytest.fixture(scope="module")
def approvals(airflow_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Approvals]:
    """An API server with alice and bob (both admins, so only ``approvers`` tells them apart)."""
    with approval_server(airflow_home, tmp_path_factory.mktemp("approvals")) as approvals:
        yield approvals


def test_send_sends_the_approved_campaign_once_and_texts_the_approver(
    sms_sandbox: Any, approvals: Approvals
) -> None:
    process = approvals.start(sms_sandbox)
    question = approvals.question(process)

    assert question["options"] == ["Send", "Do not send"]
    assert question["defaults"] == ["Do not send"]
    assert [user["name"] for user in question["assigned_users"]] == ["alice"]
    assert "6 credits" in question["subject"]
    body = question["body"]
    for shown in (
        "**6 credits** (max_cost 1)",
        "cost 6 credits is over max_cost 1",
        "6 given, 6 would be sent",
    ):
        assert shown in body
    assert "GSM 7-bit" in body
    assert CAMPAIGN_TEXT in body
    assert "sms_send_approved" in body
    assert campaigns(sms_sandbox) == []
    # The approver's SMS: the cost, the gate and the link to the question.
    (texted,) = [c for c in sms_sandbox.inspect.campaigns() if c["sent_to"] == [APPROVER_PHONE]]
    assert "6 credits" in texted["text"]
    assert "max_cost 1" in texted["text"]
    assert f"/dags/{DAG_ID}/runs/" in texted["text"]
    assert "/tasks/send/required_actions" in texted["text"]

    assert approvals.answer(question, "bob", "Send").status_code == 403  # not an approver
    assert approvals.answer(question, "alice", "Send").status_code == 200
    assert approvals.answer(question, "alice", "Do not send").status_code == 409
    output = approvals.finish(process)
    # Asked as Airflow's HITL API intends: no other operator's execute() run inside the send.
    assert "cannot be called outside of the Task Runner" not in output
    assert body.rstrip().rsplit("\n", 1)[-1].startswith('What "Send" approves, checked again just before')

    assert approvals.send_task() == ("success", 1), output[-6000:]
    sent = campaigns(sms_sandbox)
    assert len(sent) == 2  # the two batches, each once
    assert sorted(n for c in sent for n in c["sent_to"]) == sorted(f"3361200020{i}" for i in range(1, 7))
    result = approvals.result()
    assert result["cost"] == 6
    assert len(result["tickets"]) == 2
    assert result["gate"]["approval"]["by"] == "alice"
    assert result["gate"]["approval"]["cost"] == 6
    assert "Approved: alice answered 'Send'" in output


def test_do_not_send_skips_the_task_and_sends_nothing(sms_sandbox: Any, approvals: Approvals) -> None:
    process = approvals.start(sms_sandbox)
    question = approvals.question(process)

    assert approvals.answer(question, "alice", "Do not send").status_code == 200
    output = approvals.finish(process)

    assert approvals.send_task()[0] == "skipped", output[-6000:]
    assert campaigns(sms_sandbox) == []
    assert "alice answered 'Do not send'" in output
    approval = approvals.result()["gate"]["approval"]
    assert approval["choice"] == "Do not send"
    assert approval["by"] == "alice"
    assert not approval["timed_out"]


def test_a_price_raised_after_the_answer_is_not_paid(sms_sandbox: Any, approvals: Approvals) -> None:
    process = approvals.start(sms_sandbox)
    question = approvals.question(process)

    sms_sandbox.inspect.set_price(2)  # the tariff doubles between the question and the send
    assert approvals.answer(question, "alice", "Send").status_code == 200
    output = approvals.finish(process)

    assert approvals.send_task() == ("failed", 1), output[-6000:]
    assert campaigns(sms_sandbox) == []
    assert "it now costs 12 credits, more than the 6 approved" in output


def test_a_retry_after_an_approved_batch_asks_again_and_does_not_send_it_twice(
    sms_sandbox: Any, approvals: Approvals
) -> None:
    """An answer counts for the try it resumes: the retry asks again (Airflow shows the first question),
    and sends only the batch the first try could not."""
    process = approvals.start(sms_sandbox)
    question = approvals.question(process)

    # Enough credits for the first batch only: the second is refused (-3, nothing created); the task
    # fails and Airflow retries it 20 s later, by which time the credits are topped up.
    sms_sandbox.inspect.set_credits(3)
    assert approvals.answer(question, "alice", "Send").status_code == 200
    deadline = time.monotonic() + 120
    while sms_sandbox.inspect.requests().get("/send", 0) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)  # the approver's SMS, batch 1, then batch 2 refused
    sms_sandbox.inspect.set_credits(10_000)
    again = approvals.question(process)  # the retry, 20 s later, asks again
    assert again["subject"] == question["subject"]
    assert approvals.send_task()[1] == 2
    assert len(campaigns(sms_sandbox)) == 1  # batch 1 only, until the new answer
    assert approvals.answer(again, "alice", "Send").status_code == 200
    output = approvals.finish(process)

    assert approvals.send_task() == ("success", 2), output[-6000:]
    sent = campaigns(sms_sandbox)
    assert len(sent) == 2
    assert sorted(n for c in sent for n in c["sent_to"]) == sorted(f"3361200020{i}" for i in range(1, 7))
    assert output.count("Asking in Airflow's Required actions") == 2
    assert "Batch 1/2 was already sent by an earlier attempt" in output


def test_credits_that_fell_under_min_credits_after_while_the_question_waited_are_not_spent(
    sms_sandbox: Any, approvals: Approvals
) -> None:
    process = approvals.start(sms_sandbox, MIN_CREDITS_DAG_ID)
    question = approvals.question(process)
    # The question: max_cost refuses; min_credits_after passes, 9,994 credits left after it.
    assert "| Credits left after it | 9,994 (min_credits_after 5,000) |" in question["body"]

    sms_sandbox.inspect.set_credits(5_001)  # another campaign spends them while the question waits
    assert approvals.answer(question, "alice", "Send").status_code == 200
    output = approvals.finish(process)

    assert approvals.send_task() == ("failed", 1), output[-6000:]  # not retried
    assert campaigns(sms_sandbox) == []
    assert "this campaign was approved by alice at " in output
    assert (
        "min_credits_after now refuses it and did not in the question: the question showed 9994 credits "
        "left after it, now 4995 credits left after it"
    ) in output
    assert "Sending it all the same" not in output


# A fixed run date: the second run of it runs the same task instance again, cleared.
FORGED_RUN_DATE = "2026-02-01T00:00:00+00:00"


def test_an_approval_a_variable_editor_wrote_is_ignored_and_a_cleared_task_asks_again(
    sms_sandbox: Any, approvals: Approvals
) -> None:
    """The issue's forgery, by oscar (Op: he may edit Variables) where the send guard used to keep
    approvals: "approved by alice, 1,000 credits". An approval is only Airflow's record of an answer:
    the cleared task asks again, and nothing goes out until someone answers."""
    process = approvals.start(sms_sandbox, run_at=FORGED_RUN_DATE)
    question = approvals.question(process)
    assert approvals.answer(question, "alice", "Do not send").status_code == 200
    output = approvals.finish(process)
    assert approvals.send_task()[0] == "skipped", output[-6000:]
    run_id = approvals.run_id()
    key = guard_key(DAG_ID, "send", run_id, -1)
    forged = {
        "dag_id": DAG_ID,
        "task_id": "send",
        "run_id": run_id,
        "map_index": -1,
        "batches": {},
        "approval": {"state": "approved", "by": "alice", "at": pendulum.now("UTC").isoformat(), "cost": 1000},
    }
    # Airflow lets oscar write it.
    assert approvals.create_variable("oscar", key, json.dumps(forged)).status_code == 201

    process = approvals.start(sms_sandbox, run_at=FORGED_RUN_DATE)  # cleared, run again
    again = approvals.question(process)

    assert approvals.run_id() == run_id  # the same task instance
    assert again["subject"] == question["subject"]  # Airflow shows the first question again
    assert campaigns(sms_sandbox) == []
    assert approvals.answer(again, "alice", "Do not send").status_code == 200
    output = approvals.finish(process)
    assert approvals.send_task()[0] == "skipped", output[-6000:]
    assert campaigns(sms_sandbox) == []
    assert "Approved:" not in output
