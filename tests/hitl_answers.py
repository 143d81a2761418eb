"""A user's answer to a human-in-the-loop question, given as Airflow's Required actions page gives it:
a JWT from the simple auth manager's ``/auth/token``, then a PATCH of the task instance's hitlDetails."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import requests

if TYPE_CHECKING:
    from collections.abc import Mapping


class HitlAnswerer:
    """An API server whose simple auth manager knows ``passwords`` (user name: password)."""

    def __init__(self, url: str, passwords: Mapping[str, str]) -> None:
        self.url = url
        self.passwords = passwords

    def token(self, user: str) -> str:
        response = requests.post(
            f"{self.url}/auth/token", json={"username": user, "password": self.passwords[user]}, timeout=30
        )
        response.raise_for_status()
        return str(response.json()["access_token"])

    def answer(self, question: dict[str, Any], user: str, option: str) -> requests.Response:
        """``user`` chooses ``option`` for ``question`` (a hitlDetails entry); the response as it came."""
        ti = question["task_instance"]
        return requests.patch(
            f"{self.url}/api/v2/dags/{ti['dag_id']}/dagRuns/{ti['dag_run_id']}/taskInstances/"
            f"{ti['task_id']}/{ti['map_index']}/hitlDetails",
            json={"chosen_options": [option], "params_input": {}},
            headers={"Authorization": f"Bearer {self.token(user)}"},
            timeout=30,
        )
