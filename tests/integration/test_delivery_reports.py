"""The delivery-report receiver, over HTTP on 127.0.0.1, on a real Airflow metadata database (SQLite).

The receiver's app runs as the API server would run it, with this process's Airflow ORM pointed at the
session's migrated throwaway database (``airflow db migrate`` made the table through the DB manager);
the sandbox supplies the webhook's signature (GET /webhook/1) and, with ``dlr=True``, posts the reports.
The same scenarios run on the real deployment in tests/deployment/test_delivery_reports.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections import Counter
from contextlib import contextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from airflow.api_fastapi.app import lifespan as airflow_lifespan
from fastapi import FastAPI
from sqlalchemy import func, select, text

from airflow_provider_sms.api_server import app as app_module
from airflow_provider_sms.api_server import refusal as refusal_module
from airflow_provider_sms.api_server.app import build_app
from airflow_provider_sms.api_server.database_errors import MIGRATE_HINT
from airflow_provider_sms.delivery_reports import client as client_module
from airflow_provider_sms.delivery_reports import connections as connections_module
from airflow_provider_sms.delivery_reports import delivery_reports_asset, reports_from_events
from airflow_provider_sms.delivery_reports import flusher as flusher_module
from airflow_provider_sms.delivery_reports import receiver as receiver_module
from airflow_provider_sms.delivery_reports.client import SummaryRequest, afetch_summary, fetch_summary
from airflow_provider_sms.delivery_reports.settings import URL_PREFIX, read_key
from airflow_provider_sms.delivery_reports.tables import delivery_report_table
from airflow_provider_sms.exceptions import SmsApiError, SmsAuthError, SmsTransportError
from airflow_provider_sms.hooks.sms import SmsHook
from airflow_provider_sms.phone_numbers import mask_number
from airflow_provider_sms.sandbox.server import SandboxServer, ThreadedServer
from airflow_provider_sms.sandbox.testing import TEST_TOKEN
from airflow_provider_sms.sensors.sms import SmsDeliveryReportsSensor
from airflow_provider_sms.triggers.sms import SmsDeliveryReportsTrigger
from tests.integration.conftest import clear

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.integration

SIGNATURE = "sb-sig-1"  # the sandbox's seeded signature of DLR webhook "1"
HEADERS = {"Content-Type": "application/json", "X-SMSFactor-Signature": SIGNATURE}


def report(
    destination: str = "33612345678", status: int = 3, campaign_id: int = 777, **fields: Any
) -> dict[str, Any]:
    return {
        "date": fields.pop("date", "2026-11-24T10:00:00+01:00"),
        "status": status,
        "destination": destination,
        "message_id": fields.pop("message_id", None),
        "campaign_id": campaign_id,
        "country_code": "FR",
        **fields,
    }


def stored(metadata_db: Any, campaign_id: int | None = None) -> int:
    """How many reports the table holds (of one campaign)."""
    query = select(func.count()).select_from(delivery_report_table)
    if campaign_id is not None:
        query = query.where(delivery_report_table.c.campaign_id == campaign_id)
    with metadata_db.engine.connect() as connection:
        return int(connection.scalar(query))


@pytest.fixture
def fresh_table(metadata_db: Any) -> Any:
    clear(metadata_db)
    return metadata_db


def flushed(metadata_db: Any, timeout: float = 15.0) -> None:
    """Wait until the flusher has put every stored report in a batch."""
    waiting = (
        select(func.count()).select_from(delivery_report_table).where(delivery_report_table.c.batch.is_(None))
    )
    deadline = time.monotonic() + timeout
    while True:
        with metadata_db.engine.connect() as connection:
            if not connection.scalar(waiting):
                return
        assert time.monotonic() < deadline, "the flusher did not put the reports in batches"
        time.sleep(0.05)


def asset_events(name: str) -> list[Any]:
    """The events of asset ``name``, oldest first."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        return list(
            session.scalars(
                select(AssetEvent)
                .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
                .where(AssetModel.name == name)
                .order_by(AssetEvent.id)
            )
        )


def declare_asset(conn_id: str) -> Any:
    """What the DAG processor writes when a DAG schedules on the connection's asset."""
    from airflow.models.asset import AssetActive, AssetModel
    from airflow.utils.session import create_session

    asset = delivery_reports_asset(conn_id)
    with create_session() as session:
        if session.scalar(select(AssetModel).where(AssetModel.name == asset.name)) is None:
            session.add(AssetModel(name=asset.name, uri=asset.uri))
            session.add(AssetActive(name=asset.name, uri=asset.uri))
    return asset


# For the tests that count the reports of each event: longer than their few POSTs take on a loaded
# machine, so that no partial batch is made midway (with 0.2 s, three POSTs under two suites at once
# outlasted the interval and 5 reports became events of 2, 1 and 2).
WHOLE_EVENTS = 2.0


def connection_env(
    monkeypatch: pytest.MonkeyPatch, sandbox: SandboxServer, conn_id: str = "sms_default", **extra: Any
) -> None:
    extra.setdefault("dlr_webhook_id", "1")
    extra.setdefault("dlr_allowed_callers", ["127.0.0.1"])
    # Events within a fifth of a second: the tests need not wait the default 5 s.
    extra.setdefault("dlr_event_interval", 0.2)
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", sandbox.connection_json("json", **extra))


