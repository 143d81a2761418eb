"""The campaigns API's questions to the auth manager: a DAG's team is looked up only in multi-team mode,
and once per request however many questions the request asks."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_sms.campaigns import access


class Manager:
    """An auth manager that lets everyone read and edit, and remembers the teams it was asked with."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, frozenset[str], str | None]] = []

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


def test_without_multi_team_no_team_is_looked_up(
    manager: Manager, lookups: list[list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__MULTI_TEAM", "False")
    viewer = access.Viewer(user=object(), name="admin")

    assert viewer.readable({"a_dag", "b_dag"}) == {"a_dag", "b_dag"}
    assert viewer.may_edit("a_dag")
    assert lookups == []
    assert manager.asked == [
        ("GET", frozenset({"a_dag", "b_dag"}), None),
        ("PUT", frozenset({"a_dag"}), None),
    ]


def test_in_multi_team_mode_each_dag_is_asked_with_its_team_looked_up_once_per_request(
    manager: Manager, lookups: list[list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__MULTI_TEAM", "True")
    viewer = access.Viewer(user=object(), name="admin")

    viewer.readable({"a_dag", "b_dag"})
    viewer.may_edit("a_dag")
    assert lookups == [["a_dag", "b_dag"]]
    assert sorted(manager.asked, key=str) == sorted(
        [
            ("GET", frozenset({"a_dag"}), "team_a"),
            ("GET", frozenset({"b_dag"}), None),
            ("PUT", frozenset({"a_dag"}), "team_a"),
        ],
        key=str,
    )
