"""A campaign from a file of numbers, sent in a fresh interpreter: ``python -m benchmarks.send_load``.

``operator PATH BATCH_SIZE CLAIMS``: ``SmsSendOperator(recipients=PATH, batch_size=BATCH_SIZE).execute()``
on the ``sms_default`` connection, as a task would run it, Airflow's metrics set up from ``[metrics]``;
the send guard keeps its records in memory
(no task runtime here: the stand-in the operator tests use) and the claims are made where ``CLAIMS``
says (:mod:`benchmarks.claim_path`: in process, or through the API server): claiming every number is
part of the time.
Prints the wall time of ``execute()``, the RSS once Airflow and every module ``execute()`` uses are
imported, the peak RSS during ``execute()`` (``VmHWM``, reset just before) and the result with the size
of its JSON (what XCom would store).

``bare PATH BATCH_SIZE URL TOKEN``: what a user could write instead, with nothing but requests: read
the file, cut it into the same batches, post each as the same JSON body with one ``requests.Session``,
check each answer's status. Prints its wall time. Imports neither Airflow nor the provider.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

TEXT = "Flash sale tonight"


def operator_send(path: Path, batch_size: int, claims: str) -> dict[str, Any]:
    """Run the operator on ``path``; return its figures (see the module docstring)."""
    # Everything execute() imports, imported first: the growth measured is the campaign's, not theirs.
    import pytest
    import requests  # noqa: F401

    import airflow_provider_sms.hooks.sms
    import airflow_provider_sms.operators._campaign_run  # noqa: F401
    from airflow_provider_sms.operators.sms import SmsSendOperator
    from benchmarks.claim_path import claim_through
    from benchmarks.proc import reset_peak_rss, status_bytes
    from tests.task_instance import FakeTaskInstance

    claim_through(claims, pytest.MonkeyPatch())
    start_metrics()
    operator = SmsSendOperator(task_id="send", message=TEXT, recipients=path, batch_size=batch_size)
    ti = FakeTaskInstance(dag_id="bench", run_id="bench")
    before = status_bytes("VmRSS")
    reset_peak_rss()
    started = time.perf_counter()
    result = operator.execute({"ti": ti})
    elapsed = time.perf_counter() - started
    return {
        "seconds": elapsed,
        "rss_before": before,
        "rss_peak": status_bytes("VmHWM"),
        "xcom_bytes": len(json.dumps(result)),
        "result": result,
    }


def start_metrics() -> None:
    """Airflow's metrics set up from ``[metrics]`` (the environment) as a task's process sets them up:
    Airflow 3.2 and later do it when the task starts; earlier Airflow when ``Stats`` is first used."""
    try:
        from airflow.sdk.observability.metrics import stats_utils
        from airflow.sdk.observability.stats import initialize
    except ImportError:
        return
    from airflow.providers.common.compat.sdk import conf

    initialize(
        factory=stats_utils.get_stats_factory(),
        export_legacy_names=conf.getboolean("metrics", "legacy_names_on", fallback=True),
    )


def bare_send(path: Path, batch_size: int, url: str, token: str) -> dict[str, Any]:
    """Post ``path``'s numbers in batches with a bare ``requests.Session``; return the wall time."""
    import requests

    session = requests.Session()
    session.headers.update(
        {"Authorization": f"Bearer {token}", "Accept": "application/json", "Content-Type": "application/json"}
    )

    def post(numbers: list[str]) -> None:
        gsm = [{"value": number} for number in numbers]
        body = json.dumps({"sms": {"message": {"text": TEXT}, "recipients": {"gsm": gsm}}})
        response = session.post(f"{url}/send", data=body, timeout=300)
        response.raise_for_status()
        if response.json()["status"] != 1:
            raise RuntimeError(f"the sandbox refused a batch: {response.text[:300]}")

    started = time.perf_counter()
    batch: list[str] = []
    with path.open() as numbers:
        for line in numbers:
            batch.append(line.strip())
            if len(batch) == batch_size:
                post(batch)
                batch = []
    if batch:
        post(batch)
    return {"seconds": time.perf_counter() - started}


def main() -> int:
    """Run the mode the arguments name; print its figures as one JSON line."""
    mode, path, batch_size, *rest = sys.argv[1:]
    if mode == "operator":
        figures = operator_send(Path(path), int(batch_size), *rest)
    else:
        figures = bare_send(Path(path), int(batch_size), *rest)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
