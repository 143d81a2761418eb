"""How long send guards and claims are kept, and their pruning. Internal.

Each send task instance leaves a send guard Variable (``sms_send_guard:...``) and a claim in the claim
store (a row, and a row per chunk of the numbers of a send to numbers): a daily DAG adds one guard a
day. Pruning runs where Airflow's metadata database is reachable (like ``airflow variables``), as
``python -m airflow_provider_sms prune``:

- a **send guard** is deleted once its task instance has ended (success, failed, skipped,
  upstream_failed, removed) more than the retention ago (default 30 days, ``[sms]
  record_retention_days``); a task instance that may still run or retry (queued, running,
  up_for_retry, deferred, ...) keeps its guard whatever its age. A guard whose task instance is gone
  (its DAG run deleted) is deleted once its last batch started more than the retention ago;
- a **claim** and its numbers are deleted (one DELETE each) once its delivery time is more than the
  duplicate window (:func:`~._claims.duplicate_window`) before now: it can no longer match a new send;
- an **alert fold** (:class:`~airflow_provider_sms.notifications.sms.SmsNotifier`'s ``fold_interval``)
  is deleted once its last alert went longer ago than the longest fold interval, unless it holds alerts
  (the next alert to its number carries them);
- a record that cannot be read is never deleted: it is reported, for a person to look at.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pendulum
from airflow.providers.common.compat.sdk import conf

from airflow_provider_sms._task_arguments import MAX_FOLD_INTERVAL
from airflow_provider_sms.operators._claims import CONFIG_SECTION, duplicate_window
from airflow_provider_sms.operators._send_guard import PREFIX as GUARD_PREFIX

if TYPE_CHECKING:
    from collections.abc import Callable

    from sqlalchemy.orm import Session

DEFAULT_RETENTION_DAYS = 30.0
# Task instances in these states will not run again unless a person clears them.
ENDED_STATES = frozenset({"success", "failed", "skipped", "upstream_failed", "removed"})


def retention() -> dt.timedelta:
    """How long after its task instance ended a send guard is kept (``[sms] record_retention_days``)."""
    days = conf.getfloat(CONFIG_SECTION, "record_retention_days", fallback=DEFAULT_RETENTION_DAYS)
    return dt.timedelta(days=days)


@dataclass
class PruneReport:
    """What a prune deleted and kept, key by key."""

    deleted: list[str] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)
    claims: int = 0
    claimed_numbers: int = 0
    alert_folds: int = 0

    def summary(self, *, dry_run: bool) -> str:
        """One line: how many records were (or would be) deleted and kept."""
        verb = "Would delete" if dry_run else "Deleted"
        return (
            f"{verb} {len(self.deleted)} send guard(s), {self.claims} claim(s) ({self.claimed_numbers} "
            f"claimed number(s)) and {self.alert_folds} alert fold(s); kept {len(self.kept)} guard(s), "
            f"{len(self.unreadable)} unreadable (kept, to be looked at)"
        )


def prune(session: Session, *, older_than: dt.timedelta, dry_run: bool = False) -> PruneReport:
    """Delete the guards and claims past their lifetime (see the module docstring).

    :param session: a session of Airflow's metadata database.
    :param older_than: how long after its task instance ended a guard is kept.
    :param dry_run: report only.
    """
    from airflow.models import TaskInstance, Variable
    from sqlalchemy import select

    from airflow_provider_sms.api_server import claims

    now = pendulum.now("UTC")
    report = PruneReport()
    report.claims, report.claimed_numbers = claims.prune(session, now - duplicate_window(), dry_run=dry_run)
    report.alert_folds = claims.prune_folds(session, now - MAX_FOLD_INTERVAL, dry_run=dry_run)
    rows = session.scalars(select(Variable).where(Variable.key.like(f"{GUARD_PREFIX}:%")))

    def task_instance(identity: dict[str, Any]) -> Any:
        return session.scalar(
            select(TaskInstance).where(
                TaskInstance.dag_id == identity["dag_id"],
                TaskInstance.task_id == identity["task_id"],
                TaskInstance.run_id == identity["run_id"],
                TaskInstance.map_index == identity["map_index"],
            )
        )

    for row in list(rows):
        try:
            reason = _guard_kept(json.loads(row.val), now - older_than, task_instance)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            report.unreadable[row.key] = f"{type(exc).__name__}: {exc}"
            continue
        if reason:
            report.kept[row.key] = reason
            continue
        report.deleted.append(row.key)
        if not dry_run:
            session.delete(row)
    return report


def _guard_kept(
    document: dict[str, Any], horizon: dt.datetime, task_instance: Callable[..., Any]
) -> str | None:
    """Why a send guard is kept, or None when it is past its lifetime."""
    ti = task_instance(document)
    if ti is not None:
        if ti.state not in ENDED_STATES:
            return f"its task instance is {ti.state or 'not started'}: it may still send or retry"
        if ti.end_date is None or ti.end_date >= horizon:
            return "its task instance ended less than the retention ago"
        return None
    started = [pendulum.parse(batch["started"]) for batch in document["batches"].values()]
    if started and max(started) >= horizon:  # type: ignore[operator]
        return "its task instance is gone and its last batch started less than the retention ago"
    return None
