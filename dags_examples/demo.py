"""``make demo``: run the weekly campaign DAG on real Airflow against the local sandbox, then sum it up.

Steps: start the sandbox on a free 127.0.0.1 port (a random token, no real credentials), make a
throwaway ``AIRFLOW_HOME`` (a temporary folder, removed at the end) with ``airflow db migrate``, run
``airflow dags test sms_weekly_campaign`` with ``AIRFLOW_CONN_SMS_DEFAULT`` pointing at the sandbox,
and print what happened: the cost gate's decision and figures, the ticket, sent and filtered counts,
the delay in Paris time and the NPAI numbers found, read from the run's XComs and from the sandbox's
inspection API. Exits 1 when the run failed, printing the end of Airflow's output.

The delivery reports run for real too: the provider's receiver (what the API server serves) runs in
this process on the throwaway database, the sandbox posts one report per number sent to it (a mix of
statuses; the sandbox does not wait for the delay), and the demo prints the campaign's counts by status
as the receiver's summary gives them to ``SmsDeliveryReportsSensor``.

``python -m dags_examples.demo --max-cost 5`` runs with a cap below the campaign's cost: the gate
refuses and the send is skipped (``--on-cost-exceeded fail`` makes it fail instead).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sqlite3
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pendulum

from airflow_provider_sms.models import FILTER_FIELDS, CampaignResult
from airflow_provider_sms.sandbox.server import SandboxServer

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

DAG_ID = "sms_weekly_campaign"
DAG_FILE = Path(__file__).with_name(f"{DAG_ID}.py")
AIRFLOW = str(Path(sys.executable).with_name("airflow"))
# Upper bound of each Airflow command, so that a hung run ends the demo instead of blocking it.
COMMAND_TIMEOUT = 600
OUTPUT_TAIL = 4000
# The statuses the sandbox's delivery reports carry, number after number, and how long to wait for them.
DLR_STATUSES = (3, 3, 3, 2, 3, 12)
DLR_WAIT = 30.0
DB_MANAGER = "airflow_provider_sms.db_manager.SmsProviderDBManager"


def airflow_env(home: Path, dags_folder: Path, **extra: str) -> dict[str, str]:
    """This process's environment without its AIRFLOW* settings, plus a throwaway Airflow home.

    :param home: the AIRFLOW_HOME (SQLite database, logs, config).
    :param dags_folder: the folder Airflow reads DAGs from.
    :param extra: more variables, e.g. ``AIRFLOW_CONN_SMS_DEFAULT``.
    """
    env = {name: value for name, value in os.environ.items() if not name.startswith("AIRFLOW")}
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_FOLDER=str(dags_folder),
        # The provider's tables: Airflow 3.2 and later find its DB manager by themselves.
        AIRFLOW__DATABASE__EXTERNAL_DB_MANAGERS=DB_MANAGER,
        **extra,
    )
    return env


@dataclass
class DagRunRecord:
    """What the metadata database holds about one DAG run.

    :param run_id: the run's id.
    :param data_interval_end: the end of its data interval (UTC), None for a run with no logical date.
    :param run_after: when the run was due (UTC); every run has one.
    :param states: task id -> final state, in the order the tasks started.
    :param values: task id -> return value (XCom), decoded from JSON.
    """

    run_id: str
    data_interval_end: pendulum.DateTime | None
    run_after: pendulum.DateTime
    states: dict[str, str] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)


def read_run(home: Path, dag_id: str) -> DagRunRecord | None:
    """The latest run of ``dag_id`` in ``home``'s SQLite database, or None when there is none.

    :param home: the AIRFLOW_HOME the run used (its ``airflow.db``).
    :param dag_id: the DAG.
    """
    with sqlite3.connect(home / "airflow.db") as db:
        row = db.execute(
            "SELECT run_id, data_interval_end, run_after FROM dag_run WHERE dag_id = ? "
            "ORDER BY id DESC LIMIT 1",
            (dag_id,),
        ).fetchone()
        if row is None:
            return None
        run_id, interval_end, run_after = row
        states = db.execute(
            "SELECT task_id, state FROM task_instance WHERE dag_id = ? AND run_id = ? ORDER BY start_date",
            (dag_id, run_id),
        ).fetchall()
        values = db.execute(
            "SELECT task_id, value FROM xcom WHERE dag_id = ? AND run_id = ? AND key = 'return_value'",
            (dag_id, run_id),
        ).fetchall()
    return DagRunRecord(
        run_id=run_id,
        # SQLite keeps naive UTC timestamps.
        data_interval_end=pendulum.parse(interval_end, tz="UTC") if interval_end else None,  # type: ignore[arg-type]
        run_after=pendulum.parse(run_after, tz="UTC"),  # type: ignore[arg-type]
        states=dict(states),
        values={task_id: json.loads(value) if isinstance(value, str) else value for task_id, value in values},
    )


def _figures(result: Mapping[str, Any]) -> str:
    """``sent/total`` and each filter's count, from a simulate or send XCom."""
    return CampaignResult.model_validate(
        {
            "status": 1,
            "message": "OK",
            **{k: v for k, v in result.items() if k in CampaignResult.model_fields},
        }
    ).summary()


