"""A client of Airflow's public REST API, as the scenarios drive and read the deployment."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import requests

from tests.deployment.harness.waiting import DeploymentError, wait_for

if TYPE_CHECKING:
    from collections.abc import Mapping

# Asset events read per request (the REST API's page).
ASSET_EVENTS_PAGE = 100


class AirflowApi:
    """A client of Airflow's public REST API (/api/v2) with a JWT from the simple auth manager."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.session = requests.Session()

    def login(self) -> None:
        """Get a JWT: with ``simple_auth_manager_all_admins`` GET /auth/token needs no credentials."""
        response = self.session.get(f"{self.base_url}/auth/token", timeout=30)
        response.raise_for_status()
        self.session.headers["Authorization"] = f"Bearer {response.json()['access_token']}"

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.session.request(method, f"{self.base_url}/api/v2{path}", timeout=30, **kwargs)
        if not response.ok:
            raise requests.HTTPError(f"{method} {path}: HTTP {response.status_code}: {response.text[:2000]}")
        return response.json() if response.content else None

    def unpause(self, dag_id: str) -> None:
        self.call("PATCH", f"/dags/{dag_id}", json={"is_paused": False})

    def pause(self, dag_id: str) -> None:
        self.call("PATCH", f"/dags/{dag_id}", json={"is_paused": True})

    def trigger(
        self, dag_id: str, conf: Mapping[str, Any] | None = None, logical_date: str | None = None
    ) -> str:
        """Trigger a run now (with no logical date unless one is given); return its run_id."""
        run = self.call(
            "POST", f"/dags/{dag_id}/dagRuns", json={"logical_date": logical_date, "conf": dict(conf or {})}
        )
        return str(run["dag_run_id"])

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        """The DAG's runs, oldest first."""
        body = self.call("GET", f"/dags/{dag_id}/dagRuns", params={"order_by": "run_after"})
        return list(body["dag_runs"])

    def finished_scheduled_run(self, dag_id: str) -> tuple[dict[str, Any], str]:
        """The run the scheduler starts when a DAG with ``catchup=False`` is unpaused (its latest slot),
        once it has finished, and its state."""
        found: list[dict[str, Any]] = []
        wait_for(
            f"the scheduled run of {dag_id}",
            lambda: bool(found.extend(r for r in self.runs(dag_id) if r["run_type"] == "scheduled") or found),
            timeout=120,
            interval=1.0,
        )
        return found[0], self.wait_run(dag_id, str(found[0]["dag_run_id"]), timeout=180)

    def run_state(self, dag_id: str, run_id: str) -> str:
        return str(self.call("GET", f"/dags/{dag_id}/dagRuns/{run_id}")["state"])

    def wait_run(self, dag_id: str, run_id: str, timeout: float) -> str:
        """Wait until the run is finished; return its state (``success`` or ``failed``)."""
        states: list[str] = []
        try:
            wait_for(
                f"run {run_id} of {dag_id} to finish",
                lambda: states.append(self.run_state(dag_id, run_id)) or states[-1] in ("success", "failed"),
                timeout,
                interval=1.0,
            )
        except DeploymentError as error:
            # "queued" (a logical date in the future, no free slot) is a different fault from "running".
            raise DeploymentError(f"{error} (last state seen: {states[-1] if states else 'none'})") from error
        return states[-1]

    def task_instances(self, dag_id: str, run_id: str) -> dict[str, dict[str, Any]]:
        body = self.call("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
        return {ti["task_id"]: ti for ti in body["task_instances"]}

    def tries(self, dag_id: str, run_id: str, task_id: str) -> list[dict[str, Any]]:
        body = self.call("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/tries")
        return sorted(body["task_instances"], key=lambda t: t["try_number"])

    def xcom(self, dag_id: str, run_id: str, task_id: str) -> Any:
        path = f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/return_value"
        return self.call("GET", path, params={"deserialize": "true"})["value"]

    def log(self, dag_id: str, run_id: str, task_id: str, try_number: int) -> str:
        """The task's log of one try (the worker's lines and, for a deferred task, the triggerer's)."""
        path = f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}"
        body = self.call("GET", path, params={"full_content": "true"})
        return "\n".join(json.dumps(line) if not isinstance(line, str) else line for line in body["content"])

    def variables(self, pattern: str) -> dict[str, str]:
        body = self.call("GET", "/variables", params={"variable_key_pattern": pattern, "limit": 100})
        return {v["key"]: v["value"] for v in body["variables"]}

    def asset_id(self, name: str) -> int | None:
        """The id of the asset named ``name``, or None while no DAG declares it (Airflow has none)."""
        body = self.call("GET", "/assets", params={"name_pattern": name, "limit": 100})
        ids = [asset["id"] for asset in body["assets"] if asset["name"] == name]
        return int(ids[0]) if ids else None

    def asset_events(self, name: str, since: str | None = None) -> list[dict[str, Any]]:
        """Every event of the asset named ``name`` (since ``since``, an ISO 8601 time), oldest first.

        Each is the REST API's record: ``id``, ``asset_id``, ``extra``, ``timestamp``,
        ``created_dagruns`` (the runs it started)... An asset no DAG declares has none.
        """
        asset_id = self.asset_id(name)
        if asset_id is None:
            return []
        events: list[dict[str, Any]] = []
        while True:
            params: dict[str, Any] = {
                "asset_id": asset_id,
                # Airflow adds the id as the tie-break: pages do not overlap.
                "order_by": "timestamp",
                "limit": ASSET_EVENTS_PAGE,
                "offset": len(events),
            }
            if since is not None:
                params["timestamp_gte"] = since
            page = self.call("GET", "/assets/events", params=params)["asset_events"]
            events += page
            if len(page) < ASSET_EVENTS_PAGE:
                return events
