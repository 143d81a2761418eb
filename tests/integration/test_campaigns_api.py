"""The campaigns JSON API over HTTP on 127.0.0.1, with Airflow's simple auth manager and real tokens.

The provider's app runs as the API server runs it, on the session's migrated SQLite database; the
campaigns are copied by the indexer's own path and their delivery reports stored and flushed by the
receiver's. Users: ``viewer`` (reads every DAG, edits none) and ``admin``; one test narrows the viewer
to one DAG with an auth manager that says so, as a deployment's per-DAG permissions would.
"""

from __future__ import annotations

import datetime as dt
import itertools
import re
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from airflow_provider_sms.api_server.app import build_app
from airflow_provider_sms.campaigns import indexer
from airflow_provider_sms.campaigns.api import API_PREFIX
from airflow_provider_sms.delivery_reports.batches import flush_batch
from airflow_provider_sms.delivery_reports.retention import mark_pruned
from airflow_provider_sms.delivery_reports.settings import URL_PREFIX
from airflow_provider_sms.delivery_reports.store import ensure_flush_rows, insert_reports
from airflow_provider_sms.models import DeliveryReport
from airflow_provider_sms.sandbox.server import ThreadedServer
from tests.campaign_records import connection_env, dag_rows, sms_connections, xcom_row

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

pytestmark = pytest.mark.integration

# Sent an hour ago: its reports (dated two minutes after) arrive during the test, after the send.
SENT_AT = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=1)).replace(microsecond=0)
CONN = "sms_campaigns_api"


def record(ticket: int, sent: int, sent_at: dt.datetime) -> dict[str, Any]:
    return {
        "version": 1,
        "conn_id": CONN,
        "operator": "SmsSendOperator",
        "outcome": "sent",
        "pushtype": "marketing",
        "tickets": [ticket],
        "batches": 1,
        "sent_at": sent_at.isoformat(),
        "delivery_at": sent_at.isoformat(),
        "total": sent + 1,
        "sent": sent,
        "filtered": {"npai": 1},
        "cost": sent,
        "credits": 1000,
    }


@pytest.fixture(scope="module")
def auth_manager(metadata_db: Any) -> Any:
    from airflow.api_fastapi.app import create_auth_manager
    from airflow.configuration import conf

    conf.set("core", "simple_auth_manager_users", "viewer:viewer,admin:admin")
    return create_auth_manager()


def token(auth_manager: Any, name: str) -> str:
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    return auth_manager.generate_jwt(SimpleAuthManagerUser(username=name, role=name))


@pytest.fixture(scope="module")
def campaigns(metadata_db: Any) -> dict[str, int]:
    """Two DAGs' campaigns: dag_a's (ticket 9101, 6 numbers: 3 delivered, 1 expired, 1 not delivered,
    1 sent) and dag_b's (9102)."""
    from airflow.utils.session import create_session

    reports = [
        ("33612000301", 3),
        ("33612000302", 3),
        ("33612000303", 3),
        ("33612000304", 12),
        ("33612000305", 1),
        ("33612000306", 2),
    ]
    with create_session(scoped=False) as session, sms_connections(CONN):
        dag_rows(session, ["dag_a", "dag_b"])
        indexer._copy(
            session,
            [
                xcom_row("dag_a", record(9101, 6, SENT_AT), SENT_AT),
                xcom_row("dag_b", record(9102, 2, SENT_AT + dt.timedelta(minutes=30)), SENT_AT),
            ],
        )
        insert_reports(
            session,
            [
                (
                    CONN,
                    DeliveryReport.model_validate(
                        {
                            "date": (SENT_AT + dt.timedelta(minutes=2)).isoformat(),
                            "status": status,
                            "destination": number,
                            "campaign_id": 9101,
                            "country_code": "FR",
                        }
                    ),
                )
                for number, status in reports
            ],
        )
        ensure_flush_rows(session, [CONN])
    # Another module's run of this fixture may have stored and flushed them already (stored once).
    with create_session(scoped=False) as session:
        flush_batch(session, CONN, max_reports=1000, min_reports=1, asset=None)
    with create_session(scoped=False) as session:
        from sqlalchemy import select

        from airflow_provider_sms.campaigns.tables import campaign_table

        return {
            row.dag_id: row.id
            for row in session.execute(select(campaign_table.c.dag_id, campaign_table.c.id))
        }


