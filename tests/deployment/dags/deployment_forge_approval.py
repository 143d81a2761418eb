"""Test DAG of tests/deployment: another DAG's task tries to approve a campaign it does not own.

It does what the review of the trust model did on Airflow 3.3.2, with what Airflow gives every task:
it reads the connection ``sms_default`` (the token any task may read), writes an approval "by alice,
1,000,000 credits" into the Variable where the send guard kept approvals, then tries to answer "Send"
in the waiting send task's human-in-the-loop record through the execution API. The run's conf names
the send's task instance (``dag_id``, ``run_id``, ``ti_id``). Its return value says what Airflow let it
do.
"""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

from airflow.sdk import DAG, BaseHook, Variable, task

from airflow_provider_sms.operators._send_guard import guard_key
from tests.dag_defaults import dag_arguments

with DAG("deployment_forge_approval", **dag_arguments("sms", doc_md=__doc__)):

    @task
    def forge(**context: Any) -> dict[str, Any]:
        victim = context["dag_run"].conf
        token = BaseHook.get_connection("sms_default").password
        key = guard_key(victim["dag_id"], "send", victim["run_id"], -1)
        approval = {"state": "approved", "by": "alice", "at": "2026-01-01T00:00:00+00:00", "cost": 1_000_000}
        identity = {
            "dag_id": victim["dag_id"],
            "task_id": "send",
            "run_id": victim["run_id"],
            "map_index": -1,
        }
        Variable.set(key, json.dumps({**identity, "batches": {}, "approval": approval}))
        from airflow.sdk.execution_time.hitl import update_hitl_detail_response

        try:
            update_hitl_detail_response(ti_id=UUID(victim["ti_id"]), chosen_options=["Send"], params_input={})
        except Exception as exc:
            hitl = f"refused: {type(exc).__name__}: {exc}"
        else:
            hitl = "written"
        return {"token_read": bool(token), "guard": key, "hitl": hitl}

    forge()
