"""Trust boundaries on a real multi-team Airflow: what another DAG, another team or an unauthenticated
caller can no longer forge or read.

A real ``airflow api-server`` (simple auth manager, multi-team mode, the provider's receiver, flusher
and campaign indexer) on a SQLite home, two DAG bundles copied to the test's own folders (``team_a``
and ``team_b``), each with a DAG that sends six numbers to the sandbox through ``airflow dags test``;
team B's bundle also holds a plain task that pushes a campaign record it did not send. Users: ``admin``,
``user_a`` and ``user_b`` (role User, so each may edit their team's DAGs and see their numbers).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import requests

from airflow_provider_sms.sandbox.testing import TEST_TOKEN
from tests.ui.conftest import TeamAirflow, team_deployment

if TYPE_CHECKING:
    from collections.abc import Iterator

    from playwright.sync_api import Page

    from tests.token_canary import TokenCanary

pytestmark = pytest.mark.ui

TEAM_DAGS = Path(__file__).with_name("team_dags")
FORGER = Path(__file__).parents[1] / "dags" / "campaign_dags" / "sms_forged_record.py"
DAG_A, DAG_B, DAG_FORGER = "sms_team_a_campaign", "sms_team_b_campaign", "sms_forged_record"
PASSWORDS = {"admin": "admin-password-trust", "user_a": "user-a-password-trust", "user_b": "user-b-pw-trust"}
STATUSES = (3, 3, 3, 12, 2, 1)
CAMPAIGNS_API = "/sms/campaigns/api/v1"
# Upper bound for the indexer (every few seconds) to have read a record.
INDEXED_TIMEOUT = 90.0


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory, token_canary: TokenCanary) -> Iterator[TeamAirflow]:
    folders = tmp_path_factory.mktemp("trust_bundles")
    bundles = {}
    for team in ("team_a", "team_b"):
        bundles[team] = shutil.copytree(TEAM_DAGS / team, folders / team)
    shutil.copy(FORGER, bundles["team_b"] / FORGER.name)
    with team_deployment(
        tmp_path_factory.mktemp("airflow_trust"),
        token_canary,
        bundles=bundles,
        users="admin:admin,user_a:user:team_a,user_b:user:team_b",
        passwords=PASSWORDS,
        send=[DAG_A, DAG_B],
        log_name="api-server-trust.log",
        dlr_statuses=STATUSES,
    ) as found:
        listed(found, "admin", expect={DAG_A, DAG_B})
        yield found


def get(deployment: TeamAirflow, user: str | None, path: str, **params: Any) -> requests.Response:
    headers = {"Authorization": f"Bearer {deployment.token(user)}"} if user else {}
    return requests.get(f"{deployment.url}{path}", headers=headers, params=params, timeout=10)


def listed(deployment: TeamAirflow, user: str, expect: set[str] | None = None) -> dict[str, int]:
    """The campaigns ``user`` is listed, by DAG id; waits until they are ``expect`` when given."""
    deadline = time.monotonic() + INDEXED_TIMEOUT
    while True:
        page = get(deployment, user, f"{CAMPAIGNS_API}/campaigns").json()
        found = {c["dag_id"]: c["id"] for c in page["campaigns"]}
        if expect is None or set(found) == expect:
            return found
        if time.monotonic() > deadline:
            pytest.fail(f"{user} was listed {sorted(found)}, not {sorted(expect)}, within {INDEXED_TIMEOUT}s")
        time.sleep(1)


def logged(deployment: TeamAirflow, text: str) -> bool:
    """Whether the API server's log holds ``text``, waiting for the indexer's next looks."""
    deadline = time.monotonic() + INDEXED_TIMEOUT
    while time.monotonic() < deadline:
        if text in deployment.log_path.read_text(errors="replace"):
            return True
        time.sleep(1)
    return False


def test_another_teams_task_cannot_list_a_campaign_of_a_connection_it_does_not_hold(
    deployment: TeamAirflow,
) -> None:
    # Team B's plain task pushes a record naming team A's campaign (its ticket, on the connection both
    # use), with a signature it made up: listed, team B's users would get team A's numbers in full.
    ticket = deployment.ticket_of("shipped")
    deployment.airflow("dags", "test", DAG_FORGER, "-c", json.dumps({"ticket": ticket}), timeout=300)

    assert logged(deployment, f"left out the campaign record of {DAG_FORGER}")
    assert set(listed(deployment, "user_b")) == {DAG_B}
    assert set(listed(deployment, "admin")) == {DAG_A, DAG_B}
    assert get(deployment, "admin", f"{CAMPAIGNS_API}/campaigns", dag_id=DAG_FORGER).json()["campaigns"] == []


def test_a_deleted_or_re_created_team_dag_gives_its_campaigns_to_no_other_team(
    deployment: TeamAirflow, page: Page
) -> None:
    campaign = listed(deployment, "admin")[DAG_B]
    detail, csv = f"{CAMPAIGNS_API}/campaigns/{campaign}", f"{CAMPAIGNS_API}/campaigns/{campaign}/failed.csv"
    assert get(deployment, "user_a", detail).status_code == 404
    assert get(deployment, "user_b", csv).status_code == 200

    deployment.airflow("dags", "delete", DAG_B, "-y")
    for user, theirs in (("user_a", {DAG_A}), ("user_b", set())):
        assert get(deployment, user, detail).status_code == 404, user
        assert get(deployment, user, csv).status_code == 404, user
        assert set(listed(deployment, user)) == theirs, user
    assert get(deployment, "admin", detail).status_code == 200
    assert get(deployment, "admin", csv).status_code == 200

    # Team A's page in Airflow's UI, as user_a meets it: team A's campaign alone.
    deployment.login(page, "user_a")
    page.goto(f"{deployment.url}/plugin/sms-campaigns")
    rows = deployment.frame(page).locator("#campaigns tbody tr.campaign")
    rows.first.wait_for()
    assert rows.count() == 1
    assert DAG_A in rows.first.inner_text()

    # The same DAG id re-created in team A's bundle (its file gone from team B's): team A gets no access
    # to team B's campaign.
    bundle_a, bundle_b = (
        Path(bundle["kwargs"]["path"])
        for bundle in json.loads(deployment.env["AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST"])
    )
    shutil.move(bundle_b / f"{DAG_B}.py", bundle_a / f"{DAG_B}.py")
    deployment.airflow("dags", "reserialize")
    assert get(deployment, "user_a", f"/api/v2/dags/{DAG_B}").status_code == 200
    assert get(deployment, "user_a", detail).status_code == 404
    assert get(deployment, "user_a", csv).status_code == 404
    assert DAG_B not in listed(deployment, "user_a")
    assert get(deployment, "admin", detail).status_code == 200


def test_no_full_number_reaches_a_url_while_an_editor_pages_through_the_failed_numbers(
    deployment: TeamAirflow,
) -> None:
    campaign = listed(deployment, "admin")[DAG_A]
    failed = f"{CAMPAIGNS_API}/campaigns/{campaign}/failed"
    numbers, after = [], None
    while True:
        page = get(deployment, "user_a", failed, limit=1, **({"after": after} if after else {})).json()
        numbers += page["numbers"]
        after = page["next"]
        if after is None:
            break
        assert not any(number in after for number in page["numbers"])
    assert numbers == ["33612000404", "33612000405"]
    # Airflow's API server logs every request with its query string, once it has answered it.
    assert logged(deployment, f"path={failed} query='limit=1&after=")
    log = deployment.log_path.read_text(errors="replace")
    assert not any(number in log for number in numbers)
    # A number is no position: refused (the log then holds it, as it holds any URL a caller makes).
    assert get(deployment, "user_a", failed, after=numbers[0]).status_code == 422


def test_the_readers_endpoints_tell_an_unauthenticated_caller_nothing(deployment: TeamAirflow) -> None:
    answers = [
        requests.get(
            f"{deployment.url}/sms/delivery-reports/{name}{path}",
            params={"campaign_id": deployment.ticket_of("shipped")},
            headers=headers,
            timeout=10,
        )
        for name in ("sms_default", "sms_no_such_connection")
        for path in ("/summary", "/batches/1")
        for headers in ({}, {"Authorization": "Bearer not-the-key"})
    ]
    assert {(answer.status_code, answer.text) for answer in answers} == {(401, answers[0].text)}


def test_a_report_whose_country_a_spreadsheet_would_compute_is_refused(deployment: TeamAirflow) -> None:
    webhook = requests.get(
        f"{deployment.sandbox.url}/webhook/1",
        headers={"Authorization": f"Bearer {TEST_TOKEN}", "Accept": "application/json"},
        timeout=10,
    ).json()["webhook"]
    report = {
        "date": "2026-11-24T10:00:00+01:00",
        "status": 2,
        "destination": "33612000404",
        "campaign_id": deployment.ticket_of("shipped"),
        "country_code": "=2+3",
    }
    answer = requests.post(
        f"{deployment.url}/sms/delivery-reports/sms_default",
        json=report,
        headers={"X-SMSFactor-Signature": webhook["signature"]},
        timeout=10,
    )
    assert answer.status_code == 422
    assert "country_code" in answer.json()["detail"]
