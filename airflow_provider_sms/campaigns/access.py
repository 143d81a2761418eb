"""Who may see what on the campaigns page and its JSON API: Airflow's login and auth manager. Not
public API.

Airflow does not authenticate a plugin's routes: each checks the caller here. The token is the one
Airflow's UI holds: the ``Authorization: Bearer`` header (Airflow 3.0 and 3.1.0 keep it in the page and
send it so), else the ``_token`` cookie (the UI from 3.1.1). No valid token is 401. A user sees the
campaigns of the DAGs the auth manager lets them read; telephone numbers are personal data, shown in
full only to users who may edit the DAG that sent them (``PUT`` on the DAG, as Airflow's own "editable
DAGs" filter asks), masked for the others. With Airflow's multi-team mode, each DAG is checked with its
team (its bundle's).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from airflow_provider_sms.delivery_reports.connections import Refusal

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping

    from fastapi import Request

# The cookie Airflow's UI keeps the token in (from 3.1.1).
TOKEN_COOKIE = "_token"
NOT_AUTHENTICATED = (
    "log in to Airflow: this API takes the Airflow UI's token (bearer header or _token cookie)"
)


@dataclass
class Viewer:
    """A logged-in user and what the auth manager lets them do with the DAGs asked about.

    :param user: Airflow's user object.
    :param name: the user's name, for logs.
    """

    user: Any
    name: str
    _readable: dict[str, bool] = field(default_factory=dict)
    _editable: dict[str, bool] = field(default_factory=dict)
    _teams: dict[str, str | None] = field(default_factory=dict)

    def readable(self, dag_ids: Collection[str]) -> set[str]:
        """Those of ``dag_ids`` the user may read (the auth manager asked once per DAG and request)."""
        self._ask(dag_ids, "GET", self._readable)
        return {dag_id for dag_id in dag_ids if self._readable[dag_id]}

    def may_edit(self, dag_id: str) -> bool:
        """Whether the user may edit ``dag_id``: then they see its campaigns' numbers in full."""
        self._ask([dag_id], "PUT", self._editable)
        return self._editable[dag_id]

    def _ask(self, dag_ids: Collection[str], method: Literal["GET", "PUT"], known: dict[str, bool]) -> None:
        from airflow.api_fastapi.app import get_auth_manager

        unknown = {dag_id for dag_id in dag_ids if dag_id not in known}
        if not unknown:
            return
        manager = get_auth_manager()
        allowed: set[str] = set()
        # Multi-team deployments (Airflow 3.2+): the auth manager decides per team, and a DAG's team is
        # its bundle's, which the caller must pass: asked without it, a team's DAG reads as anyone's.
        for team, group in self._by_team(unknown).items():
            teams = {} if team is None else {"team_name": team}
            allowed |= manager.filter_authorized_dag_ids(
                dag_ids=group, user=self.user, method=method, **teams
            )
        known.update({dag_id: dag_id in allowed for dag_id in unknown})

    def _by_team(self, dag_ids: set[str]) -> dict[str | None, set[str]]:
        """``dag_ids`` grouped by team, each DAG's team looked up once per request."""
        missing = dag_ids - self._teams.keys()
        if missing:
            teams = dag_teams(missing)
            self._teams.update({dag_id: teams.get(dag_id) for dag_id in missing})
        return dags_by_team(dag_ids, self._teams)


def dag_teams(dag_ids: set[str]) -> dict[str, str | None]:
    """The team owning each of ``dag_ids``' bundle, looked up only in multi-team mode (``[core]
    multi_team``, Airflow 3.2+): else no DAG has one, and the lookup (a statement in a session of its
    own) is not made."""
    from airflow.configuration import conf
    from airflow.models.dag import DagModel

    mapping = getattr(DagModel, "get_dag_id_to_team_name_mapping", None)
    if mapping is None or not conf.getboolean("core", "multi_team", fallback=False):
        return {}
    teams: dict[str, str | None] = mapping(sorted(dag_ids))
    return teams


def dags_by_team(
    dag_ids: set[str], teams: Mapping[str, str | None] | None = None
) -> dict[str | None, set[str]]:
    """``dag_ids`` grouped by the team owning their bundle (None: no team, not in multi-team mode, or
    Airflow before 3.2).

    :param teams: each DAG's team, when already looked up (:func:`dag_teams`).
    """
    if teams is None:
        teams = dag_teams(dag_ids)
    groups: dict[str | None, set[str]] = {}
    for dag_id in dag_ids:
        groups.setdefault(teams.get(dag_id), set()).add(dag_id)
    return groups


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
