"""The campaigns API's questions to the auth manager: a DAG's team is looked up only in multi-team mode,
and once per request however many questions the request asks; a campaign whose DAG no longer stands
under the team it was sent under is asked about only as "every DAG"."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from airflow_provider_sms.campaigns import access
from tests.campaign_records import dag_rows

if TYPE_CHECKING:
    from collections.abc import Iterator


class Manager:
    """An auth manager that lets everyone read and edit each DAG, but not every DAG, and remembers the
    teams it was asked with."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, frozenset[str], str | None]] = []
        self.every: list[tuple[str, str | None]] = []

    def is_authorized_dag(self, *, method: str, user: Any, details: Any = None) -> bool:
        self.every.append((method, getattr(details, "team_name", None)))
        return False

    def filter_authorized_dag_ids(
        self, *, dag_ids: set[str], user: Any, method: str, team_name: str | None = None
    ) -> set[str]:
        self.asked.append((method, frozenset(dag_ids), team_name))
        return set(dag_ids)


@pytest.fixture
def manager(monkeypatch: pytest.MonkeyPatch) -> Manager:
    import airflow.api_fastapi.app as app

    found = Manager()
    monkeypatch.setattr(app, "get_auth_manager", lambda: found)
    return found


@pytest.fixture
def lookups(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    from airflow.models.dag import DagModel

    calls: list[list[str]] = []

    def mapping(dag_ids: list[str], **_: Any) -> dict[str, str | None]:
        calls.append(list(dag_ids))
        return {dag_id: "team_a" for dag_id in dag_ids if dag_id.startswith("a")}

    monkeypatch.setattr(DagModel, "get_dag_id_to_team_name_mapping", staticmethod(mapping), raising=False)
    return calls


@pytest.fixture
def session(metadata_db: Any) -> Iterator[Any]:
    """A session on the metadata database where a_dag and b_dag have rows (rolled back afterwards)."""
    with metadata_db.Session() as session:
        dag_rows(session, ["a_dag", "b_dag"])
        yield session
        session.rollback()


def test_without_multi_team_no_team_is_looked_up(
    manager: Manager, lookups: list[list[str]], session: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__MULTI_TEAM", "False")
    viewer = access.Viewer(user=object(), name="admin")

    assert viewer.readable(session, {("a_dag", ""), ("b_dag", "")}) == {("a_dag", ""), ("b_dag", "")}
    assert viewer.may_edit(session, ("a_dag", ""))
    assert lookups == []
    assert manager.asked == [
        ("GET", frozenset({"a_dag", "b_dag"}), None),
        ("PUT", frozenset({"a_dag"}), None),
    ]
    assert manager.every == []


def test_in_multi_team_mode_each_dag_is_asked_with_its_team_looked_up_once_per_request(
    manager: Manager, lookups: list[list[str]], session: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__MULTI_TEAM", "True")
    viewer = access.Viewer(user=object(), name="admin")

    viewer.readable(session, {("a_dag", "team_a"), ("b_dag", "")})
    viewer.may_edit(session, ("a_dag", "team_a"))
    assert lookups == [["a_dag", "b_dag"]]
    assert sorted(manager.asked, key=str) == sorted(
        [
            ("GET", frozenset({"a_dag"}), "team_a"),
            ("GET", frozenset({"b_dag"}), None),
            ("PUT", frozenset({"a_dag"}), "team_a"),
        ],
        key=str,
    )


@pytest.mark.parametrize(
    "scope",
    [("a_dag", ""), ("a_dag", "team_b"), ("a_dag", None), ("gone_dag", "team_a")],
    ids=["sent-under-no-team", "sent-under-another-team", "team-never-known", "dag-deleted"],
)
def test_a_campaign_not_standing_under_its_team_is_asked_about_only_as_every_dag(
    manager: Manager,
    lookups: list[list[str]],
    session: Any,
    monkeypatch: pytest.MonkeyPatch,
    scope: tuple[str, str | None],
) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__MULTI_TEAM", "True")
    monkeypatch.setattr(access, "all_teams", lambda _session: {"team_a", "team_b"})
    viewer = access.Viewer(user=object(), name="viewer")

    assert viewer.readable(session, [scope]) == set()
    assert not viewer.may_edit(session, scope)
    assert manager.asked == []
    # Every DAG: of no team (the first question answers no; the teams are not asked then).
    assert manager.every == [("GET", None), ("PUT", None)]
