"""A person approves a campaign over its gate in Airflow's own UI, in Debian's chromium.

``on_cost_exceeded="ask"`` as the approver meets it: ``airflow dags test`` runs
``tests/dags/approval_dags/sms_send_approved.py`` in the background (6 credits against ``max_cost=1``)
while an ``airflow api-server`` on the same database serves the UI (the run and the server are those of
tests/dags/test_approval.py, from ``tests/approvals.py``). alice signs in through the simple auth
manager's login page, opens the link of the SMS she was sent (the send task's Required actions page),
reads the figures and clicks Send; the task then sends the campaign's two batches, each once.

Screenshot (``tests/ui/artifacts/``): ``approval-required-action.png``, the question as the manual
shows it (``docs/approval-required-action.png``).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import pytest

from airflow_provider_sms._compat import airflow_3_1_or_later
from tests.approvals import (
    APPROVER_PHONE,
    CAMPAIGN_TEXT,
    DAG_ID,
    USERS,
    Approvals,
    approval_server,
    campaigns,
)
from tests.ui.conftest import ARTIFACTS, sign_in

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from playwright.sync_api import Page

pytestmark = [
    pytest.mark.ui,
    pytest.mark.skipif(not airflow_3_1_or_later(), reason="human-in-the-loop needs Airflow 3.1+"),
]


@pytest.fixture(scope="module")
def approvals(airflow_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Approvals]:
    """An API server with alice (the approver) and bob."""
    with approval_server(airflow_home, tmp_path_factory.mktemp("approvals_ui")) as approvals:
        yield approvals


def test_the_approver_reads_the_figures_and_clicks_send(
    sms_sandbox: Any, approvals: Approvals, page: Page
) -> None:
    from playwright.sync_api import expect

    process = approvals.start(sms_sandbox)
    question = approvals.question(process)
    run_id = question["task_instance"]["dag_run_id"]
    # The approver's SMS links to the send task's Required actions page.
    (texted,) = [c for c in sms_sandbox.inspect.campaigns() if c["sent_to"] == [APPROVER_PHONE]]
    match = re.search(r"http://\S+/required_actions", texted["text"])
    assert match is not None, texted["text"]
    link = match.group(0)
    assert link.startswith(f"{approvals.url}/dags/{DAG_ID}/runs/")
    assert link.endswith("/tasks/send/required_actions")

    sign_in(page, approvals.url, "alice", USERS["alice"])
    page.goto(link)
    send = page.get_by_test_id("hitl-option-Send")
    expect(send).to_be_enabled()
    # The Markdown body of the question, rendered: the refusal, the figures' table and the text.
    expect(page.get_by_text("cost 6 credits is over max_cost 1", exact=True)).to_be_visible()
    for label, shown in (
        ("Simulated cost", "6 credits (max_cost 1)"),
        ("Numbers", "6 given, 6 would be sent"),
        ("Message", "GSM 7-bit"),
        ("DAG run", f"{DAG_ID} / {run_id}, task send"),
    ):
        expect(page.get_by_role("row").filter(has_text=label)).to_contain_text(shown)
    expect(page.get_by_text(CAMPAIGN_TEXT, exact=True)).to_be_visible()
    # What "Send" approves, as the send checks it, is on the page the approver reads.
    expect(page.get_by_text('What "Send" approves, checked again just before sending:')).to_be_visible()
    expect(page.get_by_test_id("hitl-option-Do not send")).to_be_enabled()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=ARTIFACTS / "approval-required-action.png", full_page=True, animations="disabled")

    send.click()
    expect(page.get_by_text(re.compile(r"^Response received at .+ from alice$"))).to_be_visible()
    expect(send).to_be_disabled()
    output = approvals.finish(process)

    assert approvals.send_task() == ("success", 1), output[-6000:]
    sent = campaigns(sms_sandbox)
    assert [len(c["sent_to"]) for c in sent] == [3, 3]  # the two batches, each once
    assert sorted(n for c in sent for n in c["sent_to"]) == sorted(f"3361200020{i}" for i in range(1, 7))
    assert approvals.result()["gate"]["approval"]["by"] == "alice"
    assert "Approved: alice answered 'Send'" in output
