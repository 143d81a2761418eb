"""Campaign records that no other DAG can forge, and campaigns that no other team can read.

The indexer copies a record only when it is signed with its connection's access token for the task
instance whose XCom row holds it; the campaigns API shows a campaign to a team's users only while its
DAG stands under the team it was sent under. On the session's migrated SQLite database, with the
simple auth manager's real tokens; the API is served over HTTP on 127.0.0.1.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from sqlalchemy import delete, select

from airflow_provider_sms.api_server.app import build_app
from airflow_provider_sms.campaigns import indexer
from airflow_provider_sms.campaigns.api import API_PREFIX
from airflow_provider_sms.campaigns.tables import campaign_table
from airflow_provider_sms.delivery_reports.settings import URL_PREFIX
from airflow_provider_sms.sandbox.server import ThreadedServer
from tests.campaign_records import dag_rows, sms_connections, xcom_row

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.metrics_recorder import MetricsRecorder

pytestmark = pytest.mark.integration

CONN, OTHER_CONN = "sms_trusted", "sms_victim"
AT = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=1)).replace(microsecond=0)


def record(ticket: int, conn_id: str = CONN, sent_at: dt.datetime = AT) -> dict[str, Any]:
    return {
        "conn_id": conn_id,
        "operator": "SmsSendOperator",
        "outcome": "sent",
        "tickets": [ticket],
        "batches": 1,
        "sent_at": sent_at.isoformat(),
        "delivery_at": AT.isoformat(),
        "total": 2,
        "sent": 2,
        "cost": 2,
        "credits": 100,
    }


def copied(db: Any, rows: list[Any]) -> dict[str, Any]:
    """Index ``rows`` with both connections readable; the campaigns copied, by DAG id."""
    with db.Session() as session, session.begin(), sms_connections(CONN, OTHER_CONN):
        dag_rows(session, {row.dag_id for row in rows})
        indexer._copy(session, rows)
    with db.Session() as session:
        return {row.dag_id: row for row in session.execute(select(campaign_table))}


def test_a_record_signed_by_its_connections_holder_is_copied(db: Any) -> None:
    found = copied(db, [xcom_row("dag_owner", record(7001), AT)])
    assert set(found) == {"dag_owner"}
    assert "signature" not in found["dag_owner"].record
    assert found["dag_owner"].team == ""


@pytest.mark.parametrize(
    ("forgery", "reason"),
    [
        ("unsigned", indexer.UNSIGNED),
        ("another token", indexer.UNSIGNED),
        ("changed after signing", indexer.UNSIGNED),
        ("another task's record", indexer.UNSIGNED),
        ("a connection that cannot be read", indexer.UNREADABLE_CONNECTION),
    ],
)
def test_a_forged_record_is_left_out_counted_and_logged_once_without_numbers(
    db: Any, caplog: pytest.LogCaptureFixture, metrics_recorder: MetricsRecorder, forgery: str, reason: str
) -> None:
    # A run of its own: each forgery is a row the indexer has not met yet.
    run = f"manual__{forgery.replace(' ', '_')}"
    row = xcom_row("dag_thief", record(7002, OTHER_CONN), AT, run_id=run)
    if forgery == "unsigned":
        row.value.pop("signature")
    elif forgery == "another token":
        row = xcom_row(
            "dag_thief", record(7002, OTHER_CONN), AT, run_id=run, token="a-token-the-thief-made-up"
        )
    elif forgery == "changed after signing":
        row.value["tickets"] = [7099]
    elif forgery == "another task's record":
        # A record the owner's task pushed, copied into the thief's own XCom.
        owner = xcom_row("dag_owner", record(7002, OTHER_CONN), AT, run_id=run)
        row.value = dict(owner.value)
    else:
        row.value = xcom_row("dag_thief", record(7002, "sms_nobody"), AT, run_id=run).value
    before = indexer.LEFT_OUT.counts[reason]

    with caplog.at_level("WARNING", logger=indexer.__name__):
        assert copied(db, [row]) == {}
        # Read again (the look-back of the next look): not logged or counted twice.
        assert copied(db, [row]) == {}

    assert indexer.LEFT_OUT.counts[reason] == before + 1
    cause = indexer.LEFT_OUT_CAUSES[reason]
    assert metrics_recorder.total("indexer.left_out", reason=cause) == 1
    assert f"sms.indexer.left_out.{cause}" in metrics_recorder.names()
    # Nothing of the record in the metric: no DAG, connection or campaign.
    assert metrics_recorder.personal_data(["dag_thief", OTHER_CONN, "sms_nobody", "7002", "7099"]) == []
    lines = [r.getMessage() for r in caplog.records if "left out the campaign record" in r.getMessage()]
    assert len(lines) == 1
    assert "dag_thief" in lines[0]
    assert reason in lines[0]


@pytest.fixture(scope="module")
def auth_manager(metadata_db: Any) -> Any:
    from airflow.api_fastapi.app import create_auth_manager
    from airflow.configuration import conf

    conf.set("core", "simple_auth_manager_users", "viewer:viewer,admin:admin")
    return create_auth_manager()


@pytest.fixture
def api(db: Any, auth_manager: Any) -> Iterator[str]:
    from fastapi import FastAPI

    root = FastAPI()
    root.mount(URL_PREFIX, build_app())
    with ThreadedServer(root) as server:
        yield f"{server.url}{URL_PREFIX}{API_PREFIX}"


def get(api: str, path: str, auth_manager: Any, who: str) -> httpx.Response:
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    token = auth_manager.generate_jwt(SimpleAuthManagerUser(username=who, role=who))
    return httpx.get(f"{api}{path}", headers={"Authorization": f"Bearer {token}"}, timeout=10)


def per_dag_viewer(auth_manager: Any, monkeypatch: pytest.MonkeyPatch, dag_ids: set[str]) -> None:
    """The viewer may read ``dag_ids`` only (a deployment's per-DAG permissions), not every DAG."""
    import airflow.api_fastapi.app as airflow_app

    class PerDag(type(auth_manager)):  # type: ignore[misc]
        def filter_authorized_dag_ids(self, *, dag_ids: set[str], user: Any, **kwargs: Any) -> set[str]:
            allowed: set[str] = super().filter_authorized_dag_ids(dag_ids=dag_ids, user=user, **kwargs)
            return allowed & readable if user.get_name() == "viewer" else allowed

        def is_authorized_dag(self, *, method: str, user: Any, details: Any = None, **kwargs: Any) -> bool:
            if user.get_name() == "viewer" and (details is None or details.id not in readable):
                return False
            return bool(super().is_authorized_dag(method=method, user=user, details=details, **kwargs))

    readable = set(dag_ids)
    narrowed = PerDag()
    monkeypatch.setattr(airflow_app, "get_auth_manager", lambda: narrowed)


def test_a_deleted_dags_campaigns_are_shown_only_to_who_may_read_every_dag(
    db: Any, api: str, auth_manager: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.models.dag import DagModel

    found = copied(db, [xcom_row("dag_gone", record(7003), AT)])
    campaign = found["dag_gone"].id
    per_dag_viewer(auth_manager, monkeypatch, {"dag_gone"})
    assert get(api, f"/campaigns/{campaign}", auth_manager, "viewer").status_code == 200

    # `airflow dags delete`: the DAG's row goes; a DAG id with no row has no owner to ask about.
    with db.Session() as session, session.begin():
        session.execute(delete(DagModel).where(DagModel.dag_id == "dag_gone"))

    assert get(api, f"/campaigns/{campaign}", auth_manager, "viewer").status_code == 404
    assert get(api, f"/campaigns/{campaign}/failed.csv", auth_manager, "viewer").status_code == 404
    listed = json.loads(get(api, "/campaigns", auth_manager, "viewer").content)
    assert campaign not in [c["id"] for c in listed["campaigns"]]
    assert get(api, f"/campaigns/{campaign}", auth_manager, "admin").status_code == 200
    assert get(api, f"/campaigns/{campaign}/failed.csv", auth_manager, "admin").status_code == 200


def test_a_campaign_whose_dag_had_no_row_when_copied_is_an_admins_only(
    db: Any, api: str, auth_manager: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    with db.Session() as session, session.begin(), sms_connections(CONN):
        indexer._copy(session, [xcom_row("dag_never_parsed", record(7004), AT)])
    with db.Session() as session, session.begin():
        (row,) = session.execute(select(campaign_table.c.id, campaign_table.c.team)).all()
        dag_rows(session, ["dag_never_parsed"])
    assert row.team is None
    per_dag_viewer(auth_manager, monkeypatch, {"dag_never_parsed"})

    assert get(api, f"/campaigns/{row.id}", auth_manager, "viewer").status_code == 404
    assert get(api, f"/campaigns/{row.id}", auth_manager, "admin").status_code == 200


def test_a_later_push_keeps_the_team_the_campaign_was_sent_under(db: Any) -> None:
    from sqlalchemy import update

    first = xcom_row("dag_moved", record(7005), AT, run_id="manual__moved")
    copied(db, [first])
    # The DAG moves to another team; a task of that team pushes the same signed record again.
    with db.Session() as session, session.begin():
        session.execute(update(campaign_table).values(team="team_a"))
    again = xcom_row("dag_moved", record(7005), AT + dt.timedelta(minutes=1), run_id="manual__moved")

    assert copied(db, [again])["dag_moved"].team == "team_a"


def test_a_record_of_another_connection_replaces_no_campaign(
    db: Any, caplog: pytest.LogCaptureFixture, metrics_recorder: MetricsRecorder
) -> None:
    genuine = xcom_row("dag_victim", record(7006), AT, run_id="manual__victim")
    copied(db, [genuine])
    # Whoever holds another connection signs a record for the same task instance and send time.
    other = xcom_row(
        "dag_victim", record(7099, OTHER_CONN), AT + dt.timedelta(minutes=1), run_id="manual__victim"
    )
    before = indexer.LEFT_OUT.counts[indexer.OTHER_CONNECTION]

    with caplog.at_level("WARNING", logger=indexer.__name__):
        found = copied(db, [other])

    assert (found["dag_victim"].conn_id, found["dag_victim"].record["tickets"]) == (CONN, [7006])
    assert indexer.LEFT_OUT.counts[indexer.OTHER_CONNECTION] == before + 1
    assert metrics_recorder.total("indexer.left_out", reason="other_connection") == 1
    assert any(indexer.OTHER_CONNECTION in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("together", [False, True], ids=["pushed later", "in the same look"])
def test_a_record_of_another_connection_with_another_send_time_is_left_out(
    db: Any, caplog: pytest.LogCaptureFixture, together: bool
) -> None:
    """One campaign per task instance and connection: a record naming another connection is left out
    whatever its send time (it used to be added beside the campaign when its time differed)."""
    dag_id = f"dag_victim_{'together' if together else 'later'}"
    genuine = xcom_row(dag_id, record(7007), AT, run_id="manual__times")
    other = xcom_row(
        dag_id,
        record(7098, OTHER_CONN, sent_at=AT + dt.timedelta(seconds=1)),
        AT + dt.timedelta(minutes=1),
        run_id="manual__times",
    )
    before = indexer.LEFT_OUT.counts[indexer.OTHER_CONNECTION]

    with caplog.at_level("WARNING", logger=indexer.__name__):
        copied(db, [genuine, other] if together else [genuine])
        if not together:
            copied(db, [other])

    with db.Session() as session:
        rows = session.execute(
            select(campaign_table.c.conn_id, campaign_table.c.record).where(campaign_table.c.dag_id == dag_id)
        ).all()
    assert [(row.conn_id, row.record["tickets"]) for row in rows] == [(CONN, [7007])]
    assert indexer.LEFT_OUT.counts[indexer.OTHER_CONNECTION] == before + 1
