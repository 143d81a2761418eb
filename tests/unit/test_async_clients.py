"""SmsAsyncHook's shared client: one per event loop and connection, closed by its last user or the loop's end.

Also: overlapping GET /npai reads are made once, and a read nobody waits for any more is cancelled.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from airflow_provider_sms.hooks import _async_clients
from airflow_provider_sms.hooks.sms import MAX_CONNECTIONS, SmsAsyncHook
from airflow_provider_sms.sandbox import wire
from tests.async_hooks import mock_transport

from .conftest import connection_json
from .samples import WEBHOOK, npai_entry


class Built:
    """Every client SmsAsyncHook._client built, routed to an in-memory service counting its requests."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fmt: str = "json") -> None:
        self.clients: list[httpx.AsyncClient] = []
        self.paths: list[str] = []
        self.fmt = fmt
        build = SmsAsyncHook._client

        def client(hook: SmsAsyncHook, settings: Any) -> httpx.AsyncClient:
            made = build(hook, settings, transport=mock_transport(self.answer))
            self.clients.append(made)
            return made

        monkeypatch.setattr(SmsAsyncHook, "_client", client)

    def answer(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        if request.url.path == "/npai":
            listing = {"status": 1, "message": "OK", "list": [npai_entry("1")], "totalRecords": 1}
            return httpx.Response(200, content=wire.encode_response(listing, self.fmt))
        webhook = {"status": 1, "message": "OK", "webhook": WEBHOOK}
        return httpx.Response(200, content=wire.encode_response(webhook, self.fmt))


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> Built:
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", connection_json())
    monkeypatch.setenv("AIRFLOW_CONN_SMS_OTHER", connection_json(timeout=5))
    return Built(monkeypatch)


async def test_hooks_of_one_loop_and_connection_share_one_client_closed_by_the_last(built):
    first, second, other = SmsAsyncHook(), SmsAsyncHook(), SmsAsyncHook("sms_other")

    await asyncio.gather(first.get_webhook("1839"), second.get_webhook("1839"), other.get_webhook("1839"))

    # Another connection (here another timeout) gets a client of its own.
    assert len(built.clients) == 2
    shared = built.clients[0]
    await first.aclose()
    assert not shared.is_closed
    await second.aclose()
    assert shared.is_closed
    await other.aclose()
    assert all(client.is_closed for client in built.clients)
    assert not _async_clients._by_loop  # nothing left behind, the closer task included


async def test_requests_in_flight_are_bounded_by_the_pool(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", connection_json())
    in_flight, most = 0, 0

    async def slow(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await asyncio.sleep(0.01)
        in_flight -= 1
        webhook = {"status": 1, "message": "OK", "webhook": WEBHOOK}
        # Streamed, as a network answer is (the hook reads the raw stream).
        return httpx.Response(200, stream=httpx.ByteStream(wire.encode_response(webhook, "json")))

    build = SmsAsyncHook._client
    monkeypatch.setattr(
        SmsAsyncHook, "_client", lambda self, s: build(self, s, transport=httpx.MockTransport(slow))
    )
    hooks = [SmsAsyncHook() for _ in range(3 * MAX_CONNECTIONS)]

    await asyncio.gather(*(hook.get_webhook("1839") for hook in hooks))

    assert most == MAX_CONNECTIONS
    for hook in hooks:
        await hook.aclose()
    # The client's own pool is bounded alike.
    client = build(SmsAsyncHook(), await hooks[0].get_settings())
    assert client._transport._pool._max_connections == MAX_CONNECTIONS  # type: ignore[attr-defined]
    await client.aclose()


async def test_a_hook_used_again_after_aclose_gets_a_new_client(built):
    async with SmsAsyncHook() as hook:
        await hook.get_webhook("1839")
    async with SmsAsyncHook() as hook:
        await hook.get_webhook("1839")

    assert len(built.clients) == 2
    assert all(client.is_closed for client in built.clients)


def test_clients_of_hooks_never_closed_are_closed_when_the_loop_ends(built):
    async def forgetful() -> None:
        await SmsAsyncHook().get_webhook("1839")

    asyncio.run(forgetful())

    assert built.clients[0].is_closed


def test_each_loop_has_its_own_client(built):
    async def read() -> None:
        async with SmsAsyncHook() as hook:
            await hook.get_webhook("1839")

    asyncio.run(read())
    asyncio.run(read())

    assert len(built.clients) == 2


async def test_overlapping_npai_reads_are_made_once_and_shared(built):
    hooks = [SmsAsyncHook() for _ in range(5)]

    results = await asyncio.gather(*(hook.get_npai() for hook in hooks))

    assert built.paths.count("/npai") == 1
    assert all(result is results[0] for result in results)
    assert [entry.id for entry in results[0].entries] == ["1"]
    # Reads that do not overlap are made again.
    await hooks[0].get_npai()
    assert built.paths.count("/npai") == 2
    for hook in hooks:
        await hook.aclose()
    assert built.clients[0].is_closed


async def test_a_shared_read_goes_on_for_the_others_when_one_caller_stops_waiting(monkeypatch, built):
    release = asyncio.Event()

    async def gated_get(self: SmsAsyncHook, pool: Any, path: str, params: Any = None) -> bytes:
        await release.wait()
        return await real_get(self, pool, path, params)

    real_get = SmsAsyncHook._get
    monkeypatch.setattr(SmsAsyncHook, "_get", gated_get)
    leaving, staying = SmsAsyncHook(), SmsAsyncHook()
    left = asyncio.create_task(leaving.get_npai())
    stays = asyncio.create_task(staying.get_npai())
    await asyncio.sleep(0.01)

    left.cancel()
    await asyncio.gather(left, return_exceptions=True)
    release.set()

    assert [entry.id for entry in (await stays).entries] == ["1"]
    assert built.paths.count("/npai") == 1
    await leaving.aclose()
    await staying.aclose()


async def test_a_shared_read_nobody_waits_for_is_cancelled_and_its_share_given_back(monkeypatch, built):
    started = asyncio.Event()

    async def stuck_get(self: SmsAsyncHook, pool: Any, path: str, params: Any = None) -> bytes:
        started.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    monkeypatch.setattr(SmsAsyncHook, "_get", stuck_get)
    hook = SmsAsyncHook()
    waiting = asyncio.create_task(hook.get_npai())
    await started.wait()

    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)

    entry = _async_clients._by_loop[asyncio.get_running_loop()]
    assert entry.reads == {}
    await hook.aclose()
    assert built.clients[0].is_closed
    assert not _async_clients._by_loop


async def test_overlapping_connection_lookups_are_made_once(monkeypatch, built):
    from airflow.providers.common.compat import connection as compat_connection

    looked_up: list[str] = []
    lookup = compat_connection.get_async_connection

    async def counted(conn_id: str, **kwargs: Any) -> Any:
        looked_up.append(conn_id)
        await asyncio.sleep(0.01)  # the triggerer asks its supervisor: other triggers run meanwhile
        return await lookup(conn_id, **kwargs)

    monkeypatch.setattr(compat_connection, "get_async_connection", counted)
    hooks = [SmsAsyncHook() for _ in range(50)] + [SmsAsyncHook("sms_other")]

    settings = await asyncio.gather(*(hook.get_settings() for hook in hooks))

    assert sorted(looked_up) == ["sms_default", "sms_other"]
    assert settings[0] == settings[49] != settings[50]
    assert settings[50].timeout == 5
    # Each hook keeps what it got; a later hook looks up again (a changed connection is seen).
    await hooks[0].get_settings()
    await SmsAsyncHook().get_settings()
    assert looked_up.count("sms_default") == 2
    # An XML hook of the same connection is another lookup: its settings differ.
    assert (await SmsAsyncHook(format="xml").get_settings()).format == "xml"
    assert looked_up.count("sms_default") == 3


async def test_a_failed_connection_lookup_reaches_every_waiter_and_is_not_kept(monkeypatch, built):
    from airflow.providers.common.compat import connection as compat_connection
    from airflow.providers.common.compat.sdk import AirflowNotFoundException

    looked_up: list[str] = []

    async def missing(conn_id: str, **kwargs: Any) -> Any:
        looked_up.append(conn_id)
        await asyncio.sleep(0.01)
        raise AirflowNotFoundException(f"The conn_id `{conn_id}` isn't defined")

    monkeypatch.setattr(compat_connection, "get_async_connection", missing)
    hooks = [SmsAsyncHook("sms_missing") for _ in range(3)]

    outcomes = await asyncio.gather(*(hook.get_settings() for hook in hooks), return_exceptions=True)

    assert looked_up == ["sms_missing"]
    assert all(isinstance(outcome, AirflowNotFoundException) for outcome in outcomes)
    # Nothing is kept: the next call looks up again (the connection may have been added since).
    with pytest.raises(AirflowNotFoundException):
        await hooks[0].get_settings()
    assert looked_up == ["sms_missing", "sms_missing"]
    assert not _async_clients._by_loop


async def test_under_dags_test_the_connection_is_read_through_the_blocking_lookup(monkeypatch, built):
    """`airflow dags test` runs the trigger with comms that have `send` but no `asend`: the async lookup
    would report the metadata database's connections missing, so the blocking one runs in a thread."""
    from airflow.providers.common.compat import connection as compat_connection
    from airflow.sdk.execution_time import task_runner

    from airflow_provider_sms.hooks.sms import SmsHook

    class SendOnlyComms:
        def send(self, msg: Any) -> Any:
            raise AssertionError("not reached: SmsHook.get_connection is replaced below")

    async def async_lookup(conn_id: str, **kwargs: Any) -> Any:
        raise AssertionError("the async lookup cannot reach the metadata database under dags test")

    blocking = SmsHook.get_connection
    looked_up: list[str] = []

    def get_connection(conn_id: str) -> Any:
        looked_up.append(conn_id)
        return blocking(conn_id)  # AIRFLOW_CONN_SMS_DEFAULT stands for the database's connection

    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", SendOnlyComms(), raising=False)
    monkeypatch.setattr(compat_connection, "get_async_connection", async_lookup)
    monkeypatch.setattr(SmsHook, "get_connection", staticmethod(get_connection))

    settings = await SmsAsyncHook().get_settings()

    assert looked_up == ["sms_default"]
    assert settings.token
