"""HTTP cases against the sandbox on 127.0.0.1: what the hook adds over the clients a user would write.

For the GET /webhook cases the sandbox runs in this process (its own thread), so every side shares
the same server and the same CPU; :func:`serving` and :func:`sandbox_process` run it in its own
process for the cases that need it alone (:mod:`benchmarks.cases_campaign`,
:mod:`benchmarks.cases_triggers`). Connections are defined by ``AIRFLOW_CONN_*`` environment
variables, as in a worker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

import requests

from benchmarks.harness import REPORT, Record, Target, best_of, record, skipped

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

TOKEN = "bench-token"
SMS_CONN_ID = "sms_bench"
HTTP_CONN_ID = "http_bench"
WEBHOOK_ID = "1"  # seeded by the sandbox
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
    baselines = (
        "requests.Session.get with the same headers + response.json()",
        "requests.get per call (a new connection each time) + response.json()",
        "HttpHook(method='GET').run() + response.json()",
    )
    notes = (
        "SmsHook.get_webhook (one keep-alive session, answer validated into a Webhook) vs "
        "requests.Session.get with the same headers + response.json()",
        "vs requests.get per call, a new TCP connection each time, as the service's own Python SDK does",
        "vs HttpHook(method='GET').run() on an http connection, + response.json()",
    )
    if not sandbox_available():
        return [
            skipped(title, calls, target, SANDBOX_MISSING, baseline_name=baseline)
            for title, target, baseline in zip(titles, targets, baselines, strict=True)
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
    # Without the http provider there is no HttpHook side: zip stops before its row, skipped below.
    rows = [
        record(title, calls, ours, baseline, target, baseline_name=baseline_name, note=note)
        for title, baseline, target, baseline_name, note in zip(
            titles, times[1:], targets, baselines, notes, strict=False
        )
    ]
    if http_hook is None:
        rows.append(
            skipped(
                titles[2],
                calls,
                targets[2],
                "apache-airflow-providers-http is not installed (pip install 'airflow-provider-sms[bench]')",
                baseline_name=baselines[2],
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


@contextmanager
def serving(command: list[str]) -> Iterator[str]:
    """Run ``command``, a sandbox printing ``SMS sandbox listening on URL`` first; yield the URL; stop it."""
    process = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
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


def sandbox_process() -> AbstractContextManager[str]:
    """The sandbox in its own process on a free port of 127.0.0.1 (``python -m ...sandbox``); yields its URL.

    Credits and the anti-flood limit are raised so that a big send is never refused by them.
    """
    return serving(
        [
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
    )