@pytest.fixture(scope="module")
def api(auth_manager: Any, campaigns: dict[str, int]) -> Iterator[str]:
    from fastapi import FastAPI

    root = FastAPI()
    root.mount(URL_PREFIX, build_app())
    with ThreadedServer(root) as server:
        yield f"{server.url}{URL_PREFIX}{API_PREFIX}"


def viewer_reads_only_dag_a(auth_manager: Any, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, set[str]]]:
    """Narrow the viewer to dag_a, as a deployment's per-DAG permissions would (the viewer may then not
    read every DAG); returns the questions about DAGs asked, (user, DAG ids), as they come."""
    import airflow.api_fastapi.app as airflow_app

    asked: list[tuple[str, set[str]]] = []

    class OneDagForViewers(type(auth_manager)):  # type: ignore[misc]
        def filter_authorized_dag_ids(
            self, *, dag_ids: set[str], user: Any, method: str = "GET", **_: Any
        ) -> set[str]:
            asked.append((user.get_name(), set(dag_ids)))
            allowed = super().filter_authorized_dag_ids(dag_ids=dag_ids, user=user, method=method)
            return allowed if user.get_name() != "viewer" else allowed & {"dag_a"}

        def is_authorized_dag(self, *, method: str, user: Any, details: Any = None, **kwargs: Any) -> bool:
            if user.get_name() == "viewer" and (details is None or details.id != "dag_a"):
                return False
            return bool(super().is_authorized_dag(method=method, user=user, details=details, **kwargs))

    narrowed = OneDagForViewers()
    monkeypatch.setattr(airflow_app, "get_auth_manager", lambda: narrowed)
    return asked


def get(url: str, who: str | None, auth_manager: Any, **params: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token(auth_manager, who)}"} if who else {}
    return httpx.get(url, headers=headers, params=params, timeout=10)


@pytest.mark.parametrize(
    "headers", [{}, {"Authorization": "Bearer not-a-token"}, {"Cookie": "_token=forged"}]
)
def test_without_a_valid_token_the_api_answers_401(api: str, headers: dict[str, str]) -> None:
    answer = httpx.get(f"{api}/campaigns", headers=headers, timeout=10)
    assert answer.status_code == 401
    assert "log in to Airflow" in answer.json()["detail"]


@pytest.mark.parametrize(
    "path",
    [
        "campaigns?limit=0",
        "campaigns?delivery=nonsense&map_index=-5",
        "campaigns/0",
        "campaigns/not-a-number/failed?after=x",
        "campaigns/1/failed.csv",
        "campaigns/-1/delivery.svg",
    ],
)
def test_an_anonymous_call_is_401_before_its_parameters_are_judged(api: str, path: str) -> None:
    """The login is asked first: an anonymous caller learns nothing of what a route accepts."""
    answer = httpx.get(f"{api}/{path}", timeout=10)
    assert answer.status_code == 401
    assert "log in to Airflow" in answer.json()["detail"]


def test_the_ui_cookie_is_a_login(api: str, auth_manager: Any) -> None:
    answer = httpx.get(f"{api}/campaigns", cookies={"_token": token(auth_manager, "viewer")}, timeout=10)
    assert answer.status_code == 200


