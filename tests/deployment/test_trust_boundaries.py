"""Scenario: the trust boundaries on the distributed deployment's PostgreSQL (issue 40).

A send's campaign record, signed by the task on a Celery worker, is copied by the API server's indexer
and listed; the same record copied into another task's XCom (a forgery) is left out and logged once.
The campaigns API pages through the failed numbers by opaque positions: the API server's log, which
writes every URL, holds none of them. The team-scoped list's statement (DAG and team pairs) and the
DAGs' current teams run on PostgreSQL as the API server runs them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.deployment.harness import AirflowApi, Deployment, wait_for

if TYPE_CHECKING:
    from airflow_provider_sms.sandbox.server import InspectionClient

pytestmark = pytest.mark.deployment

DAG_ID = "deployment_send_and_wait"
CAMPAIGNS = "/sms/campaigns/api/v1/campaigns"
NUMBERS = ["33640400001", "33640400002", "33640400003"]
# One number delivered, two failed (not delivered, expired).
STATUSES = [3, 2, 12]


def campaigns_api(deployment: Deployment, api: AirflowApi, path: str = "", **params: object) -> object:
    """One answer of the campaigns API with the admin's token of ``api``."""
    url = f"http://127.0.0.1:{deployment.ports['api']}{CAMPAIGNS}{path}"
    answer = api.session.get(url, params=params, timeout=30)
    answer.raise_for_status()
    return answer.json()


def test_a_signed_record_is_listed_a_forged_copy_is_not_and_no_number_reaches_a_url(
    deployment: Deployment, api: AirflowApi, sandbox: InspectionClient
) -> None:
    sandbox.set_webhook(
        "1", url=f"http://127.0.0.1:{deployment.ports['api']}/sms/delivery-reports/sms_default"
    )
    sandbox.set_delivery_reports(True, statuses=STATUSES, tries=5)
    api.unpause(DAG_ID)
    run_id = api.trigger(DAG_ID, {"recipients": NUMBERS})
    assert api.wait_run(DAG_ID, run_id, timeout=180) == "success"

    # Another task's XCom gets the send's signed record: a forger who read it cannot list it as its own.
    deployment.query(
        "INSERT INTO xcom (dag_run_id, task_id, map_index, key, dag_id, run_id, value, timestamp) "
        "SELECT dag_run_id, 'wait_for_delivery', -1, key, dag_id, run_id, value, now() FROM xcom "
        "WHERE dag_id = :dag_id AND run_id = :run_id AND task_id = 'send' AND key = 'sms_campaign'",
        dag_id=DAG_ID,
        run_id=run_id,
    )
    listed: list[dict[str, object]] = []

    def both_failures_counted() -> bool:
        page = campaigns_api(deployment, api, dag_id=DAG_ID, run_id=run_id)
        listed[:] = page["campaigns"]  # type: ignore[index]
        return len(listed) == 1 and listed[0]["delivery"]["failed"] == 2  # type: ignore[index]

    wait_for("the campaign listed with its two failures", both_failures_counted, timeout=120, interval=1.0)
    assert listed[0]["task_id"] == "send"
    api_log = deployment.processes["api-server"].log
    wait_for(
        "the forged copy left out",
        lambda: f"left out the campaign record of {DAG_ID} / {run_id} / wait_for_delivery" in api_log(),
        timeout=60,
        interval=1.0,
    )

    numbers, after = [], None
    while True:
        params = {"limit": 1, **({"after": after} if after else {})}
        page = campaigns_api(deployment, api, f"/{listed[0]['id']}/failed", **params)
        numbers += page["numbers"]  # type: ignore[index]
        after = page["next"]  # type: ignore[index]
        if after is None:
            break
    assert sorted(numbers) == NUMBERS[1:]
    # The API server logs a request once it has answered it.
    wait_for("the last page's request logged", lambda: "/failed query='limit=1&after=" in api_log(), 30)
    assert not any(number in api_log() for number in NUMBERS)

    # The list's team-scoped statement (DAG and team pairs) and the DAGs' current teams, on PostgreSQL.
    import sqlalchemy
    from sqlalchemy.orm import Session
    from sqlalchemy.pool import NullPool

    from airflow_provider_sms.campaigns import access, queries

    engine = sqlalchemy.create_engine(deployment.database_url, poolclass=NullPool)
    try:
        with Session(engine) as session:
            assert access.current_teams(session, {DAG_ID, "no_such_dag"}) == {DAG_ID: ""}
            page = {"dag_id": DAG_ID, "run_id": run_id}
            ours = queries.campaign_page(session, [(DAG_ID, "")], **page).campaigns
            assert [c.id for c in ours] == [listed[0]["id"]]
            assert queries.campaign_page(session, [(DAG_ID, "team_x")], **page).campaigns == []
            assert queries.campaign_page(session, [], **page).campaigns == []
    finally:
        engine.dispose()
