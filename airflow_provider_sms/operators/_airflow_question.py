"""Airflow's human-in-the-loop record of the running task instance. Not public API.

The send operator asks its question the way Airflow's own ``HITLOperator`` does, with the Task SDK's
calls: it writes the question (subject, Markdown body, options, default, assigned users) into the
task instance's record, then parks the task until the answer: in the ``awaiting_input`` state on
Airflow 3.3 and later (no worker, triggerer or pool slot held), deferred to the standard provider's
``HITLTrigger`` on 3.1 and 3.2. Airflow resumes the task's ``execute_complete`` with the answer.

The question goes through the execution API, which lets a task write the record of its own task
instance only. Airflow keeps one record per task instance: asked again (a retry, a clear), the record
keeps its first subject and body and drops the earlier answer, so :func:`post_question` returns the
body Airflow shows. The answer comes back the way Airflow gives it to the task: the event it resumes
the task with (``next_kwargs``), which Airflow builds from the record when a user answers (or the
timeout passes) and which no other task can write. Only a user Airflow lets answer gives an answer
with a name: an answer written through the execution API has none.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import urlencode, urlsplit, urlunsplit

from airflow.providers.common.compat.sdk import TaskDeferred, conf

if TYPE_CHECKING:
    from collections.abc import Mapping
    from uuid import UUID


@dataclass(frozen=True)
class Answer:
    """The answer Airflow resumed the task with.

    :param options: the options chosen (none when Airflow ended the wait with an error).
    :param by: who answered (``{"id": ..., "name": ...}``); None when nobody did (the default taken at
        the timeout, or an answer written through the execution API).
    :param at: when (ISO 8601), or None.
    :param error: why Airflow ended the wait without an answer (3.1 and 3.2: the trigger's error).
    """

    options: tuple[str, ...]
    by: dict[str, str] | None
    at: str | None
    error: str | None = None

    @classmethod
    def of(cls, event: Mapping[str, Any]) -> Answer:
        """The answer in the event Airflow resumed the task with (``execute_complete``'s ``event``)."""
        user = event.get("responded_by_user")
        moment = event.get("responded_at")
        when = moment.isoformat() if isinstance(moment, (dt.datetime, dt.date)) else moment
        return cls(
            options=tuple(event.get("chosen_options") or ()),
            by={"id": str(user["id"]), "name": str(user["name"])} if user else None,
            at=str(when) if when else None,
            error=str(event["error"])
            if event.get("error") and event.get("error_type") != "timeout"
            else None,
        )


def post_question(
    ti_id: UUID,
    *,
    subject: str,
    body: str,
    options: list[str],
    defaults: list[str],
    assigned_users: list[dict[str, str]] | None,
) -> str | None:
    """Write the question into the task instance's record; the body Airflow keeps and shows.

    That is ``body``, unless this task instance asked before (an earlier try, or before a clear):
    then it is the first question's body.
    """
    from airflow.sdk.api.datamodels._generated import HITLUser
    from airflow.sdk.execution_time.comms import CreateHITLDetailPayload
    from airflow.sdk.execution_time.task_runner import SUPERVISOR_COMMS

    # The Task SDK's upsert_hitl_detail() sends this same message and drops the reply; the reply is the
    # record as Airflow keeps it.
    kept = SUPERVISOR_COMMS.send(
        msg=CreateHITLDetailPayload(
            ti_id=ti_id,
            options=options,
            subject=subject,
            body=body,
            defaults=defaults,
            multiple=False,
            params={},
            assigned_users=[HITLUser(**user) for user in assigned_users or []],
        )
    )
    return getattr(kept, "body", None)


def wait_for_answer(
    ti_id: UUID,
    *,
    options: list[str],
    defaults: list[str],
    timeout: dt.timedelta | None,
    kwargs: dict[str, Any],
) -> NoReturn:
    """Park the task until the answer; Airflow resumes ``execute_complete(event=..., **kwargs)``.

    :param timeout: how long the question waits; then Airflow takes ``defaults``. None: no limit.
    :raises TaskAwaitingInput: on Airflow 3.3 and later.
    :raises TaskDeferred: on Airflow 3.1 and 3.2, to ``HITLTrigger``.
    """
    try:
        from airflow.sdk.exceptions import TaskAwaitingInput
    except ImportError:  # Airflow 3.1 and 3.2: a trigger watches the record
        import pendulum
        from airflow.providers.standard.triggers.hitl import HITLTrigger

        trigger = HITLTrigger(
            ti_id=ti_id,
            options=options,
            defaults=defaults,
            params={},
            multiple=False,
            timeout_datetime=pendulum.now("UTC") + timeout if timeout else None,
        )
        raise TaskDeferred(trigger=trigger, method_name="execute_complete", kwargs=kwargs) from None
    raise TaskAwaitingInput(method_name="execute_complete", kwargs=kwargs, timeout=timeout)


def required_actions_link(ti: Any) -> str | None:
    """The link to the task instance's question in Airflow's UI (``[api] base_url``), or None when the
    base URL is not set."""
    base_url: str | None = conf.get("api", "base_url", fallback=None)
    if not base_url:
        return None
    parts = urlsplit(base_url)
    # Under the base URL's path too: an API server behind a prefix serves its UI there.
    path = f"{parts.path.rstrip('/')}/dags/{ti.dag_id}/runs/{ti.run_id}/tasks/{ti.task_id}/required_actions"
    query = urlencode({"map_index": -1 if ti.map_index is None else ti.map_index})
    return urlunsplit((parts.scheme, parts.netloc, path, query, ""))