def summary(
    states: Mapping[str, str],
    values: Mapping[str, Any],
    campaigns: Sequence[Mapping[str, Any]],
    credits: int,
    max_cost: int,
) -> list[str]:
    """The lines the demo prints about one run (pure: easy to read and to test).

    :param states: task id -> final state.
    :param values: task id -> return value (XCom).
    :param campaigns: the campaigns the sandbox recorded.
    :param credits: the sandbox's credit balance after the run.
    :param max_cost: the cap the run was given.
    """
    lines = [
        "Tasks: " + ", ".join(f"{task} {state}" for task, state in states.items()),
    ]
    simulation = values.get("simulate")
    if simulation:
        lines.append(f"Simulation: {_figures(simulation)}")
    send = values.get("send")
    if send:
        gate = send.get("gate") or {}
        lines.append(
            f"Cost gate: passed (cost {send['simulation']['cost']} credits <= max_cost {gate['max_cost']})"
            if gate
            else "Cost gate: none set"
        )
        filtered = ", ".join(f"{name} {send[name]}" for name in FILTER_FIELDS if send.get(name))
        lines += [
            f"Sent: ticket {send['ticket']}: {send['sent']} of {send['total']} numbers sent, "
            f"{send['filtered']} filtered" + (f" ({filtered})" if filtered else ""),
            f"Cost: {send['cost']} credits, {credits} credits left",
            f"Delay: goes out at {send['delay']} Europe/Paris",
        ]
        moved = send.get("send_window")
        if moved:
            lines.append(
                f"Send window: requested {moved['requested']}, moved to {moved['moved_to']} Europe/Paris "
                f"because {moved['reason']}"
            )
    elif states.get("send") in ("skipped", "failed") and simulation:
        lines.append(
            f"Cost gate: refused (cost {simulation['cost']} credits > max_cost {max_cost}): "
            f"send task {states['send']}, nothing was sent"
        )
    npai = values.get("report_npai")
    if npai is not None:
        lines.append("NPAI found: " + (", ".join(npai) if npai else "none"))
    lines.append(
        f"Sandbox: {len(campaigns)} campaign(s) recorded"
        + "".join(
            f"; ticket {c['ticket']} to lists {c['lists']}, delay {c['delay']}, {len(c['sent_to'])} numbers"
            for c in campaigns
        )
    )
    return lines


@contextmanager
def delivery_receiver(env: Mapping[str, str]) -> Iterator[str]:
    """The delivery-report receiver, mounted as the API server mounts it, on the demo's database.

    Airflow is imported here for the first time in this process, with the throwaway home's settings.
    """
    os.environ.update(env)
    from fastapi import FastAPI

    from airflow_provider_sms.api_server.app import build_app
    from airflow_provider_sms.delivery_reports.settings import URL_PREFIX
    from airflow_provider_sms.sandbox.server import ThreadedServer

    # As the API server does, the app it mounts runs its lifespan: the flusher, which keeps the counts the
    # summary reads. (Not by importing the API server's app module: it imports Starlette's test client,
    # which warns that it is deprecated.)
    receiver = build_app()
    api_server = FastAPI(lifespan=lambda _app: receiver.router.lifespan_context(receiver))
    api_server.mount(URL_PREFIX, receiver)
    with ThreadedServer(api_server, name="the delivery-report receiver", lifespan=True) as server:
        yield server.url


