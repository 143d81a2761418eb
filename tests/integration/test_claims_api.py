"""The claim store through the API server, as a worker's task reaches it: the provider's app served on
127.0.0.1 (on the session's migrated metadata database), the sandbox as the service, and the send
operator run in this process with its database path turned off, so that it claims over HTTP as a task
run by an executor does (whose database access the Task SDK blocks).

The faults sit between the worker and the API server: no server, 503, an answer lost after the commit,
an answer slower than the client's timeout. Whatever the fault, nothing is sent unless the store decided,
and the campaign goes out once.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from airflow.providers.common.compat.sdk import AirflowFailException
from fastapi import FastAPI
from sqlalchemy import select

from airflow_provider_sms.api_server.app import build_app
from airflow_provider_sms.api_server.claims import TABLES, claim_table
from airflow_provider_sms.api_server.claims_api import CLAIMS_REFUSED, claim_key
from airflow_provider_sms.delivery_reports.settings import URL_PREFIX
from airflow_provider_sms.operators import _claims, _send_guard
from airflow_provider_sms.operators.sms import SmsSendOperator
from airflow_provider_sms.sandbox.server import ThreadedServer
from airflow_provider_sms.sandbox.testing import TEST_TOKEN
from tests import claim_store_checks as checks
from tests.conftest import MemoryVariables
from tests.task_instance import FakeTaskInstance
from tests.tls_server import TlsFront, make_certificate

if TYPE_CHECKING:
    from collections.abc import Iterator

    from airflow_provider_sms.sandbox.server import SandboxServer

pytestmark = pytest.mark.integration

NUMBERS = ["33612000401", "33612000402", "33612000403"]
FUTURE = "2030-07-01T08:00:00+00:00"


class Faults:
    """What the API server does to the next claim calls: ``mode`` for ``times`` calls.

    - ``unavailable``: 503, the call never reaches the store;
    - ``lost``: the store decides and commits, then the connection breaks mid-answer;
    - ``slow``: the store decides and commits, then the answer outlasts the client's timeout.
    """

    def __init__(self) -> None:
        self.mode: str | None = None
        self.times = 0
        self.met = 0
        # The path of every claim call, as it came.
        self.calls: list[str] = []

    def set(self, mode: str, times: int = 1) -> None:
        self.mode, self.times = mode, times

    def wrap(self, app: Any) -> Any:
        async def faulty(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http" and "/claims/" in scope["path"]:
                self.calls.append(scope["path"])
            if (
                scope["type"] != "http"
                or "/claims/" not in scope["path"]
                or not self.times
                or self.mode is None
            ):
                await app(scope, receive, send)
                return
            self.times -= 1
            self.met += 1
            if self.mode == "unavailable":
                await send({"type": "http.response.start", "status": 503, "headers": []})
                await send({"type": "http.response.body", "body": b'{"detail": "restarting"}'})
                return
            answered: list[Any] = []

            async def keep(message: Any) -> None:
                answered.append(message)

            await app(scope, receive, keep)  # the store decides and commits
            if self.mode == "slow":
                await asyncio.sleep(SLOW_ANSWER)
                for message in answered:
                    await send(message)
                return
            start = dict(answered[0])
            start["headers"] = [*start.get("headers", []), (b"content-length", b"100000")]
            await send(start)
            await send({"type": "http.response.body", "body": b"{", "more_body": True})
            raise ConnectionResetError("the answer is lost")

        return faulty


# The client waits this long for an answer here; a slow answer takes longer.
CLIENT_TIMEOUT = 0.5
SLOW_ANSWER = 1.5


@pytest.fixture
def faults() -> Faults:
    return Faults()


@pytest.fixture
def api_server(metadata_db: Any, monkeypatch: pytest.MonkeyPatch, faults: Faults) -> Iterator[ThreadedServer]:
    """The provider's app mounted under /sms as the API server mounts it, on the session's migrated
    metadata database (its claim tables emptied); the send guard in memory."""
    monkeypatch.setattr(_send_guard, "Variable", MemoryVariables)
    monkeypatch.setattr(MemoryVariables, "store", {})
    with metadata_db.engine.begin() as connection:
        for table in reversed(TABLES):
            connection.execute(table.delete())
    server_app = FastAPI()
    server_app.mount(URL_PREFIX, build_app())
    with ThreadedServer(faults.wrap(server_app), name="the API server") as server:
        yield server


@pytest.fixture
def worker(monkeypatch: pytest.MonkeyPatch, sms_sandbox: SandboxServer, api_server: ThreadedServer) -> Any:
    """The sms_default connection on the sandbox, reaching the API server at dlr_api_url; this process
    claims over HTTP, with a short timeout and no wait between tries."""
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", sms_sandbox.connection_json(dlr_api_url=api_server.url))
    monkeypatch.setattr(_claims, "database_in_process", lambda: False)
    monkeypatch.setattr(_claims, "STORE_TIMEOUT", CLIENT_TIMEOUT)
    monkeypatch.setattr("tenacity.nap.time.sleep", lambda _seconds: None)
    return sms_sandbox


def send(run_id: str, **kwargs: Any) -> dict[str, Any]:
    arguments: dict[str, Any] = {"task_id": "send", "message": "Hi", "recipients": NUMBERS, "delay": FUTURE}
    return SmsSendOperator(**(arguments | kwargs)).execute({"ti": FakeTaskInstance(run_id=run_id)})


def claims() -> list[Any]:
    from airflow import settings

    with settings.engine.connect() as connection:
        return list(connection.execute(select(claim_table).order_by(claim_table.c.id)))


def test_a_worker_claims_through_the_api_server_and_a_second_run_is_refused(worker):
    first = send("scheduled__2030-06-30")
    with pytest.raises(AirflowFailException, match="was already sent") as info:
        send("manual__2030-06-30")

    assert f"ticket {first['ticket']}" in str(info.value)
    assert len(worker.inspect.campaigns()) == 1
    (claim,) = claims()
    assert (claim.run_id, claim.state, json.loads(claim.tickets)) == (
        "scheduled__2030-06-30",
        "sent",
        [first["ticket"]],
    )


def test_the_old_list_plus_one_row_over_http_reaches_only_the_new_row(worker):
    send("run_a")
    result = send("run_b", recipients=[*NUMBERS, "33612000499"])
    assert result["sent"] == 1
    assert result["already_sent"]["numbers"] == 3
    assert [campaign["sent_to"] for campaign in worker.inspect.campaigns()] == [NUMBERS, ["33612000499"]]


def test_a_send_claims_its_first_numbers_with_its_claim_and_the_rest_chunk_by_chunk(worker, faults):
    send("run_a")
    one_batch = [path.rsplit("/", 1)[-1] for path in faults.calls]
    faults.calls.clear()
    send("run_b", recipients=[f"336120005{index:02d}" for index in range(4)], batch_size=2)
    two_batches = [path.rsplit("/", 1)[-1] for path in faults.calls]

    # The claim carries the first chunk; each later batch is a chunk of its own; then the tickets.
    assert one_batch == ["sms_default", "sent"]
    assert two_batches == ["sms_default", "numbers", "sent"]
    assert len(worker.inspect.campaigns()) == 3


@pytest.mark.parametrize(
    "call",
    [
        {"headers": {}},
        {"headers": {"Authorization": "Bearer wrong"}},
        {"headers": {"Authorization": "Bearer wrong"}, "content": b"not json"},
        {"headers": {"Authorization": f"Bearer {claim_key(TEST_TOKEN)}"}, "conn_id": "sms_made_up"},
    ],
)
def test_the_claim_routes_answer_one_401_without_the_connections_key(worker, api_server, call):
    conn_id = call.get("conn_id", "sms_default")
    answer = httpx.post(
        f"{api_server.url}/sms/claims/{conn_id}", content=call.get("content", b"{}"), headers=call["headers"]
    )
    assert (answer.status_code, answer.json()) == (401, {"detail": CLAIMS_REFUSED})
    assert claims() == []


def test_with_the_key_a_bad_body_is_a_422_naming_the_field(worker, api_server):
    answer = httpx.post(
        f"{api_server.url}/sms/claims/sms_default",
        json={"claimant": {"dag_id": "d"}},
        headers={"Authorization": f"Bearer {claim_key(TEST_TOKEN)}"},
    )
    assert answer.status_code == 422
    assert "claimant.task_id" in answer.json()["detail"]


@pytest.mark.parametrize("mode", ["unavailable", "lost", "slow"])
def test_one_fault_is_asked_again_and_the_campaign_goes_out_once(worker, faults, mode):
    faults.set(mode, times=1)
    result = send("run_a")
    assert faults.met == 1
    assert result["sent"] == 3
    assert len(worker.inspect.campaigns()) == 1
    assert len(claims()) == 1


@pytest.mark.parametrize("mode", ["unavailable", "lost"])
def test_a_store_that_never_decides_sends_nothing_and_the_retry_finds_its_claim(worker, faults, mode):
    faults.set(mode, times=_claims.STORE_TRIES)
    with pytest.raises(_claims.ClaimStoreError, match="did not decide after 3 tries") as info:
        send("run_a")
    assert "dlr_api_url" in str(info.value)
    assert not any(worker.inspect.requests().values())

    # Airflow's retry of the same task instance: its claim (committed when the answer was lost) is its own.
    assert send("run_a")["sent"] == 3
    with pytest.raises(AirflowFailException, match="was already sent"):
        send("run_b")
    assert len(worker.inspect.campaigns()) == 1


def test_an_unreachable_api_server_sends_nothing(monkeypatch, worker):
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", worker.connection_json(dlr_api_url="http://127.0.0.1:9"))
    with pytest.raises(_claims.ClaimStoreError) as info:
        send("run_a")
    assert "http://127.0.0.1:9/sms/claims/sms_default" in str(info.value)
    assert "ConnectError" in str(info.value)
    assert not any(worker.inspect.requests().values())


def test_no_api_server_url_is_a_clear_error_before_any_request(monkeypatch, worker):
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", worker.connection_json())
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "")
    with pytest.raises(_claims.ClaimStoreError, match="dlr_api_url"):
        send("run_a")
    assert not any(worker.inspect.requests().values())


def test_tables_missing_are_a_500_naming_the_migration_and_nothing_is_sent(worker, api_server, metadata_db):
    from airflow_provider_sms.api_server.claims import claim_lock_table

    with metadata_db.engine.begin() as connection:
        claim_lock_table.drop(connection)
    try:
        answer = httpx.post(
            f"{api_server.url}/sms/claims/sms_default",
            content=checks.request("run_a").model_dump_json(),
            headers={"Authorization": f"Bearer {claim_key(TEST_TOKEN)}"},
        )
        assert answer.status_code == 500
        assert "airflow db migrate" in answer.json()["detail"]
        with pytest.raises(_claims.ClaimStoreError, match="did not decide after 3 tries"):
            send("run_a")
    finally:
        with metadata_db.engine.begin() as connection:
            claim_lock_table.create(connection)
    assert not any(worker.inspect.requests().values())


def test_a_body_over_the_bound_is_a_413_and_decides_nothing(worker, api_server):
    from airflow_provider_sms.api_server.claims_api import MAX_BODY

    answer = httpx.post(
        f"{api_server.url}/sms/claims/sms_default",
        content=b" " * (MAX_BODY + 1),
        headers={"Authorization": f"Bearer {claim_key(TEST_TOKEN)}"},
    )
    assert answer.status_code == 413
    assert claims() == []


def test_an_api_server_whose_certificate_cannot_be_verified_gets_no_claim(
    monkeypatch, worker, api_server, tmp_path
):
    """An https API server is verified (a plain-HTTP one needs no TLS context): a certificate the worker
    does not trust fails the send before any request to the service, naming the store."""
    front = TlsFront(make_certificate(tmp_path), api_server.url)
    try:
        monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", worker.connection_json(dlr_api_url=front.url))
        with pytest.raises(_claims.ClaimStoreError, match="CERTIFICATE_VERIFY_FAILED"):
            send("run_a")
    finally:
        front.stop()
    assert front.handshake_failures >= 1
    assert worker.inspect.campaigns() == []
    assert claims() == []


# SmsNotifier's alert folds, through the same routes (a callback in a worker, the DAG processor or the
# triggerer has no database either).
ON_CALL = ["33612000411", "33612000412"]


@pytest.fixture
def notifier_worker(worker: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The worker, waiting for the store's answer as long as a notifier does (a fold is asked once)."""
    monkeypatch.setattr(_claims, "STORE_TIMEOUT", 30.0)
    return worker


