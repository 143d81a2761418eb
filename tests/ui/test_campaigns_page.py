"""The campaigns page in Debian's chromium, against the provider's app on 127.0.0.1 with real tokens of
Airflow's simple auth manager (the campaigns and their reports of tests/integration/test_campaigns_api.py).

What it checks is the page's own work: it reads the JSON API with the UI's cookie, draws the list and
a campaign, shows numbers in full to an editor (with the CSV) and masked to a viewer, and logs no error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from tests.integration.test_campaigns_api import CONN, api, auth_manager, campaigns, token  # noqa: F401
from tests.ui.conftest import ARTIFACTS

if TYPE_CHECKING:
    from collections.abc import Iterator

    from playwright.sync_api import Browser, Page


@pytest.fixture
def as_user(browser: Browser, api: str, auth_manager: Any) -> Iterator[Any]:  # noqa: F811
    """Open the page as ``name`` (the UI's ``_token`` cookie); yields (page, console errors)."""
    contexts = []

    def open_page(name: str, served_by: str = api) -> tuple[Page, list[str]]:
        ui = served_by.replace("/campaigns/api/v1", "/campaigns/ui/")
        context = browser.new_context(viewport={"width": 1300, "height": 900})
        context.set_default_timeout(15_000)
        contexts.append(context)
        # As Airflow sets it: for the whole site (the API is beside the page, not under it).
        root = ui.split("/sms/")[0] + "/"
        context.add_cookies([{"name": "_token", "value": token(auth_manager, name), "url": root}])
        page = context.new_page()
        errors: list[str] = []
        page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(ui)
        return page, errors

    yield open_page
    for context in contexts:
        context.close()


def test_an_editor_sees_the_list_a_campaign_its_chart_and_the_numbers(
    as_user: Any,
    campaigns: dict[str, int],  # noqa: F811
) -> None:
    page, errors = as_user("admin")
    rows = page.locator("#campaigns tbody tr.campaign")
    rows.first.wait_for()
    dags = [rows.nth(i).locator("td").nth(1).inner_text().split(" / ")[0] for i in range(rows.count())]
    # Newest first; campaigns of other modules' runs on the same database may stand among them.
    assert [dag for dag in dags if dag in ("dag_a", "dag_b")] == ["dag_b", "dag_a"]
    row = page.locator(f"tr.campaign[data-id='{campaigns['dag_a']}']")
    assert "50.0 % delivered" in row.inner_text()
    assert "3 delivered, 2 failed, 1 not yet final, of 6 sent" in row.locator(".delivery").get_attribute(
        "title"
    )

    row.locator("td").first.locator("a").click()
    page.locator("#chart svg").wait_for()
    assert page.locator("#chart svg polyline").count() == 2
    assert page.locator("#failed-numbers code").all_inner_texts() == ["33612000304", "33612000306"]
    assert page.locator("#csv").get_attribute("href").endswith(f"/campaigns/{campaigns['dag_a']}/failed.csv")
    assert errors == []


def test_a_viewer_sees_masked_numbers_and_no_download(
    as_user: Any,
    campaigns: dict[str, int],  # noqa: F811
) -> None:
    page, errors = as_user("viewer")
    page.goto(page.url.split("#")[0] + f"#/campaign/{campaigns['dag_a']}")
    page.locator("#failed-numbers code").first.wait_for()
    assert page.locator("#failed-numbers code").all_inner_texts() == ["336•••••304", "336•••••306"]
    assert page.locator("#csv").count() == 0
    assert "shown in full only to users who may edit this DAG" in page.locator("#failed-numbers").inner_text()
    assert errors == []


def test_without_a_login_the_page_says_so(browser: Browser, api: str) -> None:  # noqa: F811
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(api.replace("/campaigns/api/v1", "/campaigns/ui/"))
        assert "Log in to Airflow" in page.locator("#error").inner_text(timeout=15_000)
    finally:
        context.close()


def test_a_slow_list_does_not_draw_itself_over_the_campaign_opened_after_it(
    browser: Browser,
    api: str,  # noqa: F811
    auth_manager: Any,  # noqa: F811
    campaigns: dict[str, int],  # noqa: F811
) -> None:
    from urllib.parse import urlsplit

    ui = api.replace("/campaigns/api/v1", "/campaigns/ui/")
    context = browser.new_context()
    context.set_default_timeout(15_000)
    try:
        root = ui.split("/sms/")[0] + "/"
        context.add_cookies([{"name": "_token", "value": token(auth_manager, "admin"), "url": root}])
        page = context.new_page()
        held: list[Any] = []
        # The list's answer is held back until the campaign is drawn.
        page.route(
            lambda url: urlsplit(url).path.endswith("/api/v1/campaigns"), lambda route: held.append(route)
        )
        page.goto(ui)
        page.goto(f"{ui}#/campaign/{campaigns['dag_a']}")
        page.locator("#failed-numbers code").first.wait_for()
        assert len(held) == 1
        with page.expect_response(lambda answer: answer.request == held[0].request):
            held[0].continue_()
        page.wait_for_timeout(500)  # the list's answer handled (dropped)
        assert page.locator("h1").inner_text().startswith("Campaign 9101")
        assert page.locator("#campaigns").count() == 0
    finally:
        context.close()


def test_a_campaign_whose_connection_receives_no_reports_says_so_instead_of_0_percent(
    as_user: Any,
    campaigns: dict[str, int],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A second connection of the account (no dlr_webhook_id): its campaigns' reports go to another
    connection's receiver, and the page says so rather than "0.0 % delivered" for ever."""
    import json

    from fastapi import FastAPI

    from airflow_provider_sms.api_server.app import build_app
    from airflow_provider_sms.campaigns.api import API_PREFIX
    from airflow_provider_sms.delivery_reports.settings import URL_PREFIX
    from airflow_provider_sms.sandbox.server import ThreadedServer
    from tests.campaign_records import connection_env

    name, value = connection_env(CONN)
    monkeypatch.setenv(name, json.dumps({**json.loads(value), "extra": {}}))
    root = FastAPI()
    root.mount(URL_PREFIX, build_app())
    with ThreadedServer(root) as server:
        page, errors = as_user("admin", f"{server.url}{URL_PREFIX}{API_PREFIX}")
        row = page.locator(f"tr.campaign[data-id='{campaigns['dag_a']}']")
        row.wait_for()
        assert "no delivery reports received for this connection" in row.inner_text()
        assert "% delivered" not in row.inner_text()
        assert "dlr_webhook_id" in row.locator("small[title]").first.get_attribute("title")
        # As the manual shows it (docs/campaigns-not-received.png).
        page.locator("#campaigns").screenshot(path=str(ARTIFACTS / "campaigns-not-received.png"))
        row.locator("td").first.locator("a").click()
        page.locator("#chart svg").wait_for()
        assert "not received" in page.locator(".figures").inner_text()
    assert errors == []
