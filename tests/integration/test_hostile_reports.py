"""Nothing hostile answered 503 (issue 29): the receiver over HTTP on 127.0.0.1, on SQLite.

- Reports the table cannot hold are 422 naming the field, and nothing is stored (they used to pass the
  model and fail the insert: 503, which the service retries for ever).
- A caller seen through a dual-stack socket (``::ffff:a.b.c.d``) is the IPv4 address it is.
- Every name that receives no reports gets the same 404 to its POST, and a made-up name costs one secrets
  lookup per connection TTL however often it is called.
- The readers' endpoints (summary, batches) answer every call without the right key one 401, whatever
  the name: without a key nothing is looked up, with one every name is looked up alike (issue 40).
- A country code that is not two capital letters is 422 naming the field, stored nowhere and counted; one
  stored before that rule is read back as it is (issue 40).
- The webhook's signature is read once in 5 minutes, across the connection's re-reads every 30 s.

The same hostile reports go to the real API server on PostgreSQL in tests/deployment/test_hostile_reports.py.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from airflow_provider_sms.api_server.app import build_app
from airflow_provider_sms.delivery_reports import flusher as flusher_module
from airflow_provider_sms.delivery_reports.connections import (
    CONNECTION_TTL,
    NOT_RECEIVING,
    SIGNATURE_TTL,
    Connections,
)
from airflow_provider_sms.delivery_reports.receiver import READER_REFUSED
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
# metadata_db, the session's migrated SQLite database), the app and the URLs it was asked for.
fresh_table = receiving.fresh_table
receiver = receiving.receiver
access_log = receiving.access_log


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


# Country codes that are not two capital letters, from a spreadsheet formula to a lower-case code.
HOSTILE_COUNTRY_CODES = {
    "formula": "=2+3",
    "plus": "+FR",
    "minus": "-1",
    "at": "@SUM",
    "tab": "\tFR",
    "carriage-return": "\rFR",
    "lower-case": "fr",
    "one-letter": "F",
    "three-letters": "FRA",
    "digit": "F1",
    "accented": "ÉS",
    "space": "F ",
    "hyperlink": '=HYPERLINK("http://x")',
}


def test_a_country_code_that_is_not_two_capital_letters_is_422_stored_nowhere_and_counted(
    receiver: ThreadedServer, fresh_table: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(flusher_module, "REFUSALS_EVERY", 0.0)

    answers = {
        name: post(receiver, report(country_code=code)) for name, code in HOSTILE_COUNTRY_CODES.items()
    }

    assert {name: answer.status_code for name, answer in answers.items()} == dict.fromkeys(answers, 422)
    assert all(answer.json()["detail"].startswith("report.country_code: ") for answer in answers.values())
    assert "two capital letters A-Z" in answers["formula"].json()["detail"]
    assert stored(fresh_table) == 0
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        counted = {refusal.reason: refusal.count for refusal in receiving.summary(receiver, 777).refusals}
        if counted.get("invalid_report") == len(answers):
            break
        time.sleep(0.1)
    assert counted == {"invalid_report": len(answers)}


def test_a_report_with_a_two_letter_empty_or_no_country_code_is_stored(
    receiver: ThreadedServer, fresh_table: Any
) -> None:
    bodies = [report("33650000001", country_code="BE"), report("33650000002", country_code="")]
    bodies.append({key: value for key, value in report("33650000003").items() if key != "country_code"})

    assert [post(receiver, body).json() for body in bodies] == [{"outcome": "recorded"}] * 3
    assert stored(fresh_table) == 3


def test_a_country_code_stored_before_the_rule_is_read_back_as_it_is(
    receiver: ThreadedServer, fresh_table: Any
) -> None:
    from datetime import datetime, timezone

    from airflow_provider_sms.delivery_reports.store import report_row
    from airflow_provider_sms.delivery_reports.tables import delivery_report_table
    from airflow_provider_sms.models import DeliveryReport

    legacy = DeliveryReport.model_construct(
        date=datetime(2026, 11, 24, 9, tzinfo=timezone.utc),
        status=12,
        destination="33650000009",
        message_id=None,
        campaign_id=5050,
        country_code="=2+3",
    )
    row = {**report_row("sms_default", legacy, datetime.now(timezone.utc)), "batch": 1}
    with fresh_table.engine.begin() as connection:
        connection.execute(delivery_report_table.insert().values(row))

    answer = read(receiver, "sms_default/batches/1", KEY)

    assert answer.status_code == 200, answer.text
    assert [one["country_code"] for one in answer.json()["reports"]] == ["=2+3"]


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
    with caplog.at_level("WARNING", logger="airflow_provider_sms.api_server.refusal"):
        refused = httpx.post(f"{url}/sms_service_only", json=report(status=2), headers=headers, timeout=30)

    # 127.0.0.1 is allowed for sms_default, and the server saw the caller as ::ffff:127.0.0.1.
    assert (allowed.status_code, allowed.json()) == (200, {"outcome": "recorded"})
    assert refused.status_code == 404
    assert any("calls from ::ffff:127.0.0.1 are not allowed" in r.message for r in caplog.records)
    assert stored(fresh_table) == 1


NOT_RECEIVING_NAMES = ["nobody", "no_dlr", "not_sms", "bad_settings", "x" * 251]


@pytest.fixture
def names_not_receiving(sms_sandbox: SandboxServer, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every kind of name that receives no reports: none such, an sms connection without dlr_webhook_id
    or with settings that are not valid (both with the sandbox's token), another type, too long."""
    monkeypatch.setenv("AIRFLOW_CONN_NO_DLR", sms_sandbox.connection_json("json"))
    monkeypatch.setenv("AIRFLOW_CONN_NOT_SMS", '{"conn_type": "http", "host": "http://x"}')
    connection_env(monkeypatch, sms_sandbox, conn_id="bad_settings", dlr_max_body=1)
    return NOT_RECEIVING_NAMES


