"""Campaign records on real Airflow: a send task's XCom record reaches the campaigns table.

``airflow dags test`` runs send tasks against the sandbox (a campaign sent, one whose answer cannot be
trusted); the indexer then runs in this process, on the same metadata database, as it runs in the API
server (the connection readable by it, as the API server reads it), and copies the records: the tickets
are the sandbox's campaigns, nothing is copied twice, and a record stays when Airflow clears the task's
XComs. Another DAG's plain task that pushes a record of the same connection is left out.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import pytest
from sqlalchemy import select

from airflow_provider_sms._compat import airflow_3_1_or_later
from airflow_provider_sms.campaigns.indexer import index_once
from airflow_provider_sms.campaigns.tables import campaign_table, campaign_ticket_table
from tests.conftest import latest_run

if TYPE_CHECKING:
    from tests.metrics_recorder import MetricsRecorder

pytestmark = [pytest.mark.integration, pytest.mark.dags]

DAGS = Path(__file__).parent
REMINDER = DAGS / "campaign_dags" / "sms_daily_reminder.py"
RETRIES = DAGS / "fault_dags" / "sms_send_with_retries.py"
FORGED = DAGS / "campaign_dags" / "sms_forged_record.py"
PLUGIN_PAGES = airflow_3_1_or_later()


def campaigns_of(dag_id: str, run_id: str) -> list[Any]:
    from airflow.utils.session import create_session

    with create_session(scoped=False) as session:
        rows = session.execute(
            select(campaign_table).where(campaign_table.c.dag_id == dag_id, campaign_table.c.run_id == run_id)
        ).all()
        tickets = {
            row.id: sorted(
                session.scalars(
                    select(campaign_ticket_table.c.campaign_id).where(
                        campaign_ticket_table.c.campaign_row == row.id
                    )
                )
            )
            for row in rows
        }
    return [(row, tickets[row.id]) for row in rows]


def test_sent_and_maybe_sent_campaigns_are_indexed_once_and_outlive_their_xcom(
    sms_sandbox: Any,
    run_dag_test: Any,
    airflow_home: Path,
    metadata_db: Any,
    monkeypatch: pytest.MonkeyPatch,
    metrics_recorder: MetricsRecorder,
) -> None:
    env = {"AIRFLOW_CONN_SMS_DEFAULT": sms_sandbox.connection_json()}
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", env["AIRFLOW_CONN_SMS_DEFAULT"])
    run_dag_test(REMINDER, "sms_daily_reminder", env, logical_date="2031-03-03T08:00:00+00:00")
    sms_sandbox.inspect.set_faults(maybe_sent=1, endpoints=["/send"])
    run_dag_test(RETRIES, "sms_send_with_retries", env)
    reminder_run = latest_run(airflow_home, "sms_daily_reminder")
    retries_run = latest_run(airflow_home, "sms_send_with_retries")

    # The first look may page through other tests' records; it ends when nothing is left to copy.
    written = 0
    while copied := index_once():
        written += copied

    # Each look counts what it committed (these two campaigns, and other tests' not copied yet).
    assert metrics_recorder.total("indexer.copied") == written >= 2
    ((sent, tickets),) = campaigns_of("sms_daily_reminder", reminder_run)
    (created,) = [c for c in sms_sandbox.inspect.campaigns() if "Reminder" in c["text"]]
    assert (sent.task_id, sent.map_index, sent.outcome, sent.conn_id) == ("send", -1, "sent", "sms_default")
    assert tickets == [int(created["ticket"])]
    assert sent.record["tickets"] == tickets
    assert sent.record["sent"] == sent.sent == 3
    assert sent.record["delivery_at"].startswith("2031-03-04T10:00:00")

    # The "SMS campaign" extra link, pushed by the worker as the task ended: the task instance's campaigns
    # on the page inside Airflow's UI (Airflow 3.1 and later; none on 3.0).
    with sqlite3.connect(airflow_home / "airflow.db") as db:
        (link,) = db.execute(
            "SELECT value FROM xcom WHERE key = '_link_SmsCampaignLink' AND dag_id = ? AND run_id = ? "
            "AND task_id = 'send'",
            ("sms_daily_reminder", reminder_run),
        ).fetchone()
    query = urlencode(
        {"dag_id": "sms_daily_reminder", "run_id": reminder_run, "task_id": "send", "map_index": -1}
    )
    # [api] base_url is not set here: the link is a path on Airflow's UI.
    expected = f"/plugin/sms-campaigns#/task?{query}" if PLUGIN_PAGES else ""
    assert json.loads(link) == expected

    ((maybe, maybe_tickets),) = campaigns_of("sms_send_with_retries", retries_run)
    assert (maybe.outcome, maybe_tickets, maybe.record["unknown_batches"]) == ("maybe_sent", [], [1])

    # Nothing new: nothing written, nothing counted. Airflow clears the XComs (a cleared task): the
    # campaigns stay.
    assert index_once() == 0
    assert metrics_recorder.total("indexer.copied") == written
    with sqlite3.connect(airflow_home / "airflow.db") as db:
        db.execute(
            "DELETE FROM xcom WHERE key = 'sms_campaign' AND run_id IN (?, ?)", (reminder_run, retries_run)
        )
    assert index_once() == 0
    assert [row.id for row, _ in campaigns_of("sms_daily_reminder", reminder_run)] == [sent.id]


def test_another_dags_task_cannot_make_the_page_show_a_campaign_of_a_connection_it_does_not_hold(
    sms_sandbox: Any, run_dag_test: Any, airflow_home: Path, metadata_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_provider_sms.campaigns import indexer

    env = {"AIRFLOW_CONN_SMS_DEFAULT": sms_sandbox.connection_json()}
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", env["AIRFLOW_CONN_SMS_DEFAULT"])
    run_dag_test(REMINDER, "sms_daily_reminder", env, logical_date="2031-03-05T08:00:00+00:00")
    (victim,) = [c for c in sms_sandbox.inspect.campaigns() if "Reminder" in c["text"]]
    # The forger read the victim's ticket (e.g. from the victim's XCom): a record naming it, signed with a
    # key it made up.
    run_dag_test(FORGED, "sms_forged_record", env, args=["-c", json.dumps({"ticket": int(victim["ticket"])})])
    forged_run = latest_run(airflow_home, "sms_forged_record")
    left_out = indexer.LEFT_OUT.counts[indexer.UNSIGNED]

    while index_once():
        pass

    assert campaigns_of("sms_forged_record", forged_run) == []
    assert indexer.LEFT_OUT.counts[indexer.UNSIGNED] == left_out + 1
    (owned,) = [
        row
        for row, tickets in campaigns_of("sms_daily_reminder", latest_run(airflow_home, "sms_daily_reminder"))
    ]
    assert owned.conn_id == "sms_default"
