"""A send's fixed cost: a 10-number SmsSendOperator.execute() against a bare requests POST of the same body.

The operator and the bare POST run interleaved in one fresh interpreter
(:mod:`benchmarks.send_cost_load`), the sandbox in its own process on 127.0.0.1. Every row is reported
against the bare POST, measured in the same run: how many bare POSTs the operator's work before its
first POST, its whole call and each of its parts cost. Two sets of rows: the claims made through the
deployment's API server (PostgreSQL), as a worker's task makes them, with the targets (the whole
``execute()`` at most 3 bare POSTs, its first POST at most 2); and the claims made in process (a SQLite
database of the child's own, as under ``airflow dags test``), reported.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from benchmarks.cases_http import SANDBOX_MISSING, TOKEN, sandbox_available, sandbox_process
from benchmarks.claim_path import API_SERVER, IN_PROCESS
from benchmarks.harness import REPORT, Record, Target, child_figures, record, skipped

if TYPE_CHECKING:
    from tests.deployment.harness import Deployment

NUMBERS = 10
BARE_POST = "a bare requests.post of the same /send body to the sandbox, answer checked (same interpreter)"
# Longest the child may take: a stuck child fails the case.
TIMEOUT = 300
# Each set of rows by where its claims are made: its title, and whether its rows carry the targets.
CLAIM_PATHS = {
    API_SERVER: ("claims through the API server (PostgreSQL)", True),
    IN_PROCESS: ("claims in process (SQLite)", False),
}
# The rows with a target (the others are reported): a send's fixed cost against a bare POST.
TARGETS = {"whole execute()": Target(3.0), "first POST /send after execute() starts": Target(2.0)}
# (row, the run it is read from, the figure in that run, what it measures)
ROWS: tuple[tuple[str, str, str, str], ...] = (
    ("first POST /send after execute() starts", "plain", "first_post", "no gate"),
    ("whole execute()", "plain", "whole", "no gate"),
    ("first POST /send, cost gate (max_cost)", "gate", "first_post", "max_cost set"),
    ("whole execute(), cost gate (max_cost)", "gate", "whole", "max_cost set"),
    (
        "part: claims",
        "plain",
        "claims",
        "the campaign's claim, its numbers' and the record of its tickets: one transaction each, no pause",
    ),
    ("part: send guard", "plain", "guard", "the guard's read, and its writes before and after the POST"),
    (
        "part: simulation for the gate",
        "gate",
        "simulate",
        "POST /send/simulate of the exact campaign, and the figures added up",
    ),
    (
        "part: arguments checked, campaign prepared",
        "plain",
        "prepare",
        "message, numbers and send window checked; the connection looked up",
    ),
    ("part: campaign record (XCom)", "plain", "record", "the campaign record pushed for the campaigns page"),
)


def _prefix(claims: str) -> str:
    return f"send {NUMBERS} numbers, SmsSendOperator.execute(), {CLAIM_PATHS[claims][0]}"


def _names(claims: str) -> list[str]:
    prefix = _prefix(claims)
    return [f"{prefix}: {row[0]}" for row in ROWS] + [f"{prefix}: whole execute(), first in its interpreter"]


def _target(claims: str, row: str) -> Target:
    return TARGETS.get(row, REPORT) if CLAIM_PATHS[claims][1] else REPORT


def skipped_records(claims: str, reason: str) -> list[Record]:
    """The rows of one claim path, skipped with ``reason``."""
    rows = [row[0] for row in ROWS] + [""]
    return [
        skipped(name, NUMBERS, _target(claims, row), reason, baseline_name=BARE_POST, unit="ms")
        for name, row in zip(_names(claims), rows, strict=True)
    ]


def send_cost_cases(reps: int) -> list[Record]:
    """The rows with the claims made in process, against a sandbox of their own."""
    if not sandbox_available():
        return skipped_records(IN_PROCESS, SANDBOX_MISSING)
    with sandbox_process() as url:
        connection = {"conn_type": "sms", "host": url, "password": TOKEN}
        env = {**os.environ, "AIRFLOW_CONN_SMS_DEFAULT": json.dumps(connection)}
        figures = child_figures(
            "benchmarks.send_cost_load", [url, TOKEN, str(reps), IN_PROCESS], env, TIMEOUT
        )
    return _records(figures, reps, IN_PROCESS)


def api_server_send_cost_cases(deployment: Deployment, reps: int) -> list[Record]:
    """The rows with the claims made through the deployment's API server, against its sandbox: the child
    has the deployment's configuration, and reads the connection the API server reads (same token)."""
    url = deployment.sandbox_url
    env = deployment.airflow_env(AIRFLOW_CONN_SMS_DEFAULT=deployment.connection(url))
    figures = child_figures(
        "benchmarks.send_cost_load", [url, deployment.token, str(reps), API_SERVER], env, TIMEOUT
    )
    return _records(figures, reps, API_SERVER)


def _records(figures: dict[str, Any], reps: int, claims: str) -> list[Record]:
    """The rows of :data:`ROWS`, and the first call in a fresh interpreter, each against the bare POST."""
    bare = figures["bare"] * 1000
    plain = figures["plain"]
    store = (
        "the claims through the API server's routes (its PostgreSQL), the child's ORM blocked as in a task"
        if claims == API_SERVER
        else "the claims in a SQLite database of the child's own"
    )
    how = (
        f"{NUMBERS} numbers as a list, one batch of {figures['body_bytes']} bytes of JSON; one fresh "
        "interpreter runs the bare POST and the operator (no gate; max_cost set) in turn, each run from an "
        f"empty in-memory Variable store, with a text of its own, the sandbox reset after it; {store}; "
        f"best of {reps} of each figure. The Variables are in memory: {plain['variable_reads']} "
        f"reads and {plain['variable_writes']} writes per send (no gate), each a round trip to Airflow's "
        "API server in a worker, are not in these figures"
    )
    names = _names(claims)
    rows = [
        record(
            name,
            NUMBERS,
            figures[run][figure] * 1000,
            bare,
            _target(claims, row),
            baseline_name=BARE_POST,
            unit="ms",
            note=what,
        )
        for name, (row, run, figure, what) in zip(names, ROWS, strict=False)
    ]
    rows[0].note = f"{ROWS[0][3]}; {how}"
    rows.append(
        record(
            names[-1],
            NUMBERS,
            figures["cold"] * 1000,
            bare,
            REPORT,
            baseline_name=BARE_POST,
            unit="ms",
            note="the first execute() of the interpreter (no gate): it pays the imports a "
            "task's execute() makes; the bare POST it is compared with is not its interpreter's first",
        )
    )
    return rows
