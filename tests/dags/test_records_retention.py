"""Pruning send guards and claims on real Airflow: ``python -m airflow_provider_sms prune``.

A real send (``airflow dags test`` against the sandbox) leaves a guard and a claim in the session's
metadata database; more records of every kind are written beside it, the task instance's state and end
are moved in the database, and the command runs as a person would run it.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pendulum
import pytest

from airflow_provider_sms.operators._send_guard import guard_key
from tests.conftest import airflow_env

pytestmark = [pytest.mark.integration, pytest.mark.dags]

DAG_FILE = Path(__file__).parent / "fault_dags" / "sms_send_with_retries.py"
DAG_ID = "sms_send_with_retries"


def variables(home: Path) -> dict[str, str]:
    with sqlite3.connect(home / "airflow.db") as db:
        rows = db.execute("SELECT key, val FROM variable WHERE key LIKE 'sms_send_guard:%'").fetchall()
    return dict(rows)


def claims(home: Path) -> dict[str, int]:
    """The claims by run id, with how many numbers each holds."""
    with sqlite3.connect(home / "airflow.db") as db:
        rows = db.execute(
            "SELECT c.run_id, (SELECT coalesce(sum(n.numbers), 0) FROM sms_claim_chunk n "
            "WHERE n.claim_id = c.id) FROM sms_claim c"
        ).fetchall()
    return dict(rows)


def put_claim(home: Path, run_id: str, delivery: pendulum.DateTime, numbers: int) -> None:
    """A claim of a send to numbers for ``delivery``, holding ``numbers`` numbers."""
    with sqlite3.connect(home / "airflow.db") as db:
        cursor = db.execute(
            "INSERT INTO sms_claim (conn_id, scope, per_number, key_id, dag_id, task_id, run_id, map_index, "
            "delivery, delayed, window_seconds, forced, state, tickets, claimed_at) "
            "VALUES ('sms_default', ?, 1, 'k', 'd', 'send', ?, -1, ?, 1, 3600, 0, 'sent', '[\"1\"]', ?)",
            ("c" * 32, run_id, delivery.to_datetime_string(), delivery.to_datetime_string()),
        )
        keys = b"".join(index.to_bytes(16, "big") for index in range(numbers))
        db.execute(
            "INSERT INTO sms_claim_chunk (claim_id, chunk_start, numbers, number_keys) VALUES (?, 0, ?, ?)",
            (cursor.lastrowid, numbers, keys),
        )


def put(home: Path, key: str, value: object) -> None:
    text = value if isinstance(value, str) else json.dumps(value)
    with sqlite3.connect(home / "airflow.db") as db:
        db.execute("DELETE FROM variable WHERE key = ?", (key,))
        db.execute("INSERT INTO variable (key, val, is_encrypted) VALUES (?, ?, 0)", (key, text))


def prune(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "airflow_provider_sms", "prune", *args],
        env=airflow_env(home),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def guard(dag_id: str, run_id: str, started: pendulum.DateTime) -> dict[str, Any]:
    batch = {"state": "sending", "fingerprint": "f" * 32, "started": started.isoformat()}
    return {"dag_id": dag_id, "task_id": "send", "run_id": run_id, "map_index": -1, "batches": {"0": batch}}


def test_prune_deletes_what_is_past_its_lifetime_and_never_a_guard_that_may_still_be_needed(
    sms_sandbox: Any, run_dag_test: Any, airflow_home: Path
) -> None:
    process = run_dag_test(DAG_FILE, DAG_ID, {"AIRFLOW_CONN_SMS_DEFAULT": sms_sandbox.connection_json()})
    assert len(sms_sandbox.inspect.campaigns()) == 1, (process.stdout + process.stderr)[-4000:]
    # Values may be encrypted (Fernet): records are found by their keys. Earlier tests of the session
    # ran this DAG too: its latest run is this test's.
    with sqlite3.connect(airflow_home / "airflow.db") as db:
        (run_id,) = db.execute(
            "SELECT run_id FROM task_instance WHERE dag_id = ? ORDER BY start_date DESC LIMIT 1", (DAG_ID,)
        ).fetchone()
    real_guard = guard_key(DAG_ID, "send", run_id, -1)
    assert real_guard in variables(airflow_home)
    assert claims(airflow_home)[run_id] > 0
    now = pendulum.now("UTC")
    put(airflow_home, "sms_send_guard:gone:send:old:-1", guard("gone", "old", now.subtract(days=40)))
    put(airflow_home, "sms_send_guard:gone:send:recent:-1", guard("gone", "recent", now.subtract(days=1)))
    put(airflow_home, "sms_send_guard:gone:send:bad:-1", "{not json")
    put_claim(airflow_home, "past", now.subtract(days=2), numbers=3)
    put_claim(airflow_home, "coming", now.add(days=1), numbers=2)

    dry = prune(airflow_home, "--dry-run")
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "would delete: sms_send_guard:gone:send:old:-1" in dry.stdout
    assert "Would delete 1 send guard(s), 1 claim(s) (3 claimed number(s))" in dry.stdout
    assert "sms_send_guard:gone:send:old:-1" in variables(airflow_home)
    assert "past" in claims(airflow_home)

    done = prune(airflow_home)
    assert done.returncode == 0, done.stderr[-3000:]
    left = variables(airflow_home)
    assert "sms_send_guard:gone:send:old:-1" not in left
    # Kept: a recent guard, an unreadable one (reported), a claim still in its window with its numbers,
    # and the real task's guard (it ended just now) and claim (sent just now: in its window).
    for key in ("sms_send_guard:gone:send:recent:-1", "sms_send_guard:gone:send:bad:-1"):
        assert key in left
    assert real_guard in left
    left_claims = claims(airflow_home)
    assert "past" not in left_claims
    assert left_claims["coming"] == 2
    assert run_id in left_claims
    assert "unreadable, kept: sms_send_guard:gone:send:bad:-1" in done.stderr

    # The task instance may still retry: its guard stays, however old its end.
    with sqlite3.connect(airflow_home / "airflow.db") as db:
        db.execute(
            "UPDATE task_instance SET state = 'up_for_retry', end_date = ? "
            "WHERE dag_id = ? AND run_id = ? AND task_id = 'send'",
            (now.subtract(days=60).to_datetime_string(), DAG_ID, run_id),
        )
    assert prune(airflow_home).returncode == 0
    assert real_guard in variables(airflow_home)

    # Ended 60 days ago: its guard goes; with --older-than 90d it would have stayed.
    with sqlite3.connect(airflow_home / "airflow.db") as db:
        db.execute(
            "UPDATE task_instance SET state = 'success' WHERE dag_id = ? AND run_id = ? AND task_id = 'send'",
            (DAG_ID, run_id),
        )
    assert prune(airflow_home, "--older-than", "90d").returncode == 0
    assert real_guard in variables(airflow_home)
    assert prune(airflow_home, "--older-than", "30d").returncode == 0
    assert real_guard not in variables(airflow_home)


def test_a_bad_duration_is_one_clear_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "airflow_provider_sms", "prune", "--older-than", "a month"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "'a month': give a number of days or hours, e.g. 30d or 12h" in done.stderr
