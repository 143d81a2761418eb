"""A campaign of a million numbers: SmsSendOperator against a bare requests loop posting the same batches.

Each side runs in a fresh interpreter (:mod:`benchmarks.send_load`) and the sandbox in its own process,
put back to its seeds before each side (it keeps every recipient it is sent). Sides are interleaved,
ours first; the best wall time of each is kept, and the highest memory growth of ours. Two ways to
claim the numbers: through the deployment's API server (PostgreSQL), as a worker's task claims, with
the target; and in process (a SQLite database of the child's own, as under ``airflow dags test``),
reported, with the memory bound.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.cases_http import SANDBOX_MISSING, TOKEN, sandbox_available, sandbox_process
from benchmarks.claim_path import API_SERVER, IN_PROCESS
from benchmarks.harness import NO_BASELINE, REPORT, Record, Target, child_figures, record, skipped

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.deployment.harness import Deployment

# The campaign is cut into this many batches, as a DAG author would for a big send.
BATCHES = 20
MAX_RSS_GROWTH = 60 * 1024 * 1024
# The wall time against the bare loop, for the claims made as a deployment makes them.
TIME_TARGET = Target(2.0)
CLAIMED = {API_SERVER: "through the API server (PostgreSQL)", IN_PROCESS: "in process (SQLite)"}
BARE_LOOP = "a bare requests.Session loop posting the same batches as the same JSON (fresh interpreter)"
# Longest one side may take: a stuck child fails the case.
SEND_TIMEOUT = 900
# A send with the provider's metrics on costs at most this much more than with them off.
METRICS_TARGET = Target(1.01)
METRICS_OFF = "the same SmsSendOperator send with Airflow's metrics off (its default), same run"


def _side(*args: str, env: dict[str, str]) -> dict[str, Any]:
    return child_figures("benchmarks.send_load", list(args), env, SEND_TIMEOUT)


def _received(url: str, recipients: int) -> int:
    """Numbers the sandbox was sent since its last reset; then put it back to its seeds, with credits for
    a campaign of ``recipients`` numbers (a deployment's sandbox starts with fewer)."""
    from airflow_provider_sms.sandbox import InspectionClient

    sandbox = InspectionClient(url)
    count = sum(len(campaign["recipients"]) for campaign in sandbox.campaigns())
    sandbox.reset()
    sandbox.set_credits(10 * recipients)
    return count


def _names(recipients: int, claims: str) -> tuple[str, str]:
    return (
        f"send {recipients:,} numbers from a file, each claimed {CLAIMED[claims]}, SmsSendOperator vs "
        "bare requests loop",
        f"send {recipients:,} numbers from a file, claimed {CLAIMED[claims]}: peak RSS growth of "
        "SmsSendOperator",
    )


def _metrics_name(recipients: int) -> str:
    return (
        f"send {recipients:,} numbers from a file, claimed in process: Airflow's metrics on (StatsD) vs off"
    )


def _targets(claims: str) -> tuple[Target, Target]:
    return (TIME_TARGET if claims == API_SERVER else REPORT, Target(MAX_RSS_GROWTH, kind="bound"))


def skipped_records(recipients: int, claims: str, reason: str) -> list[Record]:
    """The rows of one claim path, skipped with ``reason``."""
    (time_name, memory_name), (time_target, memory_target) = _names(recipients, claims), _targets(claims)
    rows = [
        skipped(time_name, recipients, time_target, reason, baseline_name=BARE_LOOP),
        skipped(memory_name, recipients, memory_target, reason, baseline_name=NO_BASELINE, unit="bytes"),
    ]
    if claims == IN_PROCESS:
        rows.append(
            skipped(_metrics_name(recipients), recipients, METRICS_TARGET, reason, baseline_name=METRICS_OFF)
        )
    return rows


def million_send_cases(recipients: int, reps: int) -> list[Record]:
    """``recipients`` numbers from a file, claimed in process, sent to a sandbox of their own."""
    if not sandbox_available():
        return skipped_records(recipients, IN_PROCESS, SANDBOX_MISSING)
    with sandbox_process() as url:
        connection = {"conn_type": "sms", "host": url, "password": TOKEN}
        env = {**os.environ, "AIRFLOW_CONN_SMS_DEFAULT": json.dumps(connection)}
        return _send_cases(recipients, reps, IN_PROCESS, url, TOKEN, env, forget=lambda: None)


def api_server_send_cases(deployment: Deployment, recipients: int, reps: int) -> list[Record]:
    """``recipients`` numbers from a file, claimed through the deployment's API server, sent to its
    sandbox; the claims forgotten before each run of ours (each run is the same campaign)."""
    url = deployment.sandbox_url
    env = deployment.airflow_env(AIRFLOW_CONN_SMS_DEFAULT=deployment.connection(url))
    return _send_cases(recipients, reps, API_SERVER, url, deployment.token, env, deployment.forget_campaigns)


def _send_cases(
    recipients: int,
    reps: int,
    claims: str,
    url: str,
    token: str,
    env: dict[str, str],
    forget: Callable[[], None],
) -> list[Record]:
    """Sent in :data:`BATCHES` batches, claimed as ``claims`` says: wall time and peak RSS growth."""
    (time_name, memory_name), (time_target, memory_target) = _names(recipients, claims), _targets(claims)
    batch_size = max(1, recipients // BATCHES)
    ours = baseline = with_metrics = float("inf")
    growth = datagrams = 0
    _received(url, recipients)
    # Where the metrics go: a UDP socket read only once the runs are over (the kernel drops what its
    # buffer cannot hold, as a StatsD server that does not keep up would).
    statsd = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    statsd.bind(("127.0.0.1", 0))
    metrics_env = {
        **env,
        "AIRFLOW__METRICS__STATSD_ON": "True",
        "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
        "AIRFLOW__METRICS__STATSD_PORT": str(statsd.getsockname()[1]),
    }
    sides = [("off", env)] + ([("on", metrics_env)] if claims == IN_PROCESS else [])
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "numbers.csv"
        path.write_text("".join(f"336{index:08d}\n" for index in range(recipients)))
        for _ in range(reps):
            for metrics, side_env in sides:
                forget()
                report = _side("operator", str(path), str(batch_size), claims, env=side_env)
                result = report["result"]
                sent = _received(url, recipients)
                if result["total"] != recipients or sent != recipients:
                    raise AssertionError(
                        f"{recipients} numbers given, the operator sent {result['total']}, the sandbox got "
                        f"{sent}"
                    )
                if metrics == "on":
                    with_metrics = min(with_metrics, report["seconds"])
                    continue
                ours = min(ours, report["seconds"])
                growth = max(growth, report["rss_peak"] - report["rss_before"])
            baseline = min(
                baseline, _side("bare", str(path), str(batch_size), url, token, env=env)["seconds"]
            )
            if _received(url, recipients) != recipients:
                raise AssertionError("the bare loop did not send every number")
    how = (
        f"numbers in a CSV file, {result['batches']} batches of {batch_size:,}, no cost gate; each side in a "
        f"fresh interpreter, the sandbox in its own process and reset between sides; best of {reps}"
    )
    mib = 1024 * 1024
    statsd.setblocking(False)
    with statsd:
        while True:
            try:
                statsd.recv(65536)
            except BlockingIOError:
                break
            datagrams += 1
    rows = []
    if claims == IN_PROCESS:
        if not datagrams:
            raise AssertionError("metrics on, but no StatsD datagram arrived: the side measured nothing")
        rows.append(
            record(
                _metrics_name(recipients),
                recipients,
                with_metrics,
                ours,
                METRICS_TARGET,
                baseline_name=METRICS_OFF,
                note=f"{how}: wall time of execute() with [metrics] statsd_on to a UDP socket on 127.0.0.1 "
                f"that nobody reads during the runs ({datagrams} datagrams were still in its buffer at the "
                "end), against the same send with metrics off, interleaved",
            )
        )
    return [
        *rows,
        record(
            time_name,
            recipients,
            ours,
            baseline,
            time_target,
            baseline_name=BARE_LOOP,
            note=f"{how}: wall time of SmsSendOperator.execute() (every number checked, de-duplicated and "
            f"claimed {CLAIMED[claims]} before the first request, then the batches sent) vs a "
            "requests.Session loop that reads the file and posts the same batches as the same JSON, "
            "checking nothing",
        ),
        record(
            memory_name,
            recipients,
            growth,
            None,
            memory_target,
            baseline_name=NO_BASELINE,
            unit="bytes",
            peak_memory=growth,
            note=f"{how}: peak RSS (VmHWM) during execute() over the RSS once Airflow, the provider and "
            f"requests were imported ({report['rss_before'] / mib:.0f} MiB); the highest of the runs; "
            f"the result returned (XCom) is {report['xcom_bytes']:,} bytes of JSON",
        ),
    ]