def delivery_line(receiver_url: str, send: Mapping[str, Any], connection: str) -> str:
    """The campaign's delivery reports as the receiver counted them (after waiting for the last one)."""
    from airflow_provider_sms.delivery_reports.client import SummaryRequest, fetch_summary
    from airflow_provider_sms.delivery_reports.settings import read_key

    tickets = [int(ticket) for ticket in send["tickets"]]
    key = read_key(json.loads(connection)["password"])
    request = SummaryRequest(f"{receiver_url}/sms/delivery-reports/sms_default/summary", key, tickets)
    # The summary counts what the flusher has put in batches: within its interval of the last report.
    deadline = time.monotonic() + DLR_WAIT
    delivery = fetch_summary(request)
    while delivery.reported < send["sent"] and time.monotonic() < deadline:
        time.sleep(0.2)
        delivery = fetch_summary(request)
    counts = ", ".join(f"{count} {name}" for name, count in sorted(delivery.by_status.items()))
    return f"Delivery reports: {counts} ({delivery.final} of {send['sent']} messages have a final status)"


def _run(command: list[str], env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT, check=False
    )


def _tail(process: subprocess.CompletedProcess[str]) -> str:
    return (process.stdout + process.stderr)[-OUTPUT_TAIL:]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo; returns the exit status (0: the DAG run succeeded).

    :param argv: command-line arguments (``--max-cost``, ``--on-cost-exceeded``).
    """
    parser = argparse.ArgumentParser(prog="python -m dags_examples.demo", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--max-cost", type=int, default=50, help="the cost gate's cap in credits (default 50)"
    )
    parser.add_argument("--on-cost-exceeded", choices=["skip", "fail"], default="skip")
    args = parser.parse_args(argv)
    conf = {"max_cost": args.max_cost, "on_cost_exceeded": args.on_cost_exceeded}

    # A fresh token per demo: nothing real is needed, and nothing printed is a secret worth keeping.
    with (
        SandboxServer(token=secrets.token_urlsafe(16), dlr=True, dlr_statuses=DLR_STATUSES) as sandbox,
        tempfile.TemporaryDirectory(prefix="sms-demo-") as tmp,
    ):
        home = Path(tmp)
        print(f"SMS sandbox listening on {sandbox.url}; throwaway AIRFLOW_HOME {home}")
        connection = sandbox.connection_json(
            "json", dlr_webhook_id="1", dlr_allowed_callers=["127.0.0.1"], dlr_event_interval=0.5
        )
        env = airflow_env(home, DAG_FILE.parent, AIRFLOW_CONN_SMS_DEFAULT=connection)
        print("airflow db migrate ...", flush=True)
        migrate = _run([AIRFLOW, "db", "migrate"], env)
        if migrate.returncode != 0:
            print(f"airflow db migrate failed:\n{_tail(migrate)}", file=sys.stderr)
            return 1
        with delivery_receiver(env) as receiver_url:
            sandbox.inspect.set_webhook("1", url=f"{receiver_url}/sms/delivery-reports/sms_default")
            print(f"airflow dags test {DAG_ID} -c '{json.dumps(conf)}' ...", flush=True)
            started = time.monotonic()
            run = _run([AIRFLOW, "dags", "test", DAG_ID, "-f", str(DAG_FILE), "-c", json.dumps(conf)], env)
            elapsed = time.monotonic() - started
            record = read_run(home, DAG_ID) or DagRunRecord("(none)", None)
            lines = summary(
                record.states,
                record.values,
                sandbox.inspect.campaigns(),
                sandbox.inspect.credits(),
                args.max_cost,
            )
            send = record.values.get("send")
            if send:
                lines.append(delivery_line(receiver_url, send, connection))
    failed = run.returncode != 0
    print()
    print(f"{DAG_ID}: run {record.run_id} {'FAILED' if failed else 'succeeded'} in {elapsed:.1f} s")
    for line in lines:
        print(f"  {line}")
    if failed:
        print(f"\nEnd of Airflow's output:\n{_tail(run)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
