"""A connection scoped to a team, end to end on a real multi-team Airflow (Airflow 3.2 and later).

A real ``airflow api-server`` (simple auth manager, multi-team mode, two DAG bundles) with the
connection ``sms_team_a`` stored in its database under ``team_a`` (beside the global
``sms_default``), and the sandbox's webhook posting to ``sms_team_a``'s receiver. Team A's DAG sends
four numbers on ``sms_team_a`` and waits for their delivery reports in ``airflow dags test``: the
API server must find the connection with its team to store the reports, answer the wait and list
the campaign, for team A only.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.ui.conftest import TeamAirflow, team_deployment
from tests.ui.test_trust_boundaries import CAMPAIGNS_API, get, listed

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.token_canary import TokenCanary

pytestmark = pytest.mark.ui

TEAM_DAGS = Path(__file__).with_name("team_dags")
DAG_ID = "sms_team_connection_campaign"
PASSWORDS = {"admin": "admin-password-teams", "user_a": "user-a-password-teams", "user_b": "user-b-pw-teams"}
STATUSES = (3, 3, 3, 3)


def multi_team_airflow() -> bool:
    """Whether Airflow scopes connections to teams (3.2 and later)."""
    from airflow.models.connection import Connection

    return hasattr(Connection, "get_team_name")


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory, token_canary: TokenCanary) -> Iterator[TeamAirflow]:
    if not multi_team_airflow():
        pytest.skip("connections are scoped to teams from Airflow 3.2")
    folders = tmp_path_factory.mktemp("team_connection_bundles")
    bundles = {team: shutil.copytree(TEAM_DAGS / team, folders / team) for team in ("team_a", "team_b")}
    shutil.copy(TEAM_DAGS / "team_connection" / f"{DAG_ID}.py", bundles["team_a"])
    with team_deployment(
        tmp_path_factory.mktemp("airflow_team_connection"),
        token_canary,
        bundles=bundles,
        users="admin:admin,user_a:user:team_a,user_b:user:team_b",
        passwords=PASSWORDS,
        send=[DAG_ID],
        log_name="api-server-team-connection.log",
        dlr_statuses=STATUSES,
        team_connections={"sms_team_a": "team_a"},
        receiving="sms_team_a",
    ) as found:
        yield found


def test_a_team_connections_wait_ends_on_its_delivery_reports(deployment: TeamAirflow) -> None:
    run_id = deployment.runs[DAG_ID]
    answer = get(deployment, "admin", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances")
    states = {ti["task_id"]: ti["state"] for ti in answer.json()["task_instances"]}

    assert states == {"send": "success", "wait_for_delivery": "success"}
    path = f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/wait_for_delivery/xcomEntries/return_value"
    counts = get(deployment, "admin", path, deserialize="true").json()["value"]
    assert counts["complete"] is True  # ended on the reports, not at its deadline
    log = deployment.log_path.read_text(errors="replace")
    assert "there is no such connection" not in log


def test_a_team_connections_campaign_is_listed_for_its_team_only(deployment: TeamAirflow) -> None:
    listed(deployment, "user_a", expect={DAG_ID})
    assert listed(deployment, "user_b") == {}
    (campaign,) = get(deployment, "user_a", f"{CAMPAIGNS_API}/campaigns").json()["campaigns"]
    assert campaign["conn_id"] == "sms_team_a"
    assert campaign["delivery"]["delivered"] == 4