def read(server: ThreadedServer, path: str, headers: dict[str, str], **params: Any) -> httpx.Response:
    """GET one of the readers' endpoints (``summary``, ``batches/1``) of a name: ``path`` is after
    /sms/delivery-reports/."""
    return httpx.get(f"{server.url}/sms/delivery-reports/{path}", params=params, headers=headers, timeout=30)


READERS = {"summary": {"campaign_id": 777}, "batches/1": {}}
KEY = {"Authorization": f"Bearer {read_key(TEST_TOKEN)}"}


def test_every_name_that_receives_no_reports_gets_the_same_404_to_its_post(
    receiver: ThreadedServer, fresh_table: Any, names_not_receiving: list[str]
) -> None:
    answers = [post(receiver, report(), conn_id=name) for name in names_not_receiving]

    assert {(answer.status_code, answer.text) for answer in answers} == {
        (404, f'{{"detail":"{NOT_RECEIVING}"}}')
    }
    assert stored(fresh_table) == 0


@pytest.mark.parametrize("path", list(READERS))
def test_a_reader_with_the_right_key_is_told_a_connection_receives_nothing_as_before(
    receiver: ThreadedServer, names_not_receiving: list[str], path: str
) -> None:
    # no_dlr and bad_settings hold the sandbox's token: the key is theirs.
    answers = {
        name: read(receiver, f"{name}/{path}", KEY, **READERS[path]) for name in ["no_dlr", "bad_settings"]
    }

    assert {(answer.status_code, answer.text) for answer in answers.values()} == {
        (404, f'{{"detail":"{NOT_RECEIVING}"}}')
    }


CALLERS_WITHOUT_THE_KEY = {
    "no-header": {},
    "bearer-alone": {"Authorization": "Bearer"},
    "not-bearer": {"Authorization": "Basic dXNlcjpwYXNz"},
    "wrong-key": {"Authorization": "Bearer not-the-key"},
    "the-token-itself": {"Authorization": f"Bearer {TEST_TOKEN}"},
    "an-empty-tokens-key": {"Authorization": f"Bearer {read_key('')}"},
    "another-tokens-key": {"Authorization": f"Bearer {read_key('another-token')}"},
}


@pytest.mark.parametrize("path", list(READERS))
def test_every_call_without_the_right_key_gets_one_401_whatever_the_name(
    receiver: ThreadedServer, names_not_receiving: list[str], path: str
) -> None:
    names = ["sms_default", *names_not_receiving]
    keys = [headers for name, headers in CALLERS_WITHOUT_THE_KEY.items() if name != "an-empty-tokens-key"]
    # The sandbox's key opens sms_default, no_dlr and bad_settings: for the others it is a wrong key too.
    keys_for_others = [*keys, KEY]
    answers = [
        read(receiver, f"{name}/{path}", headers, **READERS[path])
        for name in names
        for headers in (keys_for_others if name in {"nobody", "not_sms", "x" * 251} else keys)
    ]
    answers.append(read(receiver, f"nobody/{path}", CALLERS_WITHOUT_THE_KEY["an-empty-tokens-key"]))
    # Parameters that are not valid change nothing: the key is checked first.
    answers.append(
        read(receiver, f"sms_default/{path}", {}, campaign_id="abc", failed_after="x", after_id=-1)
    )

    assert {(answer.status_code, answer.text) for answer in answers} == {
        (401, json.dumps({"detail": READER_REFUSED}, separators=(",", ":")))
    }


def count_lookups(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names the receiver asks Airflow's secrets backends for from now on, in order (the campaign
    indexer, which runs beside it through the same lookup, has no records to read here)."""
    from airflow_provider_sms.delivery_reports import connections

    lookups: list[str] = []
    real = connections.lookup_connection

    def counted(conn_id: str) -> Any:
        lookups.append(conn_id)
        return real(conn_id)

    monkeypatch.setattr(connections, "lookup_connection", counted)
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


def test_a_reader_without_a_key_looks_nothing_up_and_with_one_every_name_is_looked_up_alike(
    receiver: ThreadedServer, names_not_receiving: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    names = ["sms_default", *names_not_receiving[:-1]]  # the too-long name is never looked up
    # sms_default has batches: the flusher beside the receiver reads it on its own schedule, so the
    # lookups counted are those of the names only calls ask about.
    asked_only = names_not_receiving[:-1]
    lookups = count_lookups(monkeypatch)

    without = [read(receiver, f"{name}/summary", {}, campaign_id=777).status_code for name in names]
    assert (without, [name for name in lookups if name in asked_only]) == ([401] * len(names), [])

    wrong = {"Authorization": "Bearer not-the-key"}
    for _ in range(3):
        assert {read(receiver, f"{name}/summary", wrong, campaign_id=777).status_code for name in names} == {
            401
        }
    # One lookup per name within the connection TTL, whether it receives reports or not.
    assert Counter(name for name in lookups if name in asked_only) == dict.fromkeys(asked_only, 1)


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