def test_the_list_is_newest_first_with_cost_and_delivery(
    api: str, auth_manager: Any, campaigns: dict[str, int]
) -> None:
    page = get(f"{api}/campaigns", "admin", auth_manager, conn_id=CONN).json()

    assert [c["dag_id"] for c in page["campaigns"]] == ["dag_b", "dag_a"]
    first = page["campaigns"][1]
    assert (first["tickets"], first["cost"], first["sent"], first["filtered"]) == ([9101], 6, 6, {"npai": 1})
    assert first["delivery"] == {
        "sent": 6,
        "delivered": 3,
        "failed": 2,
        "not_final": 1,
        "delivered_share": 0.5,
        "by_status": {"sent": 1, "not delivered": 1, "delivered": 3, "expired": 1},
        "reports_pruned_at": None,
        "reports_received": None,  # the connection is not defined for the API server now
    }
    assert page["next"] is None

    one = get(f"{api}/campaigns", "admin", auth_manager, conn_id=CONN, limit=1).json()
    assert [c["dag_id"] for c in one["campaigns"]] == ["dag_b"]
    rest = get(f"{api}/campaigns", "admin", auth_manager, conn_id=CONN, limit=1, before=one["next"]).json()
    assert [c["dag_id"] for c in rest["campaigns"]] == ["dag_a"]


def test_a_campaign_shows_failures_in_full_to_editors_and_masked_to_viewers(
    api: str, auth_manager: Any, campaigns: dict[str, int]
) -> None:
    url = f"{api}/campaigns/{campaigns['dag_a']}"
    admin = get(url, "admin", auth_manager).json()
    viewer = get(url, "viewer", auth_manager).json()

    # Every report is dated two minutes after the send: one point, the totals so far.
    minute = (SENT_AT + dt.timedelta(minutes=2)).strftime("%Y-%m-%dT%H:%M:00")
    assert [(p["at"][:19], p["delivered"], p["failed"]) for p in admin["timeline"]] == [(minute, 3, 2)]
    assert admin["failed_by_status"] == viewer["failed_by_status"] == {"not delivered": 1, "expired": 1}
    assert admin["failed_by_country"] == {"FR": 2}
    failed = ["33612000304", "33612000306"]
    assert admin["failed"] == {"numbers": failed, "masked": False, "next": None, "more": False}
    assert viewer["failed"] == {
        "numbers": ["336•••••304", "336•••••306"],
        "masked": True,
        "next": None,
        "more": False,
    }


