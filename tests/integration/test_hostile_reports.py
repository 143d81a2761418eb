"""Nothing hostile answered 503 (issue 29): the receiver over HTTP on 127.0.0.1, on SQLite.

- Reports the table cannot hold are 422 naming the field, and nothing is stored (they used to pass the
  model and fail the insert: 503, which the service retries for ever).
- A caller seen through a dual-stack socket (``::ffff:a.b.c.d``) is the IPv4 address it is.
- Every name that receives no reports gets the same 404, and a made-up name costs one secrets lookup per
  connection TTL however often it is called.
- The webhook's signature is read once in 5 minutes, across the connection's re-reads every 30 s.

The same hostile reports go to the real API server on PostgreSQL in tests/deployment/test_hostile_reports.py.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from airflow_provider_sms.delivery_reports.connections import (
    CONNECTION_TTL,
    NOT_RECEIVING,
    SIGNATURE_TTL,
    Connections,
)
from airflow_provider_sms.delivery_reports.receiver import build_app
from airflow_provider_sms.delivery_reports.settings import URL_PREFIX, read_key
from airflow_provider_sms.models import MESSAGE_ID_MAX_LENGTH
from airflow_provider_sms.sandbox.server import ThreadedServer
from airflow_provider_sms.sandbox.testing import TEST_TOKEN
from tests.integration import test_delivery_reports as receiving
from tests.integration.test_delivery_reports import connection_env, post, report, stored
from tests.unit.test_delivery_report_bounds import UNSTORABLE

if TYPE_CHECKING:
    from collections.abc import Iterator

    from airflow_provider_sms.sandbox.server import SandboxServer

pytestmark = pytest.mark.integration

# The receiver's fixtures, shared with its main tests: the emptied table (on tests/conftest.py's
# metadata_db, the session's migrated SQLite database) and the app.
fresh_table = receiving.fresh_table
receiver = receiving.receiver


@pytest.mark.parametrize(("fields", "field", "rule"), list(UNSTORABLE.values()), ids=list(UNSTORABLE))
def test_a_report_the_table_cannot_hold_is_422_naming_the_field_and_nothing_is_stored(
    receiver: ThreadedServer,
    fresh_table: Any,
    fields: dict[str, Any],
    field: str,
    rule: str,
) -> None:
    answer = post(receiver, report(**fields))

    assert answer.status_code == 422, answer.text
    assert f"report.{field}:" in answer.json()["detail"]
    assert rule in answer.json()["detail"]
    assert stored(fresh_table) == 0


def test_a_message_id_as_long_as_its_column_is_stored(
    receiver: ThreadedServer,
    fresh_table: Any,
) -> None:
    answer = post(receiver, report(message_id="m" * MESSAGE_ID_MAX_LENGTH))

    assert (answer.status_code, answer.json()) == (200, {"outcome": "recorded"})
    assert stored(fresh_table) == 1


@pytest.fixture
def dual_stack_receiver(
    fresh_table: Any,
    sms_sandbox: SandboxServer,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[int]:
    """The receiver on a socket bound to ``::`` that takes IPv4 calls too (as ``airflow api-server --host
    ::`` does); its port. sms_default receives from 127.0.0.1, sms_service_only from the service only."""
    connection_env(monkeypatch, sms_sandbox)
    connection_env(monkeypatch, sms_sandbox, conn_id="sms_service_only", dlr_allowed_callers=[])
    api_server = FastAPI()
    api_server.mount(URL_PREFIX, build_app())
    server = uvicorn.Server(uvicorn.Config(api_server, lifespan="off", log_level="warning", access_log=False))
    dual_stack = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    dual_stack.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    dual_stack.bind(("::", 0))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [dual_stack]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive(), "the dual-stack receiver stopped at start"
        assert time.monotonic() < deadline, "the dual-stack receiver did not start"
        time.sleep(0.02)
    try:
        yield dual_stack.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(10)
        dual_stack.close()


def test_an_ipv4_caller_seen_through_a_dual_stack_socket_is_its_ipv4_address(
    dual_stack_receiver: int,
    fresh_table: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = f"http://127.0.0.1:{dual_stack_receiver}/sms/delivery-reports"
    headers = {"Content-Type": "application/json", "X-SMSFactor-Signature": "sb-sig-1"}

    allowed = httpx.post(f"{url}/sms_default", json=report(), headers=headers, timeout=30)
    with caplog.at_level("WARNING", logger="airflow_provider_sms.delivery_reports.receiver"):
        refused = httpx.post(f"{url}/sms_service_only", json=report(status=2), headers=headers, timeout=30)

    # 127.0.0.1 is allowed for sms_default, and the server saw the caller as ::ffff:127.0.0.1.
    assert (allowed.status_code, allowed.json()) == (200, {"outcome": "recorded"})
    assert refused.status_code == 404
    assert any("calls from ::ffff:127.0.0.1 are not allowed" in r.message for r in caplog.records)
    assert stored(fresh_table) == 1


def test_every_name_that_receives_no_reports_gets_the_same_404(
    receiver: ThreadedServer,
    fresh_table: Any,
    sms_sandbox: SandboxServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_NO_DLR", sms_sandbox.connection_json("json"))
    monkeypatch.setenv("AIRFLOW_CONN_NOT_SMS", '{"conn_type": "http", "host": "http://x"}')
    connection_env(monkeypatch, sms_sandbox, conn_id="bad_settings", dlr_max_body=1)
    names = ["nobody", "no_dlr", "not_sms", "bad_settings", "x" * 251]

    answers = [post(receiver, report(), conn_id=name) for name in names]
    summaries = [
        httpx.get(
            f"{receiver.url}/sms/delivery-reports/{name}/summary",
            params={"campaign_id": 777},
            headers={"Authorization": f"Bearer {read_key(TEST_TOKEN)}"},
            timeout=30,
        )
        for name in names
    ]

    assert {(answer.status_code, answer.text) for answer in answers + summaries} == {
        (404, f'{{"detail":"{NOT_RECEIVING}"}}')
    }
    assert stored(fresh_table) == 0


def count_lookups(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names Airflow's secrets backends are asked for from now on, in order."""
    from airflow.models.connection import Connection

    lookups: list[str] = []
    real = Connection.get_connection_from_secrets

    def counted(_cls: type[Connection], conn_id: str) -> Connection:
        lookups.append(conn_id)
        return real(conn_id)

    monkeypatch.setattr(Connection, "get_connection_from_secrets", classmethod(counted))
    return lookups


