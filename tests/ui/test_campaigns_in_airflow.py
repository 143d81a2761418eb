"""The campaigns page inside Airflow's own UI, in Debian's chromium, as a user meets it.

A real ``airflow api-server`` (Airflow's React UI, the simple auth manager's login page, the provider's
plugin with its receiver, flusher and campaign indexer) on a SQLite home of its own, in multi-team
mode: two DAG bundles, ``team_a`` and ``team_b``, each with a DAG that sends a campaign of six numbers
to the sandbox through ``airflow dags test``. The sandbox posts the delivery reports to the API server
(delivered, delivered, delivered, expired, not delivered, and one still ``sent``), so the campaigns
are listed with their delivery by the provider's own path. Users: ``admin`` (every DAG) and
``viewer``, a viewer of team A's DAGs only.

Screenshots (``tests/ui/artifacts/``): ``campaigns-list.png``, ``campaigns-campaign.png`` and
``campaigns-run-tab.png``, the pictures of the Campaigns page of the manual.
"""

from __future__ import annotations

import csv
import io
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import pytest
import requests

from tests.ui.conftest import ARTIFACTS, TeamAirflow, team_deployment

if TYPE_CHECKING:
    from collections.abc import Iterator

    from playwright.sync_api import Browser, FrameLocator, Page

    from tests.token_canary import TokenCanary

pytestmark = pytest.mark.ui

TEAM_DAGS = Path(__file__).with_name("team_dags")
DAG_A, DAG_B = "sms_team_a_campaign", "sms_team_b_campaign"
PASSWORDS = {"admin": "admin-password-e2e", "viewer": "viewer-password-e2e"}
# The reports' statuses, number after number: 3 delivered, 12 expired, 2 not delivered, 1 sent (not final).
STATUSES = [3, 3, 3, 12, 2, 1]
FAILED_STATUSES = {12: "expired", 2: "not delivered"}
# Upper bound for the reports to be stored, flushed and the campaigns indexed (each every few seconds).
LISTED_TIMEOUT = 90.0
CAMPAIGNS_API = "/sms/campaigns/api/v1"


@pytest.fixture(scope="module")
def team_airflow(
    tmp_path_factory: pytest.TempPathFactory, token_canary: TokenCanary
) -> Iterator[TeamAirflow]:
    with team_deployment(
        tmp_path_factory.mktemp("airflow_teams"),
        token_canary,
        bundles={team: TEAM_DAGS / team for team in ("team_a", "team_b")},
        users="viewer:viewer:team_a,admin:admin",
        passwords=PASSWORDS,
        send=[DAG_A, DAG_B],
        log_name="api-server-teams.log",
        dlr_statuses=tuple(STATUSES),
    ) as deployment:
        _wait_until_listed(deployment)
        yield deployment


