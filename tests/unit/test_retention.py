"""Which send guards prune keeps, and the command line's arguments (claims: test_claim_store.py).

The whole command runs against a real metadata database in tests/dags/test_records_retention.py; here,
every task-instance state against the decision, without a database.
"""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

import pendulum
import pytest

from airflow_provider_sms.__main__ import build_parser
from airflow_provider_sms.operators._retention import ENDED_STATES, PruneReport, _guard_kept

NOW = pendulum.datetime(2030, 7, 1, tz="UTC")
HORIZON = NOW.subtract(days=30)


def guard(started: pendulum.DateTime | None = None) -> dict[str, object]:
    batches = {"0": {"state": "sent", "started": started.isoformat()}} if started else {}
    return {"dag_id": "d", "task_id": "send", "run_id": "r", "map_index": -1, "batches": batches}


def task_instance(state: str | None, ended: dt.datetime | None):
    return lambda identity: SimpleNamespace(state=state, end_date=ended)


@pytest.mark.parametrize(
    "state", ["queued", "running", "up_for_retry", "up_for_reschedule", "deferred", "scheduled", None]
)
def test_a_guard_whose_task_may_still_run_is_kept_however_old(state):
    reason = _guard_kept(guard(), HORIZON, task_instance(state, NOW.subtract(days=400)))
    assert reason is not None
    assert "may still send or retry" in reason


@pytest.mark.parametrize("state", sorted(ENDED_STATES))
def test_a_guard_is_deleted_once_its_task_ended_longer_ago_than_the_retention(state):
    assert _guard_kept(guard(), HORIZON, task_instance(state, NOW.subtract(days=31))) is None
    assert _guard_kept(guard(), HORIZON, task_instance(state, NOW.subtract(days=29))) is not None


def test_a_guard_whose_task_instance_is_gone_goes_by_its_last_batch():
    def missing(identity):
        return None

    assert _guard_kept(guard(NOW.subtract(days=40)), HORIZON, missing) is None
    assert _guard_kept(guard(NOW.subtract(days=2)), HORIZON, missing) is not None
    assert _guard_kept(guard(), HORIZON, missing) is None  # nothing recorded, nothing to keep


def test_the_summary_counts_guards_claims_and_alert_folds_apart():
    report = PruneReport(
        deleted=["sms_send_guard:a"], kept={"x": "y"}, claims=2, claimed_numbers=7, alert_folds=3
    )
    assert report.summary(dry_run=True) == (
        "Would delete 1 send guard(s), 2 claim(s) (7 claimed number(s)) and 3 alert fold(s); kept 1 "
        "guard(s), 0 unreadable (kept, to be looked at)"
    )


@pytest.mark.parametrize(("text", "days"), [("30d", 30), ("12h", 0.5), (" 1.5d ", 1.5)])
def test_older_than_takes_days_or_hours(text, days):
    arguments = build_parser().parse_args(["prune", "--older-than", text])
    assert arguments.older_than == dt.timedelta(days=days)


def test_a_bad_duration_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["prune", "--older-than", "a month"])
    assert info.value.code == 2
    assert "'a month': give a number of days or hours, e.g. 30d or 12h" in capsys.readouterr().err