def alert(task_id: str) -> None:
    """A failure callback's SmsNotifier (fold interval 15 minutes), rendered and notified."""
    from types import SimpleNamespace

    from airflow_provider_sms.notifications.sms import SmsNotifier

    notifier = SmsNotifier(text="{{ ti.task_id }} failed", recipients=ON_CALL)
    context: Any = {"dag": None, "ti": SimpleNamespace(task_id=task_id, dag_id="nightly")}
    notifier.render_template_fields(context)
    notifier.notify(context)


def test_a_burst_of_alerts_is_folded_through_the_api_server(notifier_worker, faults, metadata_db):
    worker = notifier_worker
    alert("load")
    alert("extract")
    assert [campaign["text"] for campaign in worker.inspect.campaigns()] == ["load failed"]
    assert [path.rsplit("/", 1)[-1] for path in faults.calls] == ["fold", "fold"]

    checks.rewind_folds(metadata_db.engine, dt.timedelta(minutes=15))
    alert("report")
    texts = [campaign["text"] for campaign in worker.inspect.campaigns()]
    assert texts[0] == "load failed"
    assert texts[1].startswith("report failed (+1 more alert since ")
    assert texts[1].endswith(" UTC: extract failed)")


@pytest.mark.parametrize("mode", ["unavailable", "lost"])
def test_a_fold_store_that_does_not_answer_never_holds_an_alert_and_is_asked_once(
    notifier_worker, faults, mode
):
    worker = notifier_worker
    alert("load")
    faults.set(mode, times=1)
    alert("extract")  # within the interval, but the store did not answer: sent unfolded

    assert faults.met == 1  # asked once: asked again after a lost answer, it would hold the alert
    assert [campaign["text"] for campaign in worker.inspect.campaigns()] == ["load failed", "extract failed"]


def test_the_fold_route_answers_one_401_without_the_connections_key(worker, api_server):
    answer = httpx.post(f"{api_server.url}/sms/claims/sms_default/fold", json={}, headers={})
    assert (answer.status_code, answer.json()) == (401, {"detail": CLAIMS_REFUSED})