def _wait_until_listed(deployment: TeamAirflow) -> None:
    """Until both campaigns are listed with every final report counted (5 of 6 messages each)."""
    headers = {"Authorization": f"Bearer {deployment.token('admin')}"}
    deadline = time.monotonic() + LISTED_TIMEOUT
    listed: Any = None
    while time.monotonic() < deadline:
        listed = requests.get(
            f"{deployment.url}{CAMPAIGNS_API}/campaigns", headers=headers, timeout=10
        ).json()
        finals = {c["dag_id"]: c["delivery"]["not_final"] for c in listed.get("campaigns", [])}
        if finals == {DAG_A: 1, DAG_B: 1}:
            return
        time.sleep(1)
    pytest.fail(f"the campaigns were not listed with their reports within {LISTED_TIMEOUT}s: {listed}")


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh browser page; every wait bounded at 20 s; console errors of the campaigns page fail it."""
    context = browser.new_context(viewport={"width": 1400, "height": 900}, accept_downloads=True)
    context.set_default_timeout(20_000)
    page = context.new_page()
    errors: list[str] = []
    page.on(
        "console",
        lambda message: (
            errors.append(message.text)
            if message.type == "error" and "/sms/campaigns/" in message.location.get("url", "")
            else None
        ),
    )
    try:
        yield page
    finally:
        context.close()
    assert errors == [], f"the campaigns page logged errors: {errors}"


def _rows(frame: FrameLocator) -> list[str]:
    rows = frame.locator("#campaigns tbody tr.campaign")
    rows.first.wait_for()
    return [rows.nth(index).inner_text() for index in range(rows.count())]


def test_an_admin_finds_the_page_in_the_nav_and_sees_every_teams_campaigns(
    team_airflow: TeamAirflow, page: Page
) -> None:
    team_airflow.login(page, "admin")
    page.get_by_role("button", name="Browse").click()
    page.get_by_role("menuitem", name="SMS campaigns").click()
    # Once, under a loaded CI machine, Airflow's UI showed the page at a longer address below this one
    # (/plugin/sms-campaigns/sms/campaigns/ui/); the frame's rows, read next, are what the user sees.
    page.wait_for_url(re.compile(re.escape(f"{team_airflow.url}/plugin/sms-campaigns") + r"(/.*)?$"))

    rows = _rows(team_airflow.frame(page))
    assert [row.split("\t")[1].split(" / ")[0] for row in rows] == [DAG_B, DAG_A]
    tickets = sorted(int(c["ticket"]) for c in team_airflow.sandbox.inspect.campaigns())
    assert all("50.0 % delivered" in row for row in rows)
    assert sorted(int(row.split("\t")[2]) for row in rows) == tickets
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=ARTIFACTS / "campaigns-list.png", animations="disabled")

    # Each campaign has a message not yet final and two failed: none complete, both with failures.
    frame = team_airflow.frame(page)
    frame.get_by_label("Delivery").select_option("complete")
    frame.get_by_role("button", name="Filter").click()
    frame.get_by_text("No campaign matches.").wait_for()
    frame.get_by_label("Delivery").select_option("with_failures")
    frame.get_by_role("button", name="Filter").click()
    frame.locator("#campaigns tbody tr.campaign").nth(1).wait_for()
    assert len(_rows(frame)) == 2


def test_a_campaign_draws_its_chart_and_its_csv_is_the_sandboxs_failures(
    team_airflow: TeamAirflow, page: Page
) -> None:
    team_airflow.login(page, "admin")
    page.goto(f"{team_airflow.url}/plugin/sms-campaigns")
    frame = team_airflow.frame(page)
    frame.locator("#campaigns tbody tr.campaign", has_text=DAG_A).locator("td").first.locator("a").click()
    frame.locator("#chart svg").wait_for()
    assert frame.locator("#chart svg polyline").count() == 2  # delivered and failed
    assert frame.locator("#failed-numbers code").all_inner_texts() == ["33612000404", "33612000405"]
    page.screenshot(path=ARTIFACTS / "campaigns-campaign.png", full_page=True, animations="disabled")

    with page.expect_download() as download:
        frame.locator("#csv").click()
    lines = list(csv.reader(io.StringIO(Path(download.value.path()).read_text())))
    ticket = team_airflow.ticket_of("shipped")
    expected = sorted(
        (report["destination"], FAILED_STATUSES[report["status"]])
        for report in team_airflow.sandbox.inspect.delivery_report_ledger()
        if report["campaign_id"] == ticket and report["status"] in FAILED_STATUSES
    )
    assert lines[0] == ["number", "status", "country", "reported_at"]
    assert sorted((number, status) for number, status, _, _ in lines[1:]) == expected
    assert len(expected) == 2


def test_the_dag_run_tab_lists_that_runs_campaign(team_airflow: TeamAirflow, page: Page) -> None:
    team_airflow.login(page, "admin")
    run_id = team_airflow.runs[DAG_A]
    page.goto(f"{team_airflow.url}/dags/{DAG_A}/runs/{quote(run_id)}")
    page.get_by_role("link", name="SMS campaigns").click()
    page.wait_for_url("**/plugin/sms-campaigns-run")

    frame = team_airflow.frame(page)
    (row,) = _rows(frame)
    assert f"{DAG_A} / {run_id} / send" in row
    assert frame.locator("h1").inner_text() == "SMS campaigns of this run"
    # The tab has no filters, and says nothing of them.
    assert "null" not in frame.locator("#app").inner_text()
    page.screenshot(path=ARTIFACTS / "campaigns-run-tab.png", animations="disabled")


def test_a_viewer_of_team_a_sees_only_its_campaign_with_masked_numbers(
    team_airflow: TeamAirflow, page: Page
) -> None:
    team_airflow.login(page, "viewer")
    page.goto(f"{team_airflow.url}/plugin/sms-campaigns")
    frame = team_airflow.frame(page)
    (row,) = _rows(frame)
    assert DAG_A in row

    frame.locator("#campaigns tbody tr.campaign").locator("td").first.locator("a").click()
    frame.locator("#failed-numbers code").first.wait_for()
    assert frame.locator("#failed-numbers code").all_inner_texts() == ["336•••••404", "336•••••405"]
    assert frame.locator("#csv").count() == 0

    # Team B's campaign through the JSON API, with the viewer's login (the UI's cookie): as if none.
    admin = {"Authorization": f"Bearer {team_airflow.token('admin')}"}
    every = requests.get(f"{team_airflow.url}{CAMPAIGNS_API}/campaigns", headers=admin, timeout=10).json()
    (team_b,) = [c["id"] for c in every["campaigns"] if c["dag_id"] == DAG_B]
    assert page.request.get(f"{team_airflow.url}{CAMPAIGNS_API}/campaigns/{team_b}").status == 404


def test_the_json_api_without_a_login_is_401(team_airflow: TeamAirflow) -> None:
    for path in ("/campaigns", "/campaigns/1", "/campaigns/1/failed.csv"):
        assert requests.get(f"{team_airflow.url}{CAMPAIGNS_API}{path}", timeout=10).status_code == 401


def test_the_page_follows_airflows_dark_mode(team_airflow: TeamAirflow, page: Page) -> None:
    from playwright.sync_api import expect

    team_airflow.login(page, "admin")
    page.goto(f"{team_airflow.url}/plugin/sms-campaigns")
    frame = team_airflow.frame(page)
    _rows(frame)
    light = frame.locator("body").evaluate("body => getComputedStyle(body).backgroundColor")
    expect(frame.locator("html")).not_to_have_class(re.compile(r"\bdark\b"))

    page.get_by_role("button", name="User").click()
    page.get_by_role("menuitem", name="Appearance").hover()
    page.get_by_role("menuitemradio", name="Dark Mode").click()
    expect(frame.locator("html")).to_have_class(re.compile(r"\bdark\b"))
    dark = frame.locator("body").evaluate("body => getComputedStyle(body).backgroundColor")
    assert dark != light


def test_the_send_tasks_extra_link_opens_its_campaign(team_airflow: TeamAirflow, page: Page) -> None:
    team_airflow.login(page, "admin")
    run_id = team_airflow.runs[DAG_A]
    # Airflow 3.3 shows a task instance's extra links on its Details tab.
    page.goto(f"{team_airflow.url}/dags/{DAG_A}/runs/{quote(run_id)}/tasks/send/details")
    link = page.get_by_role("link", name="SMS campaign", exact=True)
    assert (link.get_attribute("href") or "").startswith(f"{team_airflow.url}/plugin/sms-campaigns#/task?")
    page.screenshot(path=ARTIFACTS / "campaigns-extra-link.png", animations="disabled")

    link.click()  # same origin: Airflow opens it in the same tab
    frame = team_airflow.frame(page)
    frame.locator("#chart svg").wait_for()
    assert frame.locator("h1").inner_text() == f"Campaign {team_airflow.ticket_of('shipped')}"
