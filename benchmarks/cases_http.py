"""HTTP cases against the sandbox on 127.0.0.1: what the hook adds over the clients a user would write.

For the GET /webhook cases the sandbox runs in this process (its own thread), so every side shares
the same server and the same CPU; for the batched send it runs in its own process, and the operator in
another. Connections are defined by ``AIRFLOW_CONN_*`` environment variables, as in a worker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import requests

from benchmarks.harness import REPORT, Record, Target, best_of, record, skipped

TOKEN = "bench-token"
SMS_CONN_ID = "sms_bench"
HTTP_CONN_ID = "http_bench"
WEBHOOK_ID = "1"  # seeded by the sandbox
ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 30.0
# Longest the operator's child may take for the batched send: a stuck child fails the case.
SEND_TIMEOUT = 600
# The headers SmsHook sends, so that every side makes the same request.
HEADERS = {
    "Authorization": f"Bearer {TOKEN}",
    "Accept": "application/json",
    "Content-Type": "application/json",
    "User-Agent": "airflow-provider-sms",
}

SANDBOX_MISSING = "sandbox not available (airflow_provider_sms.sandbox.SandboxServer cannot be imported)"


def sandbox_available() -> bool:
    """Whether the sandbox (``airflow_provider_sms.sandbox.SandboxServer``) can be imported here."""
    try:
        from airflow_provider_sms.sandbox import SandboxServer  # noqa: F401
    except ImportError:
        return False
    return True


@contextmanager
def connections(url: str) -> Iterator[None]:
    """Define the ``sms_bench`` and ``http_bench`` connections for the duration, then remove them."""
    names = {
        f"AIRFLOW_CONN_{SMS_CONN_ID.upper()}": {"conn_type": "sms", "host": url, "password": TOKEN},
        f"AIRFLOW_CONN_{HTTP_CONN_ID.upper()}": {"conn_type": "http", "host": url},
    }
    saved = {name: os.environ.get(name) for name in names}
    os.environ.update({name: json.dumps(value) for name, value in names.items()})
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextmanager
def running_sandbox() -> Iterator[str]:
    """Start the sandbox on a free port of 127.0.0.1; yield its base URL; stop it."""
    from airflow_provider_sms.sandbox import SandboxServer

    server = SandboxServer(token=TOKEN, port=0)
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


def _repeat(call: Callable[[], Any], count: int) -> Callable[[], None]:
    def run() -> None:
        for _ in range(count):
            call()

    return run


def _checked_json(response: requests.Response) -> Any:
    # What a user's own client does with the answer: fail on HTTP errors, read the JSON.
    response.raise_for_status()
    return response.json()


def webhook_cases(calls: int, reps: int) -> list[Record]:
    """``calls`` sequential GET /webhook/1, SmsHook against three clients a user could write instead."""
    names = ("bare requests.Session", "new connection per call", "HttpHook (providers-http)")
    titles = [f"{calls:,} x GET /webhook, SmsHook vs {name}" for name in names]
    targets = (Target(1.15), REPORT, REPORT)
    if not sandbox_available():
        return [
            skipped(title, calls, target, SANDBOX_MISSING)
            for title, target in zip(titles, targets, strict=True)
        ]
    from airflow_provider_sms.hooks.sms import SmsHook

    with running_sandbox() as url, connections(url):
        endpoint = f"{url}/webhook/{WEBHOOK_ID}"
        hook = SmsHook(sms_conn_id=SMS_CONN_ID)
        session = requests.Session()
        session.headers.update(HEADERS)
        sides: list[Callable[[], Any]] = [
            lambda: hook.get_webhook(WEBHOOK_ID),
            lambda: _checked_json(session.get(endpoint, timeout=TIMEOUT)),
            lambda: _checked_json(requests.get(endpoint, headers=HEADERS, timeout=TIMEOUT)),
        ]
        http_hook = _http_hook()
        if http_hook is not None:
            sides.append(lambda: _checked_json(http_hook.run(f"/webhook/{WEBHOOK_ID}", headers=HEADERS)))
        for side in sides:
            side()  # warm up: connection pools, connection lookup, first import of lazy modules
        if hook.get_webhook(WEBHOOK_ID).webhook_id != WEBHOOK_ID:
            raise AssertionError("the sandbox did not answer webhook 1")
        times = best_of(*(_repeat(side, calls) for side in sides), reps=reps)
        session.close()
    ours = times[0]
    rows = [
        record(
            titles[0],
            calls,
            ours,
            times[1],
            targets[0],
            note="SmsHook.get_webhook (one keep-alive session, answer validated into a Webhook) vs "
            "requests.Session.get with the same headers + response.json()",
        ),
        record(
            titles[1],
            calls,
            ours,
            times[2],
            targets[1],
            note="vs requests.get per call, a new TCP connection each time, as the service's own "
            "Python SDK does",
        ),
    ]
    if http_hook is None:
        rows.append(
            skipped(
                titles[2],
                calls,
                targets[2],
                "apache-airflow-providers-http is not installed (pip install 'airflow-provider-sms[bench]')",
            )
        )
    else:
        rows.append(
            record(
                titles[2],
                calls,
                ours,
                times[3],
                targets[2],
                note="vs HttpHook(method='GET').run() on an http connection, + response.json()",
            )
        )
    return rows


def _http_hook() -> Any:
    """An HttpHook on the ``http_bench`` connection, or None when the http provider is missing."""
    try:
        from airflow.providers.http.hooks.http import HttpHook
    except ImportError:
        return None
    return HttpHook(method="GET", http_conn_id=HTTP_CONN_ID)


# The operator run in a child interpreter, as a task would: the send guard keeps its records in memory
# (no task runtime here, the same stand-in the operator tests use). Prints one JSON line: wall time of
# execute(), the process's peak RSS before and after it (kernel high-water mark), and the result.
_SEND_CHILD = """
import json, resource, sys, time
from pathlib import Path
from tests.task_instance import FakeTaskInstance
from airflow_provider_sms.operators import _send_guard as guard
from airflow_provider_sms.operators.sms import SmsSendOperator
from tests.conftest import MemoryVariables

