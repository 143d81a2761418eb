"""Nothing that reached nobody is reported as sent, on real Airflow; a refusal is one message in the log.

``airflow dags test`` runs ``campaign_dags/sms_reached_nobody.py`` against the sandbox, whose blacklist
filters every number the DAG gives: a notifier's failed callback at error level (never "sent"), a send
that fails without retry once its result and record are pushed, the same send with
``on_nothing_sent="warn"``; and two refusals before or at the first request (a bad input, a refused
token with a notifier on the same connection), whose tracebacks hold no frame of the provider but the
one that raised.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_sms._compat import airflow_3_1_or_later

pytestmark = [pytest.mark.integration, pytest.mark.dags]

DAG_FILE = Path(__file__).parent / "campaign_dags" / "sms_reached_nobody.py"
WRONG_TOKEN = "not-the-sandbox-token"


def task_instances(airflow_home: Path, dag_id: str) -> dict[str, tuple[str, int]]:
    """Each task's state and try number."""
    with sqlite3.connect(airflow_home / "airflow.db") as db:
        rows = db.execute(
            "SELECT task_id, state, try_number FROM task_instance WHERE dag_id = ?", (dag_id,)
        ).fetchall()
    return {task_id: (state, tries) for task_id, state, tries in rows}


def xcom(airflow_home: Path, task_id: str, key: str) -> Any:
    """The XCom ``key`` of ``task_id`` in the run of ``sms_reached_nobody``, or None."""
    with sqlite3.connect(airflow_home / "airflow.db") as db:
        row = db.execute(
            "SELECT value FROM xcom WHERE dag_id = 'sms_reached_nobody' AND task_id = ? AND key = ?",
            (task_id, key),
        ).fetchone()
    return None if row is None else json.loads(row[0])


# A log line's level as Airflow 3.3 (structlog: "[error    ]") and Airflow 3.0 ("ERROR -") write it.
ERROR, WARNING, INFO = (rf"(\[{level}\s*\]|{level.upper()} -)" for level in ("error", "warning", "info"))


def provider_frames(output: str) -> list[str]:
    """The traceback lines that name a file of the provider: Python's (``File "..."``) and rich's
    (``.../airflow_provider_sms/x.py:12 in f``, Airflow 3.0)."""
    frame = r'File ".*airflow_provider_sms/|airflow_provider_sms/\S+\.py:\d+ in '
    lines = re.sub(r"\x1b\[[0-9;]*m", "", output).splitlines()
    return [line for line in lines if re.search(frame, line)]


def plain(output: str) -> str:
    """``output`` on one line, without the colours and boxes Airflow 3.0's rich tracebacks add."""
    return " ".join(re.sub(r"[\u2500-\u257f]", " ", re.sub(r"\x1b\[[0-9;]*m", "", output)).split())


def run(sandbox: Any, run_dag_test: Any, dag_id: str) -> str:
    """Run ``dag_id`` with ``sms_default`` on the sandbox and ``sms_wrong_token`` refused by it."""
    wrong = json.loads(sandbox.connection_json())
    wrong["password"] = WRONG_TOKEN
    env = {
        "AIRFLOW_CONN_SMS_DEFAULT": sandbox.connection_json(),
        "AIRFLOW_CONN_SMS_WRONG_TOKEN": json.dumps(wrong),
    }
    process = run_dag_test(DAG_FILE, dag_id, env)
    return str(process.stdout + process.stderr)


def test_nothing_that_reached_nobody_is_reported_as_sent(
    sms_sandbox: Any, run_dag_test: Any, airflow_home: Path
) -> None:
    output = run(sms_sandbox, run_dag_test, "sms_reached_nobody")
    text = plain(output)

    assert task_instances(airflow_home, "sms_reached_nobody") == {
        "notify_nobody": ("success", 1),  # Airflow does not fail a task for its callback
        "send_to_nobody": ("failed", 1),  # retries=2, none taken
        "send_to_nobody_warned": ("success", 1),
    }, output[-6000:]
    # The notifier: an error, never "sent"; its one campaign reached nobody.
    assert "SMS notification sent" not in text
    assert re.search(
        ERROR + r" Failed to send notification( \(sync\))?: The SMS notification reached nobody: 0 of 1 "
        r"numbers sent, 1 filtered \(blacklisted 1\), ticket \d+\. blacklisted: numbers on the account's "
        r"blacklist .* give the notifier a second recipient",
        text,
    ), text[-6000:]
    # Airflow 3.1 and later also say that the callback failed (3.0 logs the notifier's error alone).
    assert ("Failed to run task callback" in text) == airflow_3_1_or_later()
    campaigns = sms_sandbox.inspect.campaigns()
    assert [c["sent_to"] for c in campaigns if c["text"] == "notify_nobody done"] == [[]]
    # The send: failed without retry once its two batches were posted, its result and record pushed.
    assert re.search(
        r"The campaign reached nobody: 0 of 2 numbers sent, 2 filtered \(blacklisted 2\), tickets \d+, \d+\. "
        r".*on_nothing_sent='warn' lets such a send succeed\. Not retried",
        text,
    ), text[-6000:]
    assert re.search(INFO + r" Sent: ", text) is None
    assert "Posted, sent to nobody: cost 0 credits" in text
    sent = [c for c in campaigns if c["text"] == "Your parcel is on its way"]
    assert [c["sent_to"] for c in sent] == [[], []]
    result = xcom(airflow_home, "send_to_nobody", "return_value")
    assert (result["sent"], result["blacklisted"], result["batches"]) == (0, 2, 2)
    assert result["tickets"] == [c["ticket"] for c in sent]
    assert xcom(airflow_home, "send_to_nobody", "sms_campaign") is not None
    # The same send with on_nothing_sent="warn" (from params): green, with the warning.
    assert re.search(
        WARNING + r" The campaign reached nobody: 0 of 2 numbers sent.*The task succeeds: "
        r"on_nothing_sent='warn'\.",
        text,
    ), text[-6000:]
    assert xcom(airflow_home, "send_to_nobody_warned", "return_value")["sent"] == 0


def test_a_refusal_is_its_message_and_one_frame_of_the_provider(
    sms_sandbox: Any, run_dag_test: Any, airflow_home: Path
) -> None:
    output = run(sms_sandbox, run_dag_test, "sms_refused")

    assert task_instances(airflow_home, "sms_refused") == {
        "bad_input": ("failed", 1),
        "wrong_token": ("failed", 1),
    }, output[-6000:]
    text = plain(output)
    assert "Invalid input (not retried): on_nothing_sent='maybe': use 'fail' or 'warn'" in text
    assert "password of the Airflow connection 'sms_wrong_token'" in text
    assert sms_sandbox.inspect.campaigns() == []
    assert "During handling of the above exception" not in output
    # The bad input's refusal, the wrong token's, and the wrong token's notifier's: one frame each.
    assert len(provider_frames(output)) == 3, output
