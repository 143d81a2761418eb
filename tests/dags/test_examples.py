"""The example DAGs (dags_examples/): they import cleanly, and each runs on real Airflow against the sandbox.

Each run is ``airflow dags test`` in a subprocess on the session's throwaway AIRFLOW_HOME; the tests
check what the sandbox recorded (its inspection API) and the run's XComs, not only the exit code.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_sms._compat import airflow_3_1_or_later
from airflow_provider_sms.delay import format_delay
from airflow_provider_sms.send_window import next_allowed
from dags_examples.demo import DagRunRecord, read_run
from tests.conftest import airflow_env, plain_output

pytestmark = [pytest.mark.integration, pytest.mark.dags]

EXAMPLES = Path(__file__).resolve().parents[2] / "dags_examples"
DAG_IDS = {
    "sms_first_campaign",
    "sms_weekly_campaign",
    "sms_triggered_by_data",
    "sms_failure_alerts",
    "sms_npai_hygiene",
    "sms_campaign_delivery",
    "sms_on_delivery_reports",
    "sms_approved_campaign",
    "my_first_sms",
}
# The sandbox's seeded lists 1 and 2, less the blacklisted number and the duplicate of list 1.
WEEKLY_SENT_TO = {
    *(f"336100000{n:02d}" for n in range(1, 6)),
    "33700000001",
    "33620000001",
    "33620000002",
}
DAGBAG_SCRIPT = textwrap.dedent(
    """
    import json, sys, warnings
    warnings.simplefilter("always")
    with warnings.catch_warnings(record=True) as caught:
        try:
            from airflow.dag_processing.dagbag import DagBag
        except ImportError:  # Airflow < 3.2
            from airflow.models.dagbag import DagBag
        # Airflow 3 has no include_examples: example DAGs come from a bundle, not from a DagBag.
        bag = DagBag(dag_folder=sys.argv[1])
    # Airflow < 3.2 with the FAB provider (the lowest-version venv): the providers manager imports
    # flask_appbuilder for other providers' connection-form widgets while a DAG file is parsed; the
    # warnings of that Flask stack are not about these DAGs.
    def ours(where):
        return not any(part in where for part in ("/flask_appbuilder/", "/flask_sqlalchemy/"))
    print(json.dumps({
        "import_errors": {str(k): str(v) for k, v in bag.import_errors.items()},
        "dags": {dag_id: dag.doc_md for dag_id, dag in bag.dags.items()},
        "warnings": [
            f"{w.filename}:{w.lineno}: {w.category.__name__}: {w.message}" for w in caught if ours(w.filename)
        ],
        "captured_warnings": {
            str(k): kept for k, v in bag.captured_warnings.items() if (kept := [w for w in v if ours(w)])
        },
    }))
    """
)


def run_example(
    run_dag_test: Any,
    airflow_home: Path,
    dag_id: str,
    env: dict[str, str],
    conf: dict[str, Any] | None = None,
) -> tuple[subprocess.CompletedProcess[str], DagRunRecord]:
    """Run one example DAG; return the process and what the metadata database recorded of the run."""
    process = run_dag_test(
        EXAMPLES / f"{dag_id}.py", dag_id, env, args=["-c", json.dumps(conf)] if conf else ()
    )
    record = read_run(airflow_home, dag_id)
    assert record is not None, (process.stdout + process.stderr)[-6000:]
    return process, record


def assert_succeeded(process: subprocess.CompletedProcess[str]) -> None:
    """The run succeeded (run_dag_test has already had its output checked by the token canary)."""
    output = process.stdout + process.stderr
    assert process.returncode == 0, output[-6000:]


def load_dagbag(airflow_home: Path, folder: Path) -> dict[str, Any]:
    """What Airflow's DagBag makes of ``folder`` in a fresh interpreter: DAGs, import errors, warnings."""
    process = subprocess.run(
        [sys.executable, "-c", DAGBAG_SCRIPT, str(folder)],
        env=airflow_env(airflow_home, folder),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert process.returncode == 0, process.stderr[-4000:]
    bag: dict[str, Any] = json.loads(process.stdout.strip().splitlines()[-1])
    return bag


def test_every_example_dag_imports_without_errors_or_warnings(airflow_home: Path) -> None:
    bag = load_dagbag(airflow_home, EXAMPLES)
    assert bag["import_errors"] == {}
    assert set(bag["dags"]) == DAG_IDS
    assert all(doc for doc in bag["dags"].values()), "every example DAG documents itself"
    assert bag["warnings"] == []
    assert bag["captured_warnings"] == {}


def test_weekly_campaign_sends_to_the_lists_with_the_computed_delay_and_reports_npai(
    sms_sandbox: Any, run_dag_test: Any, airflow_home: Path
) -> None:
    process, run = run_example(
        run_dag_test,
        airflow_home,
        "sms_weekly_campaign",
        {"AIRFLOW_CONN_SMS_DEFAULT": sms_sandbox.connection_json("json")},
    )

    assert_succeeded(process)
    assert set(run.states.values()) == {"success"}
    (campaign,) = sms_sandbox.inspect.campaigns()
    send = run.values["send"]
    assert campaign["ticket"] == send["ticket"]
    assert campaign["endpoint"] == "/send/lists"
    assert campaign["lists"] == [1, 2]
    assert campaign["pushtype"] == "marketing"
    assert set(campaign["sent_to"]) == WEEKLY_SENT_TO
    assert (send["sent"], send["blacklisted"], send["duplicated"]) == (8, 1, 1)
    assert send["gate"]["passed"] is True
    assert send["simulation"]["cost"] == campaign["cost"] == 8
    # Two hours after the data interval's end, in Paris time, moved into the marketing window if needed.
    assert run.data_interval_end is not None
    expected_delay = format_delay(next_allowed(run.data_interval_end.add(hours=2)))
    assert campaign["delay"] == send["delay"] == run.values["simulate"]["delay"] == expected_delay
    # The deferrable NPAI sensor found the unreachable number of this very campaign.
    npai = run.values["wait_for_npai"]
    assert npai["count"] == 1
    assert npai["entries"][0]["campaign_id"] == int(campaign["ticket"])
    assert run.values["report_npai"] == ["33700000001"]


def test_first_campaign_chains_simulate_send_and_the_npai_sensor_through_the_ticket(
    sms_sandbox: Any, run_dag_test: Any, airflow_home: Path
) -> None:
    process, run = run_example(
        run_dag_test,
        airflow_home,
        "sms_first_campaign",
        {"AIRFLOW_CONN_SMS_DEFAULT": sms_sandbox.connection_json("json")},
    )

    assert_succeeded(process)
    assert run.states == {
        "simulate": "success",
        "send": "success",
        "unreachable": "success",
        "clean_up": "success",
    }
    (campaign,) = sms_sandbox.inspect.campaigns()
    send = run.values["send"]
    assert campaign["ticket"] == send["ticket"]
    # The CSV's "phone" column, normalized, each with the gsmsmsid of its row.
    assert campaign["recipients"] == [
        {"value": "33610000001", "gsmsmsid": "c-1001"},
        {"value": "33610000002", "gsmsmsid": "c-1002"},
        {"value": "33610000003", "gsmsmsid": "c-1003"},
        {"value": "33700000007", "gsmsmsid": "c-1004"},
    ]
    # Tomorrow 10:00 in Paris, from when the run was due (moved to the next opening if closed then).
    tomorrow_ten = run.run_after.in_tz("Europe/Paris").add(days=1).at(10)
    assert campaign["delay"] == send["delay"] == format_delay(next_allowed(tomorrow_ten))
    assert ("send_window" in send) == (next_allowed(tomorrow_ten) != tomorrow_ten)
    # The ticket under its own XCom key fed the sensor: it found this campaign's unreachable number.
    with sqlite3.connect(airflow_home / "airflow.db") as db:
        (ticket_xcom,) = db.execute(
            "SELECT value FROM xcom WHERE dag_id = 'sms_first_campaign' AND run_id = ? AND task_id = 'send' "
            "AND key = 'ticket'",
            (run.run_id,),
        ).fetchone()
    assert json.loads(ticket_xcom) == campaign["ticket"]
    npai = run.values["unreachable"]
    assert [(e["destination"], e["campaign_id"]) for e in npai["entries"]] == [
        ("33700000007", int(send["ticket"]))
    ]
    assert run.values["clean_up"] == ["33700000007"]


def test_weekly_campaign_with_a_cost_cap_below_the_cost_skips_the_send(
    sms_sandbox: Any, run_dag_test: Any, airflow_home: Path
) -> None:
    credits_before = sms_sandbox.inspect.credits()

    process, run = run_example(
        run_dag_test,
        airflow_home,
        "sms_weekly_campaign",
        {"AIRFLOW_CONN_SMS_DEFAULT": sms_sandbox.connection_json("json")},
        conf={"max_cost": 5, "on_cost_exceeded": "skip"},
    )

    assert_succeeded(process)
    assert run.values["simulate"]["cost"] == 8
    assert run.states["send"] == "skipped"
    assert run.states["wait_for_npai"] == run.states["report_npai"] == "skipped"
    assert "cost 8 credits is over max_cost 5" in process.stdout + process.stderr
    assert sms_sandbox.inspect.campaigns() == []
    assert sms_sandbox.inspect.credits() == credits_before


def test_approved_campaign_asks_only_where_airflow_has_human_in_the_loop() -> None:
    from dags_examples import sms_approved_campaign

    # On Airflow 3.0 "ask" is refused when the file is parsed: the example fails instead there.
    assert ("ask" if airflow_3_1_or_later() else "fail") == sms_approved_campaign.ON_COST_EXCEEDED


def test_approved_campaign_within_its_cap_is_sent_unasked(
    sms_sandbox: Any, run_dag_test: Any, airflow_home: Path
) -> None:
    process, run = run_example(
        run_dag_test,
        airflow_home,
        "sms_approved_campaign",
        {"AIRFLOW_CONN_SMS_DEFAULT": sms_sandbox.connection_json("json")},
    )

    assert_succeeded(process)
    assert run.states == {"send": "success"}
    (campaign,) = sms_sandbox.inspect.campaigns()  # no SMS to the approvers: nothing was asked
    assert campaign["lists"] == [1, 2]
    assert set(campaign["sent_to"]) == WEEKLY_SENT_TO
    send = run.values["send"]
    assert send["gate"]["passed"] is True
    assert "approval" not in send["gate"]


@pytest.mark.skipif(airflow_3_1_or_later(), reason="on Airflow 3.1+ it asks (tests/dags/test_approval.py)")
def test_approved_campaign_over_its_cap_fails_on_airflow_3_0(
    sms_sandbox: Any, run_dag_test: Any, airflow_home: Path
) -> None:
    process, run = run_example(
        run_dag_test,
        airflow_home,
        "sms_approved_campaign",
        {"AIRFLOW_CONN_SMS_DEFAULT": sms_sandbox.connection_json("json")},
        conf={"max_cost": 5},
    )

    output = process.stdout + process.stderr
    assert process.returncode == 1, output[-6000:]
    assert run.states == {"send": "failed"}
    # Airflow 3.0 prints the error through rich, which wraps and colours it.
    assert "cost 8 credits is over max_cost 5" in plain_output(process)
    assert sms_sandbox.inspect.campaigns() == []


def test_triggered_by_data_sends_the_csv_numbers_in_batches(
    sms_sandbox: Any, run_dag_test: Any, airflow_home: Path, tmp_path: Path
) -> None:
    numbers = ["33612340001", "+33 6 12 34 00 02", "33612340003", "33612340001", "33612340004", "33612340005"]
    csv_file = tmp_path / "recipients.csv"
    csv_file.write_text("customer,phone\n" + "".join(f"c{i},{n}\n" for i, n in enumerate(numbers)))

    process, run = run_example(
        run_dag_test,
        airflow_home,
        "sms_triggered_by_data",
        {
            "AIRFLOW_CONN_SMS_DEFAULT": sms_sandbox.connection_json("json"),
            "SMS_RECIPIENTS_CSV": str(csv_file),
            "SMS_BATCH_SIZE": "2",
        },
    )

    assert_succeeded(process)
    expected = {f"3361234000{n}" for n in range(1, 6)}
    campaigns = sms_sandbox.inspect.campaigns()
    # 5 distinct numbers (one duplicate removed, "+33 6..." normalized) in batches of 2.
    assert [len(c["recipients"]) for c in campaigns] == [2, 2, 1]
    assert {r["value"] for c in campaigns for r in c["recipients"]} == expected
    assert all(c["delay"] is None and c["pushtype"] == "alert" for c in campaigns)
    send = run.values["send"]
    assert send["tickets"] == [c["ticket"] for c in campaigns]
    assert (send["batches"], send["sent"], send["duplicated"], send["gate"]["passed"]) == (3, 5, 1, True)


def test_failure_alerts_sends_nothing_when_the_run_succeeds(
    sms_sandbox: Any, run_dag_test: Any, airflow_home: Path
) -> None:
    process, run = run_example(
        run_dag_test,
        airflow_home,
        "sms_failure_alerts",
        {"AIRFLOW_CONN_SMS_DEFAULT": sms_sandbox.connection_json("json")},
    )

    assert_succeeded(process)
    assert run.values["load"] == 42
    assert sms_sandbox.inspect.campaigns() == []


def test_failure_alerts_sends_the_on_call_sms_when_a_task_fails(
    sms_sandbox: Any, run_dag_test: Any, airflow_home: Path
) -> None:
    process, run = run_example(
        run_dag_test,
        airflow_home,
        "sms_failure_alerts",
        {"AIRFLOW_CONN_SMS_DEFAULT": sms_sandbox.connection_json("json")},
        conf={"fail": True},
    )

    output = process.stdout + process.stderr
    assert process.returncode == 1, output[-6000:]  # the run fails, as asked
    assert run.states == {"extract": "success", "load": "failed"}
    (campaign,) = sms_sandbox.inspect.campaigns()
    assert campaign["pushtype"] == "alert"
    assert [r["value"] for r in campaign["recipients"]] == ["33612345678", "33612345679"]
    assert campaign["text"] == f"[Airflow] sms_failure_alerts.load failed (run {run.run_id}, try 1)"


def test_npai_hygiene_reads_the_list_over_the_xml_connection(
    sms_sandbox: Any, run_dag_test: Any, airflow_home: Path
) -> None:
    sms_sandbox.inspect.add_npai("33612349999", campaign_id=77)  # dated now: new in the last 24 hours

    # Only the XML connection is given: the DAG must not need sms_default.
    process, run = run_example(
        run_dag_test,
        airflow_home,
        "sms_npai_hygiene",
        {"AIRFLOW_CONN_SMS_XML": sms_sandbox.connection_json("xml")},
    )

    assert_succeeded(process)
    npai = run.values["read_npai"]
    assert npai["format"] == "xml"
    expected = sms_sandbox.inspect.npai()
    assert npai["count"] == len(expected) == 3
    assert [e["destination"] for e in npai["entries"]] == [e["destination"] for e in expected]
    assert npai["new"] == ["33612349999"]


def test_the_demo_runs_the_weekly_campaign_and_prints_its_delivery_reports() -> None:
    # `make demo` as a user runs it: its own sandbox, throwaway home and delivery-report receiver.
    process = subprocess.run(
        [sys.executable, "-m", "dags_examples.demo"],
        env={name: value for name, value in os.environ.items() if not name.startswith("AIRFLOW")},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert process.returncode == 0, (process.stdout + process.stderr)[-4000:]
    # 8 numbers sent; the sandbox's statuses, number after number: 3, 3, 3, 2, 3, 12, 3, 3.
    assert (
        "Delivery reports: 6 delivered, 1 expired, 1 not delivered (8 of 8 messages have a final status)"
        in process.stdout
    )
