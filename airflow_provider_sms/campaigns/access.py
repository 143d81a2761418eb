"""Who may see what on the campaigns page and its JSON API: Airflow's login and auth manager. Not
public API.

Airflow does not authenticate a plugin's routes: each checks the caller here. The token is the one
Airflow's UI holds: the ``Authorization: Bearer`` header (Airflow 3.0 and 3.1.0 keep it in the page and
send it so), else the ``_token`` cookie (the UI from 3.1.1). No valid token is 401. A user sees the
campaigns of the DAGs the auth manager lets them read; telephone numbers are personal data, shown in
full only to users who may edit the DAG that sent them (``PUT`` on the DAG, as Airflow's own "editable
DAGs" filter asks), masked for the others. With Airflow's multi-team mode, each DAG is checked with its
team (its bundle's).

Team scoping fails closed. A campaign keeps the team its DAG stood under when it was copied (its
*scope*: DAG id and team, "" for none). The auth manager is asked about it only while its DAG still
has a row and stands under that team; a campaign whose DAG was deleted, moved to another team's bundle
or re-created there, or whose team was never known, is shown only to the users who may read (or, for
its numbers, edit) every DAG of every team.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

# At run time: FastAPI reads viewer_of's signature to hand it the request (it is a route dependency).
from fastapi import Request  # noqa: TC002

from airflow_provider_sms.api_server.refusal import Refusal

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping

    from sqlalchemy.orm import Session

# The cookie Airflow's UI keeps the token in (from 3.1.1).
TOKEN_COOKIE = "_token"
NOT_AUTHENTICATED = (
    "log in to Airflow: this API takes the Airflow UI's token (bearer header or _token cookie)"
)
# A campaign's DAG id and the team it was sent under ("" for none; None: not known).
Scope = tuple[str, "str | None"]
Method = Literal["GET", "PUT"]


@dataclass
class Viewer:
    """A logged-in user and what the auth manager lets them do with the campaigns asked about, each
    question asked once per request.

    :param user: Airflow's user object.
    :param name: the user's name, for logs.
    """

    user: Any
    name: str
    _allowed: dict[tuple[Method, str], bool] = field(default_factory=dict)
    _teams: dict[str, str | None] = field(default_factory=dict)
    _every: dict[Method, bool] = field(default_factory=dict)

    def readable(self, session: Session, scopes: Collection[Scope]) -> set[Scope]:
        """Those of ``scopes`` whose campaigns the user may read."""
        return self._allowed_scopes(session, scopes, "GET")

    def may_edit(self, session: Session, scope: Scope) -> bool:
        """Whether the user may edit the DAG of a campaign of ``scope``: then they see its numbers in full."""
        return scope in self._allowed_scopes(session, [scope], "PUT")

    def readable_scopes(self, session: Session, dag_ids: Collection[str]) -> list[tuple[str, str]] | None:
        """The scopes of the campaigns of ``dag_ids`` the user may read; None when they may read every
        campaign (every DAG of every team)."""
        if self.every_dag(session, "GET"):
            return None
        self._look_up(session, dag_ids)
        standing: set[Scope] = {
            (dag_id, self._teams[dag_id]) for dag_id in dag_ids if self._teams[dag_id] is not None
        }
        return sorted((dag_id, team or "") for dag_id, team in self._allowed_scopes(session, standing, "GET"))

    def every_dag(self, session: Session, method: Method) -> bool:
        """Whether the user may ``method`` every DAG, of every team in multi-team mode."""
        if method not in self._every:
            from airflow.api_fastapi.app import get_auth_manager

            manager = get_auth_manager()
            teams = all_teams(session)
            self._every[method] = manager.is_authorized_dag(method=method, user=self.user) and all(
                manager.is_authorized_dag(method=method, user=self.user, details=_dag_details(team))
                for team in teams
            )
        return self._every[method]

    def _allowed_scopes(self, session: Session, scopes: Collection[Scope], method: Method) -> set[Scope]:
        self._look_up(session, {dag_id for dag_id, _ in scopes})
        # Only a campaign whose DAG still stands under the team it was sent under is asked about.
        standing = {
            (dag_id, team) for dag_id, team in scopes if team is not None and self._teams[dag_id] == team
        }
        self._ask({dag_id for dag_id, _ in standing}, method)
        allowed: set[Scope] = {scope for scope in standing if self._allowed[(method, scope[0])]}
        if len(allowed) < len(scopes) and self.every_dag(session, method):
            return set(scopes)
        return allowed

    def _look_up(self, session: Session, dag_ids: Collection[str]) -> None:
        missing = set(dag_ids) - self._teams.keys()
        if missing:
            teams = current_teams(session, missing)
            self._teams.update({dag_id: teams.get(dag_id) for dag_id in missing})

    def _ask(self, dag_ids: set[str], method: Method) -> None:
        from airflow.api_fastapi.app import get_auth_manager

        unknown = {dag_id for dag_id in dag_ids if (method, dag_id) not in self._allowed}
        if not unknown:
            return
        manager = get_auth_manager()
        allowed: set[str] = set()
        # Multi-team deployments (Airflow 3.2+): the auth manager decides per team, and a DAG's team is
        # its bundle's, which the caller must pass: asked without it, a team's DAG reads as anyone's.
        for team, group in dags_by_team(unknown, self._teams).items():
            teams = {"team_name": team} if team else {}
            allowed |= manager.filter_authorized_dag_ids(
                dag_ids=group, user=self.user, method=method, **teams
            )
        self._allowed.update({(method, dag_id): dag_id in allowed for dag_id in unknown})


def multi_team() -> bool:
    """Whether Airflow runs in multi-team mode (``[core] multi_team``, Airflow 3.2+)."""
    from airflow.configuration import conf
    from airflow.models.dag import DagModel

    return hasattr(DagModel, "get_dag_id_to_team_name_mapping") and conf.getboolean(
        "core", "multi_team", fallback=False
    )


def current_teams(session: Session, dag_ids: Collection[str]) -> dict[str, str]:
    """The team each of ``dag_ids`` stands under now ("" for none), for those that have a row: a DAG
    missing from the answer was deleted or never parsed. Teams are looked up only in multi-team mode."""
    from airflow.models.dag import DagModel
    from sqlalchemy import select

    if not dag_ids:
        return {}
    names = sorted(dag_ids)
    teams = {
        dag_id: "" for dag_id in session.scalars(select(DagModel.dag_id).where(DagModel.dag_id.in_(names)))
    }
    if teams and multi_team():
        mapping = DagModel.get_dag_id_to_team_name_mapping(sorted(teams), session=session)
        teams.update({dag_id: team or "" for dag_id, team in mapping.items() if dag_id in teams})
    return teams


def all_teams(session: Session) -> set[str]:
    """Every team of the deployment (none outside multi-team mode)."""
    if not multi_team():
        return set()
    from airflow.models.team import Team

    return Team.get_all_team_names(session=session)


def dags_by_team(dag_ids: set[str], teams: Mapping[str, str | None]) -> dict[str | None, set[str]]:
    """``dag_ids`` grouped by the team owning their bundle (None or "": no team).

    :param teams: each DAG's team (:func:`current_teams`).
    """
    groups: dict[str | None, set[str]] = {}
    for dag_id in dag_ids:
        groups.setdefault(teams.get(dag_id) or None, set()).add(dag_id)
    return groups


def _dag_details(team: str) -> Any:
    from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails

    return DagDetails(team_name=team)


def token_of(request: Request) -> str | None:
    """The caller's token: the bearer header first (an explicit header wins, as in Airflow), else cookie."""
    header = request.headers.get("authorization", "")
    scheme, _, credentials = header.partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        return credentials.strip()
    return request.cookies.get(TOKEN_COOKIE) or None


async def viewer_of(request: Request) -> Viewer:
    """The logged-in caller; 401 without a valid token (missing, expired, revoked or forged)."""
    from airflow.api_fastapi.app import get_auth_manager
    from jwt import InvalidTokenError

    token = token_of(request)
    if token is None:
        raise Refusal(401, NOT_AUTHENTICATED, reason="no token", headers={"WWW-Authenticate": "Bearer"})
    try:
        user = await get_auth_manager().get_user_from_token(token)
    except InvalidTokenError as exc:  # expired ones too (ExpiredSignatureError is one)
        raise Refusal(
            401, NOT_AUTHENTICATED, reason=f"token refused: {exc}", headers={"WWW-Authenticate": "Bearer"}
        ) from None
    return Viewer(user=user, name=str(user.get_name()))