def peak_rss():
    # Linux: VmHWM, the peak of this program alone (ru_maxrss would keep the high-water mark of the
    # parent this process was forked from). Elsewhere ru_maxrss, in bytes on macOS.
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

guard.Variable = MemoryVariables
operator = SmsSendOperator(
    task_id="send", message="Flash sale tonight", recipients=Path(sys.argv[1]),
    batch_size=int(sys.argv[2]), max_cost=10**9,
)
ti = FakeTaskInstance(dag_id="bench", run_id="bench")
before = peak_rss()
started = time.perf_counter()
result = operator.execute({"ti": ti})
elapsed = time.perf_counter() - started
print(json.dumps({"seconds": elapsed, "rss_before": before, "rss_peak": peak_rss(), "result": result}))
"""
BATCHES = 20


@contextmanager
def sandbox_process() -> Iterator[str]:
    """The sandbox in its own process on a free port of 127.0.0.1 (``python -m ...sandbox``); yield its URL.

    Credits and the anti-flood limit are raised so that a big send is never refused by them.
    """
    command = [
        sys.executable,
        "-m",
        "airflow_provider_sms.sandbox",
        "--port",
        "0",
        "--token",
        TOKEN,
        "--credits",
        str(10**9),
        "--flood-limit",
        str(10**6),
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # "SMS sandbox listening on http://127.0.0.1:PORT"
        if not line.startswith("SMS sandbox listening on "):
            raise RuntimeError(f"the sandbox did not start: {line!r}")
        yield line.rsplit(" ", 1)[1].strip()
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def batched_send_case(recipients: int) -> Record:
    """``recipients`` numbers sent by SmsSendOperator in 20 batches to the sandbox: wall time, peak RSS.

    The operator runs in a fresh interpreter and the sandbox in a third process, so the peak RSS is the
    operator process's alone (the sandbox keeps every recipient it is sent). One run: a send is not
    repeatable against the same sandbox state, and the figure is reported, not compared.
    """
    name = "batched send through SmsSendOperator"
    if not sandbox_available():
        return skipped(name, recipients, REPORT, SANDBOX_MISSING)
    from airflow_provider_sms.sandbox import InspectionClient

    batch_size = max(1, recipients // BATCHES)
    with tempfile.TemporaryDirectory() as folder, sandbox_process() as url:
        path = Path(folder) / "numbers.csv"
        path.write_text("".join(f"336{index:08d}\n" for index in range(recipients)))
        env = {
            **os.environ,
            "AIRFLOW_CONN_SMS_DEFAULT": json.dumps({"conn_type": "sms", "host": url, "password": TOKEN}),
        }
        done = subprocess.run(
            [sys.executable, "-c", _SEND_CHILD, str(path), str(batch_size)],
            capture_output=True,
            text=True,
            timeout=SEND_TIMEOUT,
            cwd=ROOT,
            env=env,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"the operator's child failed: {done.stderr[-2000:]}")
        report = json.loads(done.stdout.strip().splitlines()[-1])
        sent = sum(len(campaign["recipients"]) for campaign in InspectionClient(url).campaigns())
    result = report["result"]
    if result["total"] != recipients or sent != recipients:
        raise AssertionError(
            f"{recipients} numbers given, the operator sent {result['total']}, the sandbox got {sent}"
        )
    mib = 1024 * 1024
    return record(
        name,
        recipients,
        report["seconds"],
        None,
        REPORT,
        peak_memory=report["rss_peak"],
        note=f"numbers read from a CSV file, simulate (cost check) then {result['batches']} batches of "
        f"{batch_size:,} sent, as SmsSendOperator.execute() does in a task; the operator in a fresh "
        f"interpreter, the sandbox in its own process; peak RSS of the operator's process "
        f"{report['rss_peak'] / mib:.0f} MiB (high-water mark {report['rss_before'] / mib:.0f} MiB before "
        f"execute(): interpreter, Airflow and the provider imported); one run, wall time of execute()",
    )