def test_a_made_up_name_is_looked_up_once_within_the_ttl(
    receiver: ThreadedServer,
    fresh_table: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lookups = count_lookups(monkeypatch)

    answers = [post(receiver, report(), conn_id="made_up").status_code for _ in range(10)]

    assert answers == [404] * 10
    # Only this name's lookups: the flusher also reads the settings of every connection with campaigns
    # (those that earlier tests' records left in XCom, copied again by the indexer).
    assert [name for name in lookups if name == "made_up"] == ["made_up"]


class Clock:
    """The receiver's clock for connections and signatures, moved by the test."""

    def __init__(self) -> None:
        self.now = time.monotonic()

    def __call__(self) -> float:
        return self.now


def test_the_signature_is_read_once_in_five_minutes_across_connection_re_reads(
    fresh_table: Any,
    sms_sandbox: SandboxServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    connection_env(monkeypatch, sms_sandbox)
    lookups = count_lookups(monkeypatch)
    clock = Clock()
    api_server = FastAPI()
    api_server.mount(URL_PREFIX, build_app(Connections(clock=clock)))
    with ThreadedServer(api_server, name="the receiver on a test clock") as server:
        statuses = [post(server, report()).status_code]
        # Ten re-reads of the connection (every 31 s) within the signature's 5 minutes.
        for minute in range(9):
            clock.now += CONNECTION_TTL + 1
            statuses.append(post(server, report(date=f"2026-11-24T11:{minute:02d}:00+01:00")).status_code)
        assert (lookups.count("sms_default"), sms_sandbox.inspect.requests().get("/webhook")) == (10, 1)
        # A second past the signature's 5 minutes: exactly at them, the float sum of the clock's steps
        # may fall a hair short (1 run in 400), and the signature is rightly still kept.
        clock.now += SIGNATURE_TTL - 9 * (CONNECTION_TTL + 1) + 1
        statuses.append(post(server, report(status=2)).status_code)
    assert statuses == [200] * 11
    assert sms_sandbox.inspect.requests().get("/webhook") == 2
    assert stored(fresh_table) == 11
