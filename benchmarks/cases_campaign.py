"""A campaign of a million numbers: SmsSendOperator against a bare requests loop posting the same batches.

Each side runs in a fresh interpreter (:mod:`benchmarks.send_load`) and the sandbox in its own process,
put back to its seeds before each side (it keeps every recipient it is sent). Sides are interleaved,
ours first; the best wall time of each is kept, and the highest memory growth of ours.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.cases_http import SANDBOX_MISSING, TOKEN, sandbox_available, sandbox_process
from benchmarks.harness import NO_BASELINE, REPORT, Record, Target, child_figures, record, skipped

# The campaign is cut into this many batches, as a DAG author would for a big send.
BATCHES = 20
MAX_RSS_GROWTH = 60 * 1024 * 1024
BARE_LOOP = "a bare requests.Session loop posting the same batches as the same JSON (fresh interpreter)"
# Longest one side may take: a stuck child fails the case.
SEND_TIMEOUT = 900


def _side(*args: str, env: dict[str, str]) -> dict[str, Any]:
    return child_figures("benchmarks.send_load", list(args), env, SEND_TIMEOUT)


def _received(url: str) -> int:
    """Numbers the sandbox was sent since its last reset; then put it back to its seeds."""
    from airflow_provider_sms.sandbox import InspectionClient

    sandbox = InspectionClient(url)
    count = sum(len(campaign["recipients"]) for campaign in sandbox.campaigns())
    sandbox.reset()
    return count


def million_send_cases(recipients: int, reps: int) -> list[Record]:
    """``recipients`` numbers from a file, sent in :data:`BATCHES` batches: wall time and peak RSS growth."""
    time_name = (
        f"send {recipients:,} numbers from a file, each claimed in process (SQLite), SmsSendOperator vs "
        "bare requests loop"
    )
    memory_name = f"send {recipients:,} numbers from a file: peak RSS growth of SmsSendOperator"
    # Reported: the target (2 x the bare loop) is the claims' through the API server on PostgreSQL, as a
    # deployment makes them; this row claims in the process's own SQLite database (`airflow dags test`).
    time_target = REPORT
    memory_target = Target(MAX_RSS_GROWTH, kind="bound")
    if not sandbox_available():
        return [
            skipped(time_name, recipients, time_target, SANDBOX_MISSING, baseline_name=BARE_LOOP),
            skipped(
                memory_name,
                recipients,
                memory_target,
                SANDBOX_MISSING,
                baseline_name=NO_BASELINE,
                unit="bytes",
            ),
        ]
    batch_size = max(1, recipients // BATCHES)
    ours = baseline = float("inf")
    growth = 0
    with tempfile.TemporaryDirectory() as folder, sandbox_process() as url:
        path = Path(folder) / "numbers.csv"
        path.write_text("".join(f"336{index:08d}\n" for index in range(recipients)))
        connection = {"conn_type": "sms", "host": url, "password": TOKEN}
        env = {**os.environ, "AIRFLOW_CONN_SMS_DEFAULT": json.dumps(connection)}
        for _ in range(reps):
            report = _side("operator", str(path), str(batch_size), env=env)
            result = report["result"]
            sent = _received(url)
            if result["total"] != recipients or sent != recipients:
                raise AssertionError(
                    f"{recipients} numbers given, the operator sent {result['total']}, the sandbox got {sent}"
                )
            ours = min(ours, report["seconds"])
            growth = max(growth, report["rss_peak"] - report["rss_before"])
            baseline = min(
                baseline, _side("bare", str(path), str(batch_size), url, TOKEN, env=env)["seconds"]
            )
            if _received(url) != recipients:
                raise AssertionError("the bare loop did not send every number")
    how = (
        f"numbers in a CSV file, {result['batches']} batches of {batch_size:,}, no cost gate; each side in a "
        f"fresh interpreter, the sandbox in its own process and reset between sides; best of {reps}"
    )
    mib = 1024 * 1024
    return [
        record(
            time_name,
            recipients,
            ours,
            baseline,
            time_target,
            baseline_name=BARE_LOOP,
            note=f"{how}: wall time of SmsSendOperator.execute() (every number checked, de-duplicated and "
            "claimed before the first request, then the batches sent) vs a requests.Session loop that reads "
            "the file and posts the same batches as the same JSON, checking nothing",
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