def test_a_user_sees_only_the_campaigns_of_dags_they_may_read(
    api: str, auth_manager: Any, campaigns: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    viewer_reads_only_dag_a(auth_manager, monkeypatch)

    listed = get(f"{api}/campaigns", "viewer", auth_manager, conn_id=CONN).json()
    assert [c["dag_id"] for c in listed["campaigns"]] == ["dag_a"]
    hidden = get(f"{api}/campaigns/{campaigns['dag_b']}", "viewer", auth_manager)
    assert hidden.status_code == 404
    assert get(f"{api}/campaigns/{campaigns['dag_b']}", "admin", auth_manager).status_code == 200
    assert get(f"{api}/campaigns/999999", "admin", auth_manager).status_code == 404


def test_a_page_whose_dags_are_all_readable_asks_only_about_them_and_another_reads_again(
    api: str, auth_manager: Any, campaigns: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = viewer_reads_only_dag_a(auth_manager, monkeypatch)

    one = get(f"{api}/campaigns", "admin", auth_manager, conn_id=CONN, limit=1).json()
    # dag_b's shown, dag_a's tells there is a next page: nothing asked about the other DAGs.
    assert ([c["dag_id"] for c in one["campaigns"]], one["next"]) == (["dag_b"], str(campaigns["dag_b"]))
    assert asked == [("admin", {"dag_a", "dag_b"})]
    # The viewer may not read dag_b, the newest: the page is read again for the DAGs they may read.
    asked.clear()
    seen = get(f"{api}/campaigns", "viewer", auth_manager, conn_id=CONN, limit=1).json()
    assert ([c["dag_id"] for c in seen["campaigns"]], seen["next"]) == (["dag_a"], None)
    assert asked[0] == ("viewer", {"dag_a", "dag_b"})


def test_a_long_campaigns_timeline_is_merged_into_at_most_500_points(metadata_db: Any) -> None:
    from airflow.utils.session import create_session
    from sqlalchemy import insert

    from airflow_provider_sms.campaigns.queries import MAX_POINTS, delivery_timeline
    from airflow_provider_sms.delivery_reports.tables import delivery_timeline_table

    start = SENT_AT.replace(second=0)
    with create_session(scoped=False) as session:
        session.execute(
            insert(delivery_timeline_table),
            [
                {
                    "conn_id": CONN,
                    "campaign_id": 9103,
                    "minute": start + dt.timedelta(minutes=minute),
                    "delivered": 2,
                    "failed": 1,
                }
                for minute in range(-5, 1200)
            ],
        )
    with create_session(scoped=False) as session:
        points = delivery_timeline(session, CONN, [9103], SENT_AT)

    # The minutes before the send's (less a minute of clock allowance) are another campaign's.
    assert len(points) <= MAX_POINTS
    assert (points[-1].delivered, points[-1].failed) == (2 * 1201, 1201)
    assert points[-1].at == start + dt.timedelta(minutes=1199)
    assert all(a.delivered < b.delivered and a.at < b.at for a, b in itertools.pairwise(points))


@pytest.mark.parametrize("csv_page", [10_000, 1])
def test_editors_page_through_and_download_the_failed_numbers_viewers_may_not(
    api: str, auth_manager: Any, campaigns: dict[str, int], monkeypatch: pytest.MonkeyPatch, csv_page: int
) -> None:
    from airflow_provider_sms.campaigns import api as campaigns_api

    # One number per read: the download is made of several reads, streamed.
    monkeypatch.setattr(campaigns_api, "CSV_PAGE", csv_page)
    url = f"{api}/campaigns/{campaigns['dag_a']}"
    first = get(f"{url}/failed", "admin", auth_manager, limit=1).json()
    assert (first["numbers"], first["masked"], first["more"]) == (["33612000304"], False, True)
    # The next page's position is opaque: the URL that asks for it holds no number.
    asked = get(f"{url}/failed", "admin", auth_manager, limit=1, after=first["next"])
    assert "612000" not in str(asked.url)
    second = asked.json()
    assert (second["numbers"], second["next"]) == (["33612000306"], None)

    download = get(f"{url}/failed.csv", "admin", auth_manager)
    assert download.status_code == 200
    assert download.headers["content-type"].startswith("text/csv")
    assert (
        f'filename="sms-campaign-{campaigns["dag_a"]}-failed.csv"' in download.headers["content-disposition"]
    )
    lines = [line.split(",") for line in download.text.splitlines()]
    assert lines[0] == ["number", "status", "country", "reported_at"]
    assert [line[:3] for line in lines[1:]] == [
        ["33612000304", "expired", "FR"],
        ["33612000306", "not delivered", "FR"],
    ]

    for path in ("failed", "failed.csv"):
        refused = get(f"{url}/{path}", "viewer", auth_manager)
        assert refused.status_code == 403
        assert "personal data" in refused.json()["detail"]
        assert httpx.get(f"{url}/{path}", timeout=10).status_code == 401


def test_a_failed_page_position_this_server_did_not_give_is_422_naming_after(
    api: str, auth_manager: Any, campaigns: dict[str, int]
) -> None:
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from airflow_provider_sms.delivery_reports.tables import delivery_report_table

    def failed(ticket: int, number: str) -> DeliveryReport:
        date = (SENT_AT + dt.timedelta(minutes=2)).isoformat()
        return DeliveryReport(date=date, status=12, destination=number, campaign_id=ticket, country_code="FR")

    # Report ids of another campaign of the connection, and of this campaign's ticket at another one.
    elsewhere = ["33612000398", "33612000399"]
    with create_session(scoped=False) as session:
        insert_reports(
            session, [(CONN, failed(9198, elsewhere[0])), ("sms_elsewhere", failed(9101, elsewhere[1]))]
        )
    with create_session(scoped=False) as session:
        reports = delivery_report_table.c
        ids = list(session.scalars(select(reports.id).where(reports.destination.in_(elsewhere))))
    url = f"{api}/campaigns/{campaigns['dag_a']}/failed"
    hostile = ["garbage", "0", "-1", str(2**63), "1.5", "33612000304", *ids]

    answers = [get(url, "admin", auth_manager, limit=1, after=after) for after in hostile]

    assert [answer.status_code for answer in answers] == [422] * len(hostile)
    assert all("after" in answer.text for answer in answers)
    assert "not a position this server gave" in answers[-1].json()["detail"]
    # A number given where a position is due is not answered back.
    assert not any("33612000304" in answer.text for answer in answers)


def test_csv_cells_a_spreadsheet_would_read_as_formulas_are_inert(
    api: str, auth_manager: Any, campaigns: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    import csv
    import io

    from airflow_provider_sms.campaigns import queries

    # Cells as the tables could hold them from before the receiver took two-letter country codes only.
    held = [
        ("33612000304", "expired", "=2+3", "2031-01-01T00:00:00+00:00"),
        ("33612000306", "not delivered", "@SUM(A1)\r=1+1", "2031-01-01T00:01:00+00:00"),
    ]
    monkeypatch.setattr(queries, "failed_details", lambda _session, _row, _after, _limit: (held, None))

    download = get(f"{api}/campaigns/{campaigns['dag_a']}/failed.csv", "admin", auth_manager)

    assert list(csv.reader(io.StringIO(download.text, newline=""))) == [
        ["number", "status", "country", "reported_at"],
        ["33612000304", "expired", "'=2+3", "2031-01-01T00:00:00+00:00"],
        ["33612000306", "not delivered", "'@SUM(A1)\r=1+1", "2031-01-01T00:01:00+00:00"],
    ]


def test_the_page_is_served_with_a_strict_policy_and_only_its_own_files(api: str) -> None:
    ui = api.replace(API_PREFIX, "/campaigns/ui")
    moved = httpx.get(ui, timeout=10)
    assert moved.status_code == 308
    assert moved.headers["location"] == "ui/"
    page = httpx.get(f"{ui}/", timeout=10)
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert "default-src 'none'" in policy
    assert "script-src 'self'" in policy
    assert "frame-ancestors 'self'" in policy
    assert '<script src="static/campaigns.js"' in page.text
    for name, kind in [
        ("campaigns.js", "text/javascript"),
        ("campaigns.css", "text/css"),
        ("icon.svg", "image/svg+xml"),
    ]:
        served = httpx.get(f"{ui}/static/{name}", timeout=10)
        assert (served.status_code, served.headers["content-type"].split(";")[0]) == (200, kind)
    # Only the page's own files: not the folder's other files, not a path out of it.
    for name in ("index.html", "..%2Fapi.py", "%2E%2E%2Frecord.py"):
        assert httpx.get(f"{ui}/static/{name}", timeout=10).status_code == 404


def test_the_chart_is_drawn_from_the_timeline(api: str, auth_manager: Any, campaigns: dict[str, int]) -> None:
    url = f"{api}/campaigns/{campaigns['dag_a']}/delivery.svg"
    assert httpx.get(url, timeout=10).status_code == 401
    drawn = get(url, "viewer", auth_manager)

    assert drawn.headers["content-type"] == "image/svg+xml"
    svg = drawn.text
    assert svg.startswith("<svg")
    assert svg.endswith("</svg>")
    lines = dict(re.findall(r'<polyline class="(\w+)" fill="none" points="([^"]+)"', svg))
    assert lines.keys() == {"delivered", "failed"}
    # Each line starts at 0 % at the send and ends at its share of the 6 numbers sent: 3 and 2.
    ys = {name: [float(point.split(",")[1]) for point in points.split()] for name, points in lines.items()}
    bottom, top = ys["delivered"][0], 12.0  # the chart's 0 % and 100 % (TOP margin)
    assert ys["failed"][0] == bottom
    assert ys["delivered"][-1] == pytest.approx(bottom - (bottom - top) * 3 / 6, abs=0.1)
    assert ys["failed"][-1] == pytest.approx(bottom - (bottom - top) * 2 / 6, abs=0.1)


def test_with_teams_each_dag_is_checked_with_its_bundles_team(
    api: str, auth_manager: Any, campaigns: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.models.dag import DagModel

    from airflow_provider_sms.campaigns import access

    if not hasattr(DagModel, "get_dag_id_to_team_name_mapping"):
        # Airflow before 3.2 has no teams: every DAG is asked about without one.
        assert not access.multi_team()
        return
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    # What the bundles' team rows would say ([core] multi_team, a bundle per team).
    monkeypatch.setenv("AIRFLOW__CORE__MULTI_TEAM", "True")
    teams = {"dag_a": "team_a", "dag_b": "team_b"}
    monkeypatch.setattr(
        DagModel,
        "get_dag_id_to_team_name_mapping",
        staticmethod(lambda dag_ids, **_: {d: teams[d] for d in dag_ids if d in teams}),
    )
    monkeypatch.setattr(access, "all_teams", lambda _session: {"team_a", "team_b"})
    viewer_a = auth_manager.generate_jwt(
        SimpleAuthManagerUser(username="viewer", role="viewer", teams=["team_a"])
    )
    headers = {"Authorization": f"Bearer {viewer_a}"}
    admin = {"Authorization": f"Bearer {token(auth_manager, 'admin')}"}

    def listed(who: dict[str, str]) -> list[str]:
        found = httpx.get(f"{api}/campaigns", headers=who, params={"conn_id": CONN}, timeout=10).json()
        return [c["dag_id"] for c in found["campaigns"]]

    # Sent under no team (the indexer copied them outside multi-team mode): their DAGs now stand under a
    # team each, so only the users who may read every team's DAGs see them.
    assert listed(headers) == []
    assert httpx.get(f"{api}/campaigns/{campaigns['dag_a']}", headers=headers, timeout=10).status_code == 404
    assert listed(admin) == ["dag_b", "dag_a"]
    # Sent under their DAGs' teams: team A's viewer sees team A's campaign only.
    with sent_under(teams):
        assert listed(headers) == ["dag_a"]
        assert (
            httpx.get(f"{api}/campaigns/{campaigns['dag_b']}", headers=headers, timeout=10).status_code == 404
        )
        assert (
            httpx.get(f"{api}/campaigns/{campaigns['dag_a']}", headers=headers, timeout=10).status_code == 200
        )


@contextmanager
def sent_under(teams: dict[str, str]) -> Iterator[None]:
    """The campaigns of the DAGs of ``teams`` recorded as sent under those teams, for the block."""
    from airflow.utils.session import create_session
    from sqlalchemy import update

    from airflow_provider_sms.campaigns.tables import campaign_table

    def record(team_of: Callable[[str], str]) -> None:
        with create_session(scoped=False) as session:
            for dag_id in teams:
                session.execute(
                    update(campaign_table)
                    .where(campaign_table.c.dag_id == dag_id)
                    .values(team=team_of(dag_id))
                )

    record(teams.__getitem__)
    try:
        yield
    finally:
        record(lambda _: "")


# The delivery filter's campaigns, on a connection of their own: name -> (tickets, sent, statuses of
# their reports), sent a minute apart in this order (the last is the newest).
CONN_D = "sms_campaigns_delivery"
DELIVERY_CAMPAIGNS = {
    "complete_ok": ([9201], 2, [3, 3]),
    "complete_failed": ([9202], 2, [3, 12]),
    "pending": ([9203], 3, [3, 1]),
    "pending_failed": ([9204], 2, [2]),
    "silent": ([9205], 2, []),
    "two_tickets": ([9207, 9208], 2, [3, 3]),  # one report per ticket
}
# May have been sent: its one batch's outcome is unknown, no ticket, no report.
MAYBE = ("maybe", [], 0, [])
# Delivered in full, then its reports deleted by the retention: its delivery is unknown.
PRUNED = ("pruned", [9209], 2, [3, 3])


@pytest.fixture(scope="module")
def delivery_campaigns(metadata_db: Any) -> dict[str, int]:
    """The delivery filter's campaigns (one DAG each, ``dag_<name>``), their reports stored and flushed."""
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from airflow_provider_sms.campaigns.tables import campaign_table

    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    start = now - dt.timedelta(hours=2)
    xcoms, reports = [], []
    plan = [
        (name, *figures, start + dt.timedelta(minutes=i))
        for i, (name, figures) in enumerate(DELIVERY_CAMPAIGNS.items())
    ]
    # All older than the other tests' campaigns, which are the newest of the list.
    for extra in (MAYBE, PRUNED):
        plan.append((*extra, start + dt.timedelta(minutes=len(plan))))
    for index, (name, tickets, sent, statuses, sent_at) in enumerate(plan):
        value = {
            **record(tickets[0] if tickets else 0, sent, sent_at),
            "conn_id": CONN_D,
            "tickets": tickets,
            "batches": len(tickets) or 1,
        }
        if name == MAYBE[0]:
            value.update(outcome="maybe_sent", unknown_batches=[1], cost=0)
        xcoms.append(xcom_row(f"dag_{name}", value, sent_at))
        dated = sent_at + dt.timedelta(minutes=2)
        for number, status in enumerate(statuses):
            reports.append(
                (
                    CONN_D,
                    DeliveryReport.model_validate(
                        {
                            "date": dated.isoformat(),
                            "status": status,
                            "destination": f"336120{index:02d}{number:03d}",
                            "campaign_id": tickets[number % len(tickets)],
                        }
                    ),
                )
            )
    with create_session(scoped=False) as session, sms_connections(CONN_D):
        dag_rows(session, {row.dag_id for row in xcoms})
        indexer._copy(session, xcoms)
        insert_reports(session, reports)
        ensure_flush_rows(session, [CONN_D])
    with create_session(scoped=False) as session:
        flush_batch(session, CONN_D, max_reports=1000, min_reports=1, asset=None)
    with create_session(scoped=False) as session:
        mark_pruned(session, CONN_D, PRUNED[1][0])
    with create_session(scoped=False) as session:
        rows = session.execute(
            select(campaign_table.c.dag_id, campaign_table.c.id).where(campaign_table.c.conn_id == CONN_D)
        )
        return {dag_id.removeprefix("dag_"): row_id for dag_id, row_id in rows}


def delivery_pages(api: str, auth_manager: Any, limit: int, **params: Any) -> list[list[int]]:
    """Every page of the list for ``params``, read on with ``next``: the ids of each page."""
    pages, before = [], None
    while True:
        after = {"before": before} if before else {}
        page = get(
            f"{api}/campaigns", "admin", auth_manager, conn_id=CONN_D, limit=limit, **after, **params
        ).json()
        pages.append([c["id"] for c in page["campaigns"]])
        assert len(pages[-1]) <= limit
        before = page["next"]
        if before is None:
            return pages


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ("not_final", ["maybe", "silent", "pending_failed", "pending"]),
        ("complete", ["two_tickets", "complete_failed", "complete_ok"]),
        ("with_failures", ["pending_failed", "complete_failed"]),
    ],
)
@pytest.mark.parametrize("limit", [1, 2, 50])
def test_the_delivery_filter_selects_by_delivery_from_the_send_and_pages(
    api: str,
    auth_manager: Any,
    delivery_campaigns: dict[str, int],
    state: str,
    expected: list[str],
    limit: int,
) -> None:
    pages = delivery_pages(api, auth_manager, limit, delivery=state)

    assert [campaign for page in pages for campaign in page] == [
        delivery_campaigns[name] for name in expected
    ]
    # Full pages but the last: a page is read on until it is full.
    assert all(len(page) == limit for page in pages[:-1])
    first = get(f"{api}/campaigns", "admin", auth_manager, conn_id=CONN_D, delivery=state).json()
    for campaign in first["campaigns"]:
        figures = campaign["delivery"]
        # A campaign that may have been sent has a batch whose messages no report will ever cover.
        maybe_sent = campaign["outcome"] == "maybe_sent"
        assert {
            "not_final": figures["not_final"] > 0 or maybe_sent,
            "complete": figures["not_final"] == 0 and not maybe_sent,
            "with_failures": figures["failed"] > 0,
        }[state]


def test_a_campaign_whose_reports_were_pruned_stands_as_no_delivery_state(
    api: str, auth_manager: Any, delivery_campaigns: dict[str, int]
) -> None:
    pruned = get(f"{api}/campaigns/{delivery_campaigns['pruned']}", "admin", auth_manager).json()["campaign"]
    assert pruned["delivery"]["reports_pruned_at"] is not None
    assert (pruned["delivery"]["delivered"], pruned["delivery"]["not_final"]) == (0, 0)
    for state in ("not_final", "complete", "with_failures"):
        listed = get(f"{api}/campaigns", "admin", auth_manager, conn_id=CONN_D, delivery=state, limit=200)
        assert delivery_campaigns["pruned"] not in [c["id"] for c in listed.json()["campaigns"]]


def test_a_page_cursor_that_is_no_campaign_the_user_may_read_is_422(
    api: str, auth_manager: Any, campaigns: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    viewer_reads_only_dag_a(auth_manager, monkeypatch)
    # dag_b's campaign would tell the viewer when it was sent, as the start of a page: not a cursor.
    for who, before in (("viewer", campaigns["dag_b"]), ("admin", 999_999)):
        answer = get(f"{api}/campaigns", who, auth_manager, before=before)
        assert answer.status_code == 422
        assert answer.json()["detail"].startswith(f"before: {before} is not a campaign you may read")
    assert get(f"{api}/campaigns", "viewer", auth_manager, before=campaigns["dag_a"]).status_code == 200


def test_an_unknown_delivery_state_is_422_naming_the_parameter(api: str, auth_manager: Any) -> None:
    answer = get(f"{api}/campaigns", "admin", auth_manager, delivery="delivered")
    assert answer.status_code == 422
    (error,) = answer.json()["detail"]
    assert error["loc"] == ["query", "delivery"]
    assert "'not_final', 'complete' or 'with_failures'" in error["msg"]


def test_the_list_filters_by_task_instance(api: str, auth_manager: Any, campaigns: dict[str, int]) -> None:
    def ids(**params: Any) -> list[int]:
        page = get(f"{api}/campaigns", "admin", auth_manager, dag_id="dag_a", **params).json()
        return [c["id"] for c in page["campaigns"]]

    assert ids(run_id="scheduled__2031", task_id="send", map_index=-1) == [campaigns["dag_a"]]
    assert ids(task_id="other") == ids(map_index=0) == []


@pytest.mark.parametrize(
    ("extra", "received"),
    [({"dlr_webhook_id": "1"}, True), ({}, False)],
    ids=["names the webhook", "names no webhook"],
)
def test_a_campaign_says_whether_its_connections_reports_are_received_here(
    auth_manager: Any,
    campaigns: dict[str, int],
    monkeypatch: pytest.MonkeyPatch,
    extra: dict[str, str],
    received: bool,
) -> None:
    """A second connection of one account (no dlr_webhook_id) shows "not received", not 0 % delivered."""
    import json

    from fastapi import FastAPI

    name, value = connection_env(CONN)
    monkeypatch.setenv(name, json.dumps({**json.loads(value), "extra": extra}))
    root = FastAPI()
    root.mount(URL_PREFIX, build_app())  # connections read afresh
    with ThreadedServer(root) as server:
        api = f"{server.url}{URL_PREFIX}{API_PREFIX}"
        page = get(f"{api}/campaigns", "admin", auth_manager, conn_id=CONN).json()
        detail = get(f"{api}/campaigns/{campaigns['dag_a']}", "admin", auth_manager).json()

    assert [c["delivery"]["reports_received"] for c in page["campaigns"]] == [received, received]
    assert detail["campaign"]["delivery"]["reports_received"] is received
