"""Unit-test fixtures: an `sms_default` connection defined by env var, pointing at requests-mock."""

from __future__ import annotations

import json
import threading
from typing import TYPE_CHECKING, Any

import pytest
import tenacity

from airflow_provider_sms.hooks.sms import SmsHook
from airflow_provider_sms.sandbox.testing import TEST_TOKEN

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

BASE_URL = "https://sms.test"
# The suite's canary token: tests/token_canary.py fails any test where it shows up.
TOKEN = TEST_TOKEN


def connection_json(fmt: str = "json", **extra: object) -> str:
    return json.dumps(
        {"conn_type": "sms", "host": BASE_URL, "password": TOKEN, "extra": {"format": fmt, **extra}}
    )


@pytest.fixture(params=["json", "xml"])
def fmt(request: pytest.FixtureRequest) -> str:
    """Run the test once per wire format."""
    return request.param


@pytest.fixture
def make_hook(monkeypatch: pytest.MonkeyPatch) -> Callable[..., SmsHook]:
    """Build an SmsHook on a fresh env-var connection (its retry waits are recorded, not slept)."""

    def factory(fmt: str = "json", **extra: object) -> SmsHook:
        monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", connection_json(fmt, **extra))
        return SmsHook()

    return factory


@pytest.fixture(autouse=True)
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Record tenacity's retry waits instead of sleeping through them."""
    recorded: list[float] = []
    monkeypatch.setattr(tenacity.nap.time, "sleep", recorded.append)
    return recorded


@pytest.fixture(autouse=True)
def _debug_logs(caplog: pytest.LogCaptureFixture) -> None:
    """Unit tests log at DEBUG, so that the token canary sees the debug records too."""
    caplog.set_level("DEBUG")


@pytest.fixture
def busy_receiver() -> Iterator[str]:
    """A receiver on 127.0.0.1 that answers every call 503 (its summary URL)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Busy(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(503)
            self.send_header("Content-Type", "application/json")
            body = b'{"detail": "the connections cannot be read"}'
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_POST = do_GET

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Busy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/sms/delivery-reports/sms_default/summary"
    server.shutdown()
    server.server_close()
