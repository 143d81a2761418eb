"""Nothing that reached nobody is reported as sent, on real Airflow; a refusal is one message in the log;
an alert is never lost silently.

``airflow dags test`` runs ``campaign_dags/sms_reached_nobody.py`` against the sandbox, whose blacklist
filters every number the DAG gives: a notifier's failed callback at error level (never "sent"), a send
that fails without retry once its result and record are pushed, the same send with
``on_nothing_sent="warn"``; and two refusals before or at the first request (a bad input, a refused
token with a notifier on the same connection), whose tracebacks hold no frame of the provider but the
one that raised.

Against the sandbox's anti-flood (lowered to 2 SMS per number per hour), with Airflow's metrics sent to
a StatsD server on 127.0.0.1: a burst of failures with two people on call is one SMS, and the alert
after the fold interval carries the others (none filtered); alerts to numbers the anti-flood already
filters go to their fallbacks (a notifier writing a file, an SmsNotifier on another connection), and the
log says so.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from airflow_provider_sms._compat import airflow_3_1_or_later
from tests.metrics_receivers import StatsdServer

if TYPE_CHECKING:
    from collections.abc import Iterator

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


def run(sandbox: Any, run_dag_test: Any, dag_id: str, **env: str) -> str:
    """Run ``dag_id`` with ``sms_default`` and ``sms_backup`` on the sandbox and ``sms_wrong_token``
    refused by it; ``env`` adds variables."""
    wrong = json.loads(sandbox.connection_json())
    wrong["password"] = WRONG_TOKEN
    env = {
        "AIRFLOW_CONN_SMS_DEFAULT": sandbox.connection_json(),
        "AIRFLOW_CONN_SMS_BACKUP": sandbox.connection_json(),
        "AIRFLOW_CONN_SMS_WRONG_TOKEN": json.dumps(wrong),
        **env,
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
        r"blacklist .* give the notifier a second recipient .* give the notifier a fallback",
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


# The sandbox's anti-flood for these tests: a number sent 2 SMS within the hour is filtered.
FLOOD_LIMIT = 2
ON_CALL = ["33612000601", "33612000602"]
ON_CALL_B = ["33612000603", "33612000604"]
BACKUP = "33612000699"


@pytest.fixture
def flood_limit(sms_sandbox: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The sandbox, whose anti-flood filters a number's third SMS within the hour."""
    monkeypatch.setattr(sms_sandbox.state.config, "flood_limit", FLOOD_LIMIT)
    return sms_sandbox


@pytest.fixture
def statsd() -> Iterator[StatsdServer]:
    server = StatsdServer()
    yield server
    server.close()


def counted(statsd: StatsdServer, name: str) -> float:
    """A counter of the provider's, under its plain-StatsD name (Airflow's prefix ``airflow.``)."""
    return statsd.total(f"airflow.sms.{name}")


def test_a_burst_of_failures_is_one_sms_and_the_next_after_the_interval_carries_the_rest(
    flood_limit: Any, run_dag_test: Any, airflow_home: Path, statsd: StatsdServer
) -> None:
    output = run(flood_limit, run_dag_test, "sms_alert_burst", **statsd.env())
    text = plain(output)

    states = task_instances(airflow_home, "sms_alert_burst")
    assert {task: state for task, (state, _) in states.items()} == {
        **{f"burst_{index}": "failed" for index in range(1, 5)},
        "wait_past_the_fold_interval": "success",
        "after_the_interval": "failed",
    }, output[-6000:]
    campaigns = flood_limit.inspect.campaigns()
    # Five failures, two SMS: without folding the anti-flood would have filtered the third to the fifth.
    assert campaigns[0]["text"] == "burst_1 failed"
    assert re.fullmatch(
        r"after_the_interval failed \(\+3 more alerts since \d\d:\d\d UTC: burst_2 failed; burst_3 failed; "
        r"burst_4 failed\)",
        campaigns[1]["text"],
    ), campaigns
    assert len(campaigns) == 2
    # Both numbers got both SMS: none filtered.
    assert [sorted(c["sent_to"]) for c in campaigns] == [ON_CALL, ON_CALL]
    held = re.findall(
        INFO
        + r" SMS alert held \(fold_interval 20 seconds\): its numbers got an alert at \d\d:\d\d UTC; this "
        r"one goes out, folded into it, with the next alert to them after \d\d:\d\d UTC\.",
        text,
    )
    assert len(held) == 3, text[-6000:]
    assert "carrying 3 held alerts" in text
    assert "reached nobody" not in text
    assert (counted(statsd, "notifier.sent.sms_default"), counted(statsd, "notifier.folded.sms_default")) == (
        2,
        3,
    )
    for number in ON_CALL:
        assert number not in output


def test_alerts_the_anti_flood_filters_go_to_their_fallbacks_and_the_log_says_so(
    flood_limit: Any,
    run_dag_test: Any,
    airflow_home: Path,
    statsd: StatsdServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow_provider_sms.hooks.sms import SmsHook

    # The people on call already got their 2 SMS of the hour (a campaign, other alerts).
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", flood_limit.connection_json())
    for _ in range(FLOOD_LIMIT):
        SmsHook().send({"text": "earlier alert", "pushtype": "alert"}, [*ON_CALL, *ON_CALL_B])
    inbox = tmp_path / "fallback-inbox.txt"

    output = run(
        flood_limit, run_dag_test, "sms_alert_fallback", SMS_FALLBACK_INBOX=str(inbox), **statsd.env()
    )
    text = plain(output)

    assert {
        task: state for task, (state, _) in task_instances(airflow_home, "sms_alert_fallback").items()
    } == {
        "page_by_file": "failed",
        "page_by_backup": "failed",
    }, output[-6000:]
    # The notifier writing a file got the alert, its templates rendered with the callback's context.
    (line,) = inbox.read_text().splitlines()
    assert re.fullmatch(
        r"page_by_file: page_by_file failed \[flood\] 0 of 2 numbers sent, 2 filtered \(flood 2\), "
        r"ticket \d+",
        line,
    ), line
    # One warning per alert says what happened to it; the callback did not fail.
    for task_id, fallback in (("page_by_file", "FileNotifier"), ("page_by_backup", "SmsNotifier")):
        assert re.search(
            WARNING + r" The SMS notification reached nobody \(0 of 2 numbers sent, 2 filtered \(flood 2\), "
            rf"ticket \d+\); handed to the fallback {fallback}: sent\. The anti-flood counts every SMS to a "
            r"number, from any DAG: this notifier already folds the alerts within 15 minutes",
            text,
        ), (task_id, text[-6000:])
    assert "second recipient" not in text
    assert "Failed to send notification" not in text
    # The other SMS connection's notifier reached the backup number.
    campaigns = flood_limit.inspect.campaigns()
    backup = [c for c in campaigns if c["sent_to"] == [BACKUP]]
    assert [c["text"] for c in backup] == ["page_by_backup failed (backup: flood)"]
    assert counted(statsd, "notifier.not_delivered.sms_default.flood") == 2
    assert counted(statsd, "notifier.fallback.sms_default.sent") == 2
    assert counted(statsd, "notifier.sent.sms_backup") == 1
    # Each SMS's own figures, as every send's: two alerts, two numbers each, all flooded.
    assert counted(statsd, "send.filtered.sms_default.flood") == 4