@pytest.fixture
def access_log() -> list[str]:
    """Every URL the test's receiver is asked for (path and query string), as an access log keeps them."""
    return []


def logged(app: Any, access_log: list[str]) -> Any:
    """``app``, noting the URL of every HTTP call in ``access_log`` first."""

    async def log_then_serve(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            query = scope["query_string"].decode()
            access_log.append(f"{scope['path']}?{query}" if query else scope["path"])
        await app(scope, receive, send)

    return log_then_serve


@contextmanager
def serve_receiver(access_log: list[str]) -> Iterator[ThreadedServer]:
    """The receiver's app on 127.0.0.1, its URLs noted in ``access_log``."""
    # Mounted under /sms as the API server mounts plugin apps, whose lifespans (the flusher) it runs.
    api_server = FastAPI(lifespan=airflow_lifespan)
    api_server.mount(URL_PREFIX, build_app())
    with ThreadedServer(logged(api_server, access_log), name="the receiver", lifespan=True) as server:
        yield server


@pytest.fixture
def receiver(
    fresh_table: Any, sms_sandbox: SandboxServer, monkeypatch: pytest.MonkeyPatch, access_log: list[str]
) -> Iterator[ThreadedServer]:
    """The receiver's app on 127.0.0.1, sms_default receiving from 127.0.0.1 (webhook 1 of the sandbox)."""
    connection_env(monkeypatch, sms_sandbox)
    with serve_receiver(access_log) as server:
        yield server


def post(
    server: ThreadedServer, body: Any, conn_id: str = "sms_default", headers: dict[str, str] | None = None
) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(
        f"{server.url}/sms/delivery-reports/{conn_id}",
        content=content,
        headers=headers or HEADERS,
        timeout=30,
    )


def summary(server: ThreadedServer, *campaign_ids: int, failed: bool = False, key: str | None = None) -> Any:
    request = SummaryRequest(
        f"{server.url}/sms/delivery-reports/sms_default/summary",
        key if key is not None else read_key(TEST_TOKEN),
        campaign_ids,
        failed,
    )
    return fetch_summary(request)


# ------------------------------------------------------------------------------------------ receiving


def test_a_report_is_stored_once_and_a_retry_is_answered_duplicate(
    receiver: ThreadedServer, fresh_table: Any
) -> None:
    first = post(receiver, report())
    again = post(receiver, report())
    assert (first.status_code, first.json()) == (200, {"outcome": "recorded"})
    assert (again.status_code, again.json()) == (200, {"outcome": "duplicate"})
    assert stored(fresh_table) == 1
    # The same number's next status is another report.
    assert post(receiver, report(status=2, date="2026-11-24T11:00:00+01:00")).json() == {
        "outcome": "recorded"
    }
    assert stored(fresh_table) == 2


def test_the_same_report_sent_with_other_whitespace_is_still_a_duplicate(
    receiver: ThreadedServer, fresh_table: Any
) -> None:
    assert post(receiver, report()).status_code == 200
    spaced = json.dumps(report(), indent=4).encode()
    assert post(receiver, spaced).json() == {"outcome": "duplicate"}
    assert stored(fresh_table) == 1


@pytest.mark.parametrize(
    ("headers", "body", "status", "words"),
    [
        ({"Content-Type": "application/json"}, None, 401, "X-SMSFactor-Signature header is missing"),
        ({**HEADERS, "X-SMSFactor-Signature": "forged"}, None, 403, "does not match"),
        ({**HEADERS, "Content-Type": "text/plain"}, None, 415, "must be application/json, not text/plain"),
        ({**HEADERS, "Content-Type": "application/xml"}, None, 415, "application/json"),
        (HEADERS, b"{not json", 400, "not JSON"),
        (HEADERS, json.dumps(report(status="delivered")).encode(), 422, "status"),
        (HEADERS, json.dumps({**report(), "date": "2026-11-24 10:00:00"}).encode(), 422, "date"),
        (
            HEADERS,
            json.dumps({k: v for k, v in report().items() if k != "campaign_id"}).encode(),
            422,
            "campaign_id",
        ),
        (HEADERS, b"{" + b" " * 20_000 + b"}", 413, "larger than 16384 bytes"),
    ],
    ids=[
        "no-signature",
        "wrong-signature",
        "text",
        "xml",
        "malformed",
        "bad-status",
        "naive-date",
        "no-campaign",
        "too-big",
    ],
)
def test_hostile_calls_get_a_clear_4xx_and_store_nothing(
    receiver: ThreadedServer,
    fresh_table: Any,
    headers: dict[str, str],
    body: bytes | None,
    status: int,
    words: str,
) -> None:
    answer = post(receiver, body if body is not None else report(), headers=headers)
    assert answer.status_code == status, answer.text
    assert words in answer.json()["detail"]
    assert stored(fresh_table) == 0


def test_an_oversized_body_without_a_length_is_cut_off(receiver: ThreadedServer, fresh_table: Any) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(100):
            yield b" " * 1024

    answer = httpx.post(
        f"{receiver.url}/sms/delivery-reports/sms_default", content=chunks(), headers=HEADERS, timeout=30
    )
    assert answer.status_code == 413
    assert stored(fresh_table) == 0


def test_unknown_and_unready_connections_are_404(
    receiver: ThreadedServer, fresh_table: Any, sms_sandbox: SandboxServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_NO_DLR", sms_sandbox.connection_json("json"))
    monkeypatch.setenv("AIRFLOW_CONN_NOT_SMS", json.dumps({"conn_type": "http", "host": "http://x"}))
    answers = {
        conn_id: post(receiver, report(), conn_id=conn_id) for conn_id in ("nobody", "no_dlr", "not_sms")
    }
    assert {conn_id: a.status_code for conn_id, a in answers.items()} == {
        "nobody": 404,
        "no_dlr": 404,
        "not_sms": 404,
    }
    # One text for all: a caller learns nothing about which connections exist (the log says which case).
    assert {a.json()["detail"] for a in answers.values()} == {connections_module.NOT_RECEIVING}
    assert stored(fresh_table) == 0


def test_callers_outside_the_allowlist_get_the_404_of_a_made_up_name_even_with_a_forwarded_header(
    receiver: ThreadedServer,
    fresh_table: Any,
    sms_sandbox: SandboxServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Only the service's two documented addresses: 127.0.0.1 is not one of them.
    connection_env(monkeypatch, sms_sandbox, conn_id="service_only", dlr_allowed_callers=[])
    forged = {**HEADERS, "X-Forwarded-For": "51.159.7.123", "Forwarded": "for=51.159.7.123"}
    with caplog.at_level("WARNING", logger=refusal_module.__name__):
        answer = post(receiver, report(), conn_id="service_only", headers=forged)
    made_up = post(receiver, report(), conn_id="made_up_name", headers=forged)
    # The caller cannot tell a connection it may not call from a name that does not exist ...
    assert (
        (answer.status_code, answer.json())
        == (made_up.status_code, made_up.json())
        == (
            404,
            {"detail": connections_module.NOT_RECEIVING},
        )
    )
    # ... the API server's log says why.
    assert any("calls from 127.0.0.1 are not allowed" in record.message for record in caplog.records)
    # "any" turns the check off.
    connection_env(monkeypatch, sms_sandbox, conn_id="anyone", dlr_allowed_callers="any")
    assert post(receiver, report(), conn_id="anyone").status_code == 200
    assert stored(fresh_table) == 1


def test_behind_a_trusted_proxy_the_forwarded_address_is_the_callers(
    fresh_table: Any, sms_sandbox: SandboxServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As `airflow api-server --proxy-headers` with the proxy on 127.0.0.1 (uvicorn's FORWARDED_ALLOW_IPS).
    connection_env(monkeypatch, sms_sandbox, conn_id="service_only", dlr_allowed_callers=[])
    api_server = FastAPI()
    api_server.mount(URL_PREFIX, build_app())
    with ThreadedServer(api_server, name="the proxied receiver", proxy_headers=True) as server:
        from_service = post(server, report(), "service_only", {**HEADERS, "X-Forwarded-For": "51.159.21.54"})
        from_elsewhere = post(
            server, report(status=2), "service_only", {**HEADERS, "X-Forwarded-For": "8.8.8.8"}
        )
    assert (from_service.status_code, from_elsewhere.status_code) == (200, 404)
    assert stored(fresh_table) == 1


def test_a_renewed_signature_is_read_again(
    receiver: ThreadedServer, fresh_table: Any, sms_sandbox: SandboxServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert post(receiver, report()).status_code == 200
    sms_sandbox.inspect.set_webhook("1", signature="renewed-signature")
    monkeypatch.setattr(connections_module, "SIGNATURE_RECHECK_INTERVAL", 0.0)
    assert (
        post(
            receiver, report(status=2), headers={**HEADERS, "X-SMSFactor-Signature": "renewed-signature"}
        ).status_code
        == 200
    )
    # The old one is refused from now on.
    assert post(receiver, report(status=4), headers=HEADERS).status_code == 403
    assert stored(fresh_table) == 2


def test_signature_unreadable_or_table_missing_is_503_which_the_service_retries(
    receiver: ThreadedServer, fresh_table: Any, sms_sandbox: SandboxServer
) -> None:
    sms_sandbox.inspect.set_faults(http_error=(502, 1))
    answer = post(receiver, report())
    assert answer.status_code == 503
    assert answer.headers["Retry-After"] == "30"
    sms_sandbox.inspect.clear_faults()
    with fresh_table.engine.begin() as connection:
        connection.execute(text("ALTER TABLE sms_delivery_report RENAME TO sms_delivery_report_away"))
    try:
        answer = post(receiver, report())
    finally:
        with fresh_table.engine.begin() as connection:
            connection.execute(text("ALTER TABLE sms_delivery_report_away RENAME TO sms_delivery_report"))
    assert answer.status_code == 503
    assert stored(fresh_table) == 0
    # Once the table is back, the service's retry is stored.
    assert post(receiver, report()).json() == {"outcome": "recorded"}


def test_reports_become_one_event_naming_their_batch_and_no_number(
    receiver: ThreadedServer, fresh_table: Any, monkeypatch: pytest.MonkeyPatch, sms_sandbox: SandboxServer
) -> None:
    connection_env(monkeypatch, sms_sandbox, dlr_event_interval=WHOLE_EVENTS)
    asset = declare_asset("sms_default")
    before = len(asset_events(asset.name))
    numbers = ["33600000042", "33600000043", "33600000044"]
    for number in numbers:
        assert post(receiver, report(destination=number, campaign_id=4242)).json() == {"outcome": "recorded"}
    assert post(receiver, report(destination=numbers[0], campaign_id=4242)).json() == {"outcome": "duplicate"}
    flushed(fresh_table)
    (event,) = asset_events(asset.name)[before:]
    assert event.extra["conn_id"] == "sms_default"
    assert (event.extra["reports"], event.extra["campaign_ids"]) == (3, [4242])
    assert event.extra["last_id"] - event.extra["first_id"] == 2
    # Asset pages are readable by anyone who may read assets: no number in the event.
    assert not any(number[2:] in json.dumps(event.extra) for number in numbers)
    # A task reads the reports through the receiver, with the key derived from the connection's token.
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", receiver.url)
    decoded = reports_from_events({asset.name: [event]})
    assert [(r.destination, r.status_name, r.campaign_id) for r in decoded] == [
        (number, "delivered", 4242) for number in numbers
    ]


def test_events_hold_at_most_the_connections_batch_size_and_each_report_once(
    receiver: ThreadedServer, fresh_table: Any, monkeypatch: pytest.MonkeyPatch, sms_sandbox: SandboxServer
) -> None:
    connection_env(
        monkeypatch,
        sms_sandbox,
        conn_id="sms_small",
        dlr_event_max_reports=2,
        dlr_event_interval=WHOLE_EVENTS,
    )
    asset = declare_asset("sms_small")
    numbers = [f"3360000010{index}" for index in range(5)]
    for number in numbers:
        assert (
            post(receiver, report(destination=number, campaign_id=4343), conn_id="sms_small").status_code
            == 200
        )
    flushed(fresh_table)
    events = asset_events(asset.name)
    # Full batches of 2 while reports keep coming; a batch is cut short only when its oldest report has
    # waited the interval, which a slow machine can reach between two posts (seen: 2, 1, 2).
    sizes = [event.extra["reports"] for event in events]
    assert max(sizes) == 2
    assert sum(sizes) == len(numbers)
    assert [event.extra["batch"] for event in events] == list(range(1, len(events) + 1))
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", receiver.url)
    assert [r.destination for r in reports_from_events(events)] == numbers


# ------------------------------------------------------------------------------------------ the summary


def test_summary_counts_each_message_at_its_latest_final_status(
    receiver: ThreadedServer, fresh_table: Any
) -> None:
    receiver_db = fresh_table
    posts = [
        report("33600000001", 1, date="2026-11-24T10:00:00+01:00"),
        report("33600000001", 3, date="2026-11-24T10:01:00+01:00"),
        # A late "sent" does not undo a final status.
        report("33600000002", 12, date="2026-11-24T10:00:00+01:00"),
        report("33600000002", 1, date="2026-11-24T10:05:00+01:00"),
        report("33600000003", 1),
        report("33600000004", 5, campaign_id=778),
        report("33600000005", 3, campaign_id=999),  # another campaign, not asked for
    ]
    assert {post(receiver, body).status_code for body in posts} == {200}
    flushed(receiver_db)
    result = summary(receiver, 777, 778, failed=True)
    assert result.by_status == {"delivered": 1, "expired": 1, "sent": 1, "invalid destination": 1}
    assert (result.reported, result.final, result.failed_count) == (4, 3, 2)
    assert result.failed == ["33600000002", "33600000004"]
    assert summary(receiver, 777).failed is None


@pytest.fixture
def short_key_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    """The API server keeps a connection it read for a second, and a refused key is asked again every
    tenth of one: the grace after a rotation, in test time."""
    monkeypatch.setattr(connections_module, "CONNECTION_TTL", 1.0)
    monkeypatch.setattr(client_module, "KEY_REFUSED_PAUSE", 0.1)


def test_summary_needs_the_key_derived_from_the_token(
    receiver: ThreadedServer, short_key_grace: None, access_log: list[str]
) -> None:
    with pytest.raises(SmsAuthError, match="refused the key"):
        summary(receiver, 777, key="not-the-key")
    # Asked again while the API server could have held a previous token, then the 401 stands.
    assert 2 <= sum("/summary" in url for url in access_log) <= 20
    with pytest.raises(SmsAuthError):
        summary(receiver, 777, key=TEST_TOKEN)  # the token itself is not the key


@pytest.mark.parametrize("path", ["blocking", "async"])
def test_a_wait_outlives_the_api_servers_cache_after_a_token_rotation(
    receiver: ThreadedServer,
    short_key_grace: None,
    monkeypatch: pytest.MonkeyPatch,
    sms_sandbox: SandboxServer,
    path: str,
) -> None:
    """Right after a rotation the worker has the new token, the API server still the old one (its
    connection cache): the summary is refused, asked again, and read once the API server reads it again."""
    assert summary(receiver, 777).reported == 0  # the API server now holds the connection
    rotated = json.loads(sms_sandbox.connection_json("json", dlr_webhook_id="1"))
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", json.dumps({**rotated, "password": "the-rotated-token"}))
    request = SummaryRequest(
        f"{receiver.url}/sms/delivery-reports/sms_default/summary", read_key("the-rotated-token"), [777]
    )

    found = fetch_summary(request) if path == "blocking" else asyncio.run(afetch_summary(request))

    assert (found.campaign_ids, found.reported) == ([777], 0)


def report_ids(metadata_db: Any, **where: Any) -> list[int]:
    """The ids of the stored reports whose columns have the values ``where`` gives, in order."""
    columns = delivery_report_table.c
    query = select(columns.id).where(*(columns[name] == value for name, value in where.items()))
    with metadata_db.engine.connect() as connection:
        return list(connection.scalars(query.order_by(columns.id)))


def failed_page(server: ThreadedServer, campaign_id: int, limit: int, after: Any = None) -> httpx.Response:
    """One page of a campaign's failed numbers from the summary, asked as the sensor asks."""
    params: dict[str, Any] = {"campaign_id": campaign_id, "failed": "true", "failed_limit": limit}
    if after is not None:
        params["failed_after"] = after
    return httpx.get(
        f"{server.url}/sms/delivery-reports/sms_default/summary",
        params=params,
        headers={"Authorization": f"Bearer {read_key(TEST_TOKEN)}"},
        timeout=30,
    )


def holds_a_number(url: str, numbers: list[str]) -> bool:
    """Whether ``url`` holds one of ``numbers``, whole or without its country code."""
    return any(number in url or number[2:] in url for number in numbers)


def test_failed_numbers_page_by_opaque_positions_each_number_once_whatever_arrives_meanwhile(
    receiver: ThreadedServer, fresh_table: Any, access_log: list[str]
) -> None:
    numbers = [f"3364600000{index}" for index in range(1, 8)]
    for number in numbers:
        assert post(receiver, report(number, 12, campaign_id=4646)).status_code == 200
    flushed(fresh_table)
    pages = [failed_page(receiver, 4646, 2).json()]
    # Between pages: a later report for a number already given, a failed number before the position
    # reached and one after it.
    late = [
        report(numbers[0], 2, campaign_id=4646, date="2026-11-24T12:00:00+01:00"),
        report("33646000000", 12, campaign_id=4646),
        report("33646000099", 12, campaign_id=4646),
    ]
    assert {post(receiver, body).status_code for body in late} == {200}
    flushed(fresh_table)
    while pages[-1]["failed_next"] is not None:
        pages.append(failed_page(receiver, 4646, 2, pages[-1]["failed_next"]).json())

    given = [number for page in pages for number in page["failed"]]
    # In number order, each once: the number before the position was passed, the one after is given.
    assert given == [*numbers, "33646000099"]
    positions = [page["failed_next"] for page in pages[:-1]]
    assert all(isinstance(position, int) for position in positions)
    asked = [url for url in access_log if "/summary" in url]
    assert len(asked) == len(pages)
    assert not any(holds_a_number(url, [*numbers, "33646000099"]) for url in asked)


def test_a_failed_after_this_server_did_not_give_is_422_naming_it_and_no_500(
    receiver: ThreadedServer,
    fresh_table: Any,
    sms_sandbox: SandboxServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    connection_env(monkeypatch, sms_sandbox, conn_id="sms_other")
    posts = [
        ("sms_default", report("33647000001", 12, campaign_id=4747)),
        ("sms_default", report("33647000002", 12, campaign_id=4747)),
        ("sms_default", report("33648000001", 12, campaign_id=4848)),
        ("sms_other", report("33647000003", 12, campaign_id=4747)),
    ]
    assert {post(receiver, body, conn_id=conn_id).status_code for conn_id, body in posts} == {200}
    flushed(fresh_table)
    (another_campaigns,) = report_ids(fresh_table, campaign_id=4848)
    (another_connections,) = report_ids(fresh_table, conn_id="sms_other")
    given = failed_page(receiver, 4747, 1).json()["failed_next"]
    assert failed_page(receiver, 4747, 1, given).json()["failed"] == ["33647000002"]
    hostile = [
        "garbage",
        "",
        "0",
        "-1",
        str(2**63),
        "1.5",
        "33647000001",
        another_campaigns,
        another_connections,
    ]

    with caplog.at_level(logging.WARNING, logger=refusal_module.__name__):
        answers = [failed_page(receiver, 4747, 1, after) for after in hostile]

    assert [answer.status_code for answer in answers] == [422] * len(hostile)
    assert all("failed_after" in answer.text for answer in answers)
    assert "not a position this server gave" in answers[-1].json()["detail"]
    # The number given where a position is due is neither answered back nor logged.
    assert not any("33647000001" in answer.text for answer in answers)
    refusals = [r.getMessage() for r in caplog.records if r.name == refusal_module.__name__]
    assert sum("failed_after" in refusal for refusal in refusals) == len(hostile)
    assert not any("33647000001" in refusal for refusal in refusals)


# ------------------------------------------------------------------------------------------ end to end


@pytest.fixture
def dlr_sandbox(receiver: ThreadedServer) -> Iterator[SandboxServer]:
    """A sandbox that posts one report per number sent to the receiver: 3 delivered, 1 expired, 1 sent."""
    with SandboxServer(token=TEST_TOKEN, dlr=True, dlr_statuses=(3, 3, 12, 3, 1)) as server:
        server.inspect.set_webhook("1", url=f"{receiver.url}/sms/delivery-reports/sms_dlr")
        yield server


def test_sandbox_reports_reach_the_receiver_and_the_sensor_returns_the_counts(
    receiver: ThreadedServer,
    dlr_sandbox: SandboxServer,
    fresh_table: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    connection_env(monkeypatch, dlr_sandbox, conn_id="sms_dlr", dlr_api_url=receiver.url)
    numbers = [f"3361000{index:04d}" for index in range(10)]
    result = SmsHook("sms_dlr").send({"text": "Hello", "pushtype": "alert"}, numbers)
    deadline = time.monotonic() + 30
    while (
        len(dlr_sandbox.inspect.delivery_reports()["acknowledged"]) < len(numbers)
        and time.monotonic() < deadline
    ):
        time.sleep(0.1)
    truth = dlr_sandbox.inspect.delivery_reports()["acknowledged"]
    assert len(truth) == 10
    sensor = SmsDeliveryReportsSensor(
        task_id="wait",
        sms_conn_id="sms_dlr",
        campaign={"tickets": [result.ticket], "sent": 10},
        min_final_share=0.8,
        deadline=timedelta(minutes=5),
        poke_interval=0.1,
        timeout=30,
    )
    with caplog.at_level(logging.INFO):
        counts = sensor.execute({})
    expected = {"delivered": 6, "expired": 2, "sent": 2}
    assert counts["by_status"] == expected
    assert (counts["final"], counts["final_share"], counts["complete"]) == (8, 0.8, True)
    assert counts["failed"] == sorted(r["destination"] for r in truth if r["status"] == 12)
    # The XCom has the failed numbers in full; the task log only masked.
    logged = caplog.text + capsys.readouterr().out
    assert f"2 message(s) failed, e.g. {', '.join(map(mask_number, counts['failed']))}" in logged
    assert not any(number in logged for number in counts["failed"])
    # The ground truth's own counts agree.
    from collections import Counter

    names = {3: "delivered", 12: "expired", 1: "sent"}
    assert Counter(names[r["status"]] for r in truth) == Counter(expected)


def test_no_number_is_in_any_url_the_sensor_and_reports_from_events_ask_for(
    fresh_table: Any, sms_sandbox: SandboxServer, monkeypatch: pytest.MonkeyPatch, access_log: list[str]
) -> None:
    # Pages of 3 failed numbers: the sensor reads its 7 in three.
    monkeypatch.setattr(receiver_module, "FAILED_PAGE", 3)
    asset = declare_asset("sms_default")
    before = len(asset_events(asset.name))
    failed = [f"3364900000{index}" for index in range(7)]
    delivered = ["33649000100", "33649000101"]
    with serve_receiver(access_log) as server:
        connection_env(monkeypatch, sms_sandbox, dlr_api_url=server.url)
        monkeypatch.setenv("AIRFLOW__API__BASE_URL", server.url)
        bodies = [report(number, 12, campaign_id=4949) for number in failed]
        bodies += [report(number, 3, campaign_id=4949) for number in delivered]
        assert {post(server, body).status_code for body in bodies} == {200}
        flushed(fresh_table)
        counts = SmsDeliveryReportsSensor(
            task_id="wait", campaign={"tickets": [4949], "sent": 9}, poke_interval=0.1, timeout=30
        ).execute({})
        decoded = reports_from_events({asset.name: asset_events(asset.name)[before:]})

    assert counts["failed"] == failed  # each once, in number order
    assert sorted(r.destination for r in decoded) == sorted(failed + delivered)
    summaries = [url for url in access_log if "/summary" in url]
    assert sum("failed_after=" in url for url in summaries) == 2
    assert any("/batches/" in url for url in access_log)
    assert not [url for url in access_log if holds_a_number(url, failed + delivered)]


def test_the_sensor_returns_what_is_known_at_the_deadline(
    receiver: ThreadedServer, monkeypatch: pytest.MonkeyPatch, sms_sandbox: SandboxServer
) -> None:
    connection_env(monkeypatch, sms_sandbox, dlr_api_url=receiver.url)
    post(receiver, report("33600000001", 3))
    sensor = SmsDeliveryReportsSensor(
        task_id="wait",
        campaign=777,
        expected=4,
        min_final_share=1.0,
        deadline=timedelta(seconds=1),
        poke_interval=0.2,
        timeout=30,
    )
    counts = sensor.execute({})
    assert (counts["complete"], counts["final"], counts["expected"], counts["final_share"]) == (
        False,
        1,
        4,
        0.25,
    )


def test_the_trigger_waits_for_the_share_then_yields_the_counts(
    receiver: ThreadedServer, monkeypatch: pytest.MonkeyPatch, sms_sandbox: SandboxServer
) -> None:
    connection_env(monkeypatch, sms_sandbox, dlr_api_url=receiver.url)
    post(receiver, report("33600000001", 3))
    trigger = SmsDeliveryReportsTrigger(
        summary_url=f"{receiver.url}/sms/delivery-reports/sms_default/summary",
        campaign_ids=[777],
        expected=2,
        min_final_share=1.0,
        deadline="2099-01-01T00:00:00+00:00",
        poke_interval=0.2,
    )

    async def run() -> dict[str, Any]:
        async def consume() -> dict[str, Any]:
            async for event in trigger.run():
                return event.payload
            raise AssertionError("no event")

        waiting = asyncio.ensure_future(consume())
        await asyncio.sleep(0.6)
        assert not waiting.done()  # 1 of 2: still waiting
        await asyncio.to_thread(post, receiver, report("33600000002", 9))
        return await asyncio.wait_for(waiting, timeout=30)

    event = asyncio.run(run())
    assert (event["status"], event["complete"]) == ("success", True)
    assert event["summary"]["by_status"] == {"delivered": 1, "rejected": 1}
    classpath, kwargs = trigger.serialize()
    assert classpath.endswith("SmsDeliveryReportsTrigger")
    assert (kwargs["campaign_ids"], kwargs["deadline"]) == ([777], "2099-01-01T00:00:00+00:00")


def wait_until(condition: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_the_sandbox_turns_reports_on_at_run_time_and_refuses_bad_settings(
    sms_sandbox: SandboxServer,
) -> None:
    import requests

    assert sms_sandbox.inspect.set_delivery_reports(True, statuses=[3, 12], tries=9) == {
        "enabled": True,
        "statuses": [3, 12],
        "tries": 9,
    }
    with pytest.raises(requests.HTTPError, match="statuses must be a non-empty list of integers"):
        sms_sandbox.inspect.set_delivery_reports(True, statuses=[])
    with pytest.raises(requests.HTTPError, match="tries must be an integer of at least 1"):
        sms_sandbox.inspect.set_delivery_reports(True, tries=0)
    sms_sandbox.inspect.reset()
    assert sms_sandbox.state.dlr_enabled is False  # back to the start-up's


def test_without_a_dag_on_the_asset_reports_are_stored_and_counted_and_that_is_said_once(
    receiver: ThreadedServer,
    fresh_table: Any,
    sms_sandbox: SandboxServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from airflow.models.asset import AssetModel
    from airflow.utils.session import create_session

    connection_env(monkeypatch, sms_sandbox, conn_id="sms_nobody_schedules")
    with caplog.at_level("INFO", logger="airflow_provider_sms.delivery_reports.batches"):
        for index in range(3):
            body = report(f"3360000010{index}", campaign_id=5151)
            assert post(receiver, body, conn_id="sms_nobody_schedules").status_code == 200
        flushed(fresh_table)
        for index in range(3, 5):
            body = report(f"3360000010{index}", campaign_id=5151)
            assert post(receiver, body, conn_id="sms_nobody_schedules").status_code == 200
        flushed(fresh_table)
    assert stored(fresh_table, 5151) == 5
    said = [
        r for r in caplog.records if "No DAG schedules on asset 'sms_delivery_reports/sms_nobody" in r.message
    ]
    assert len(said) == 1
    with create_session() as session:
        assert session.scalar(select(AssetModel).where(AssetModel.name.like("%sms_nobody_schedules"))) is None
    # Counted all the same: the wait does not need a DAG on the asset.
    request = SummaryRequest(
        f"{receiver.url}/sms/delivery-reports/sms_nobody_schedules/summary", read_key(TEST_TOKEN), [5151]
    )
    assert fetch_summary(request).by_status == {"delivered": 5}


def test_the_health_probe_answers_without_a_connection(receiver: ThreadedServer) -> None:
    answer = httpx.get(f"{receiver.url}/sms/delivery-reports/_health", timeout=10)
    assert (answer.status_code, answer.json()) == (200, {"status": "healthy"})


def test_missing_tables_make_the_probe_unhealthy_and_the_summary_name_the_fix(
    receiver: ThreadedServer, fresh_table: Any, monkeypatch: pytest.MonkeyPatch, sms_sandbox: SandboxServer
) -> None:
    import airflow

    monkeypatch.setattr(app_module, "HEALTH_TTL", 0.0)
    # An Airflow that would not run the DB manager: what to set (naming the version) is only logged.
    monkeypatch.setattr(airflow, "__version__", "3.1.3")
    monkeypatch.setenv("AIRFLOW__DATABASE__EXTERNAL_DB_MANAGERS", "")
    with fresh_table.engine.begin() as connection:
        connection.execute(text("ALTER TABLE sms_delivery_count RENAME TO sms_delivery_count_away"))
    connection_env(monkeypatch, sms_sandbox, dlr_api_url=receiver.url)
    wait = SmsDeliveryReportsSensor(task_id="wait", campaign=777, expected=4, poke_interval=0.1, timeout=30)
    try:
        health = httpx.get(f"{receiver.url}/sms/delivery-reports/_health", timeout=10)
        with pytest.raises(SmsApiError) as caught:
            summary(receiver, 777)
        # The wait's try fails at its first poke, naming the fix (not "HTTP 500, polling again").
        with pytest.raises(SmsApiError) as waited:
            wait.execute({})
    finally:
        with fresh_table.engine.begin() as connection:
            connection.execute(text("ALTER TABLE sms_delivery_count_away RENAME TO sms_delivery_count"))
    assert health.status_code == 503
    assert health.json()["detail"] == MIGRATE_HINT
    assert "3.1.3" not in str(caught.value)
    assert not isinstance(caught.value, SmsTransportError)
    assert str(caught.value).startswith(
        "the Airflow API server answered HTTP 500: the delivery-report tables are missing from Airflow's "
        "metadata database: run `airflow db migrate`"
    )
    assert str(waited.value) == str(caught.value)
    assert httpx.get(f"{receiver.url}/sms/delivery-reports/_health", timeout=10).status_code == 200


def test_refusals_are_counted_by_reason_and_the_summary_returns_them(
    receiver: ThreadedServer, fresh_table: Any, monkeypatch: pytest.MonkeyPatch, sms_sandbox: SandboxServer
) -> None:
    monkeypatch.setattr(flusher_module, "REFUSALS_EVERY", 0.0)
    forged = {**HEADERS, "X-SMSFactor-Signature": "forged"}
    assert [post(receiver, report(), headers=forged).status_code for _ in range(3)] == [403] * 3
    assert post(receiver, b"{not json").status_code == 400
    # Only the service's addresses for this one: 127.0.0.1 is refused.
    connection_env(monkeypatch, sms_sandbox, conn_id="sms_strict", dlr_allowed_callers=[])
    assert post(receiver, report(), conn_id="sms_strict").status_code == 404
    # Names that receive no reports are not counted (a made-up name must not grow the table).
    assert post(receiver, report(), conn_id="nobody").status_code == 404

    strict_request = SummaryRequest(
        f"{receiver.url}/sms/delivery-reports/sms_strict/summary", read_key(TEST_TOKEN), [1]
    )

    def refusals() -> tuple[dict[str, int], dict[str, int]]:
        """The refusal counts of sms_default and sms_strict (the flusher writes them on its looks)."""
        return (
            {refusal.reason: refusal.count for refusal in summary(receiver, 777).refusals},
            {refusal.reason: refusal.count for refusal in fetch_summary(strict_request).refusals},
        )

    expected = ({"bad_signature": 3, "invalid_report": 1}, {"caller_not_allowed": 1})
    deadline = time.monotonic() + 15
    while refusals() != expected and time.monotonic() < deadline:
        time.sleep(0.1)
    assert refusals() == expected
    latest = summary(receiver, 777).refusals
    assert "does not match the webhook's signature" in next(
        refusal.last_detail for refusal in latest if refusal.reason == "bad_signature"
    )
    strict = fetch_summary(strict_request)
    (caller,) = strict.refusals
    assert (caller.reason, caller.count) == ("caller_not_allowed", 1)
    assert "127.0.0.1" in caller.last_detail


def test_a_wait_that_sees_nothing_arrive_logs_what_the_receiver_refused(
    receiver: ThreadedServer,
    fresh_table: Any,
    monkeypatch: pytest.MonkeyPatch,
    sms_sandbox: SandboxServer,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(flusher_module, "REFUSALS_EVERY", 0.0)
    # The service's reports come from 127.0.0.1, which sms_strict does not allow.
    strict = {"conn_id": "sms_strict", "dlr_allowed_callers": [], "dlr_api_url": receiver.url}
    connection_env(monkeypatch, sms_sandbox, **strict)
    assert post(receiver, report(), conn_id="sms_strict").status_code == 404
    url = f"{receiver.url}/sms/delivery-reports/sms_strict/summary"
    request = SummaryRequest(url, read_key(TEST_TOKEN), [1])
    deadline = time.monotonic() + 15
    while not fetch_summary(request).refusals and time.monotonic() < deadline:
        time.sleep(0.1)
    wait = SmsDeliveryReportsSensor(
        task_id="wait",
        sms_conn_id="sms_strict",
        campaign=777,
        expected=1,
        deadline=timedelta(seconds=0.5),
        poke_interval=0.1,
        timeout=30,
    )

    with caplog.at_level(logging.WARNING):
        counts = wait.execute({})

    assert counts["complete"] is False  # refusals keep the wait going until its deadline
    # The task logger is structlog's on Airflow 3.1+ (printed), the standard library's on 3.0.
    logged = caplog.text + capsys.readouterr().out
    assert re.search(
        r"the receiver refused 1 call\(s\) for this connection in the last hour: 1 the caller's address is "
        r"not allowed \(dlr_allowed_callers\), latest at \d\d:\d\d:\d\d UTC \(calls from 127\.0\.0\.1 are "
        r"not allowed .*\): add the service's address to the connection's dlr_allowed_callers",
        logged,
    ), logged[-3000:]


def test_concurrent_reports_share_commits_and_each_is_stored_once(
    receiver: ThreadedServer, fresh_table: Any
) -> None:
    bodies = [json.dumps(report(f"3364{index:07d}", campaign_id=6161)).encode() for index in range(200)]
    # Every report twice, all at once: the second of each pair is a duplicate, whichever commit holds it.
    calls = bodies + bodies

    async def post_all() -> list[httpx.Response]:
        # A connection per call: a kept-alive one can be closed by the server (uvicorn's 5 s keep-alive
        # timeout) as the client sends on it when a loaded machine stalls the test (an httpx.ReadError).
        limits = httpx.Limits(max_connections=32, max_keepalive_connections=0)
        async with httpx.AsyncClient(timeout=60, limits=limits) as client:
            url = f"{receiver.url}/sms/delivery-reports/sms_default"
            return await asyncio.gather(*(client.post(url, content=body, headers=HEADERS) for body in calls))

    answers = asyncio.run(post_all())
    assert Counter(answer.json()["outcome"] for answer in answers) == {"recorded": 200, "duplicate": 200}
    assert stored(fresh_table, 6161) == 200
    flushed(fresh_table)
    assert summary(receiver, 6161).by_status == {"delivered": 200}
