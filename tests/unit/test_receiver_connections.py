"""The connections the delivery-report receiver serves (delivery_reports/connections.py), without a server.

Airflow's secrets lookup (``Connection.get_connection_from_secrets``) and the webhook's reading
(``SmsHook.get_webhook``) are replaced by counting fakes; the clock is the one ``Connections`` takes.
The last test starts the receiver as ``make demo`` serves it, in a subprocess: it must print no warning.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from airflow.models.connection import Connection
from airflow.providers.common.compat.sdk import AirflowNotFoundException

from airflow_provider_sms.api_server.refusal import Refusal
from airflow_provider_sms.delivery_reports import connections as connections_module
from airflow_provider_sms.delivery_reports.connections import (
    CONNECTION_TTL,
    NOT_RECEIVING,
    REFUSED_NAMES_KEPT,
    SIGNATURE_TTL,
    Connections,
    require_settings,
)
from airflow_provider_sms.hooks.sms import SmsHook
from airflow_provider_sms.models import Webhook

# The real check of the metadata database, before the fixture replaces it.
STORED_IN_DATABASE = connections_module._stored_in_database


def sms_connection(conn_id: str, token: str = "token-1", **extra: Any) -> Connection:
    return Connection(
        conn_id=conn_id,
        conn_type="sms",
        host="https://sms.example.test",
        password=token,
        extra=json.dumps(extra),
    )


class Secrets:
    """Airflow's secrets backends as a dict, counting lookups; a name in ``gates`` waits for its event."""

    def __init__(self) -> None:
        self.connections: dict[str, Connection] = {
            "sms_default": sms_connection("sms_default", dlr_webhook_id="1"),
            "no_dlr": sms_connection("no_dlr"),
            "bad_settings": sms_connection("bad_settings", dlr_webhook_id="1", dlr_max_body=1),
            "not_sms": Connection(conn_id="not_sms", conn_type="http", host="http://x"),
        }
        self.lookups: list[str] = []
        self.gates: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def get(self, conn_id: str) -> Connection:
        with self._lock:
            self.lookups.append(conn_id)
        gate = self.gates.get(conn_id)
        if gate is not None:
            assert gate.wait(10), f"the test never opened the gate of {conn_id!r}"
        if conn_id not in self.connections:
            raise AirflowNotFoundException(f"The conn_id `{conn_id}` isn't defined")
        return self.connections[conn_id]


@pytest.fixture
def secrets(monkeypatch: pytest.MonkeyPatch) -> Secrets:
    fake = Secrets()
    monkeypatch.setattr(
        Connection, "get_connection_from_secrets", classmethod(lambda _cls, conn_id: fake.get(conn_id))
    )
    # The metadata database's own word on a name Airflow's lookup did not find: here, the same dict.
    monkeypatch.setattr(
        connections_module, "_stored_in_database", lambda conn_id: conn_id in fake.connections
    )
    return fake


@pytest.fixture
def webhook_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """GET /webhook/:id answered with the signature ``sig-<token>``; each read's token is listed."""
    reads: list[str] = []

    def get_webhook(hook: SmsHook, webhook_id: str | int) -> Webhook:
        token = hook.settings.token
        reads.append(token)
        return Webhook(
            webhook_id=str(webhook_id), type="DLR", url="u", status="live", signature=f"sig-{token}"
        )

    monkeypatch.setattr(SmsHook, "get_webhook", get_webhook)
    return reads


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def refusal_of(connections: Connections, conn_id: str) -> Refusal:
    """What the receiver answers a call naming ``conn_id`` (its step check_connection), as a Refusal."""
    with pytest.raises(Refusal) as caught:
        require_settings(connections.get(conn_id), conn_id)
    return caught.value


@pytest.mark.parametrize(
    ("conn_id", "logged"),
    [
        ("nobody", "there is no such connection"),
        ("not_sms", "it is a 'http' connection, not an sms one"),
        ("bad_settings", "dlr_max_body must be a number of bytes"),
        ("no_dlr", "its extra has no dlr_webhook_id"),
        ("x" * 251, "longer than a connection id can be (250 characters)"),
    ],
    ids=["no-connection", "not-sms", "bad-settings", "no-webhook-id", "name-too-long"],
)
def test_every_name_that_receives_no_reports_gets_the_same_404_and_the_log_says_why(
    secrets: Secrets, caplog: pytest.LogCaptureFixture, conn_id: str, logged: str
) -> None:
    caplog.set_level("WARNING", logger=connections_module.__name__)
    connections = Connections()

    refused = refusal_of(connections, conn_id)

    assert (refused.status, refused.detail) == (404, NOT_RECEIVING)
    assert [record.levelname for record in caplog.records] == ["WARNING"]
    assert logged in caplog.text
    # A name no connection id can be is refused without asking the secrets backends.
    assert secrets.lookups == ([] if len(conn_id) > 250 else [conn_id])


def test_an_sms_connection_that_receives_nothing_is_kept_with_its_token_for_its_readers(
    secrets: Secrets,
) -> None:
    connections = Connections()

    # Its readers' key is checked against its token: one with the key is told it receives nothing.
    kept = {name: connections.get(name) for name in ("no_dlr", "bad_settings")}

    assert {name: (one.settings, one.hook.settings.token) for name, one in kept.items()} == {
        "no_dlr": (None, "token-1"),
        "bad_settings": (None, "token-1"),
    }


def test_a_made_up_name_is_looked_up_and_logged_once_per_ttl(
    secrets: Secrets, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("WARNING", logger=connections_module.__name__)
    clock = Clock()
    connections = Connections(clock=clock)

    for _ in range(5):
        assert refusal_of(connections, "made-up").detail == NOT_RECEIVING
    # The receiver's first look, without a thread: the kept refusal, no lookup.
    with pytest.raises(Refusal):
        connections.fresh("made-up")
    assert (secrets.lookups, len(caplog.records)) == (["made-up"], 1)

    clock.now += CONNECTION_TTL
    assert connections.fresh("made-up") is None
    refusal_of(connections, "made-up")
    assert (secrets.lookups, len(caplog.records)) == (["made-up", "made-up"], 2)


def test_the_names_kept_are_bounded_and_the_oldest_lookup_goes_first(
    secrets: Secrets, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert REFUSED_NAMES_KEPT == 4096
    monkeypatch.setattr(connections_module, "REFUSED_NAMES_KEPT", 8)
    connections = Connections(clock=Clock())

    for index in range(20):
        refusal_of(connections, f"made-up-{index}")
    refusal_of(connections, "made-up-19")  # kept
    refusal_of(connections, "made-up-0")  # dropped long ago: looked up again

    assert len(connections._refused) == 8
    assert secrets.lookups == [f"made-up-{index}" for index in range(20)] + ["made-up-0"]
    # Overlong names are kept cut: a caller cannot make the names kept take more memory than that.
    refusal_of(connections, "y" * 100_000)
    assert max(len(name) for name in connections._refused) == 251


def test_a_slow_lookup_holds_up_no_other_name_and_calls_for_one_name_share_a_lookup(secrets: Secrets) -> None:
    connections = Connections()
    secrets.gates["slow"] = threading.Event()
    answers: list[str] = []

    def call() -> None:
        answers.append(refusal_of(connections, "slow").detail)

    callers = [threading.Thread(target=call) for _ in range(8)]
    for caller in callers:
        caller.start()
    try:
        # While "slow" is being looked up, other names are answered (this would hang under one lock).
        assert connections.get("sms_default").settings is not None
        assert refusal_of(connections, "nobody").detail == NOT_RECEIVING
    finally:
        secrets.gates["slow"].set()
        for caller in callers:
            caller.join(10)
    assert answers == [NOT_RECEIVING] * 8
    assert secrets.lookups.count("slow") == 1
    assert connections._lookups == {}


def test_a_lookup_that_fails_is_not_kept_and_the_next_call_looks_again(
    secrets: Secrets, monkeypatch: pytest.MonkeyPatch
) -> None:
    connections = Connections()
    secrets.connections["flaky"] = sms_connection("flaky", dlr_webhook_id="1")
    real_get = secrets.get
    monkeypatch.setattr(secrets, "get", lambda conn_id: (_ for _ in ()).throw(OSError("vault down")))
    with pytest.raises(OSError, match="vault down"):
        connections.get("flaky")
    monkeypatch.setattr(secrets, "get", real_get)

    assert connections.get("flaky").settings is not None
    assert connections._lookups == {}


def test_a_metadata_database_that_cannot_be_read_is_503_for_every_name_and_nothing_is_kept(
    secrets: Secrets, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Airflow's lookup logs a backend's error and says "not found": that must not become the 404 the
    service would not post again."""
    from airflow.utils import session as session_module
    from sqlalchemy.exc import OperationalError

    def unreachable(*_: Any, **__: Any) -> Any:
        raise OperationalError("SELECT", {}, ConnectionRefusedError("connection refused"))

    monkeypatch.setattr(connections_module, "_stored_in_database", STORED_IN_DATABASE)  # the real check
    monkeypatch.setattr(session_module, "create_session", unreachable)
    connections = Connections()
    # sms_default's lookup fails the way Airflow's does when the database is down: "not found".
    del secrets.connections["sms_default"]

    answers = [refusal_of(connections, name) for name in ("sms_default", "made_up", "sms_default")]

    assert {(refused.status, refused.headers["Retry-After"]) for refused in answers} == {(503, "30")}
    assert len({refused.detail for refused in answers}) == 1  # the same for every name
    assert secrets.lookups == ["sms_default", "made_up", "sms_default"]  # not kept: looked up again
    assert "connections cannot be read" in caplog.text


def test_a_connection_the_database_holds_but_the_lookup_missed_is_503(
    secrets: Secrets, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A secrets backend before the database failed, or the database's read failed once: not a 404.
    monkeypatch.setattr(connections_module, "_stored_in_database", lambda conn_id: True)
    connections = Connections()

    refused = refusal_of(connections, "nobody_here")

    assert (refused.status, refused.headers) == (503, {"Retry-After": "30"})


def test_the_signature_lives_five_minutes_across_connection_re_reads(
    secrets: Secrets, webhook_reads: list[str]
) -> None:
    clock = Clock()
    connections = Connections(clock=clock)
    assert connections.signature(connections.get("sms_default")) == "sig-token-1"

    # The connection is read again every 30 s; the signature read 4m50s ago is still the one kept.
    for _ in range(9):
        clock.now += CONNECTION_TTL + 1
        receiving = connections.get("sms_default")
        assert connections.known_signature(receiving) == "sig-token-1"
        assert connections.signature(receiving) == "sig-token-1"
    assert (secrets.lookups.count("sms_default"), webhook_reads) == (10, ["token-1"])

    clock.now += SIGNATURE_TTL - 9 * (CONNECTION_TTL + 1)
    receiving = connections.get("sms_default")
    assert connections.known_signature(receiving) is None
    assert connections.signature(receiving) == "sig-token-1"
    assert webhook_reads == ["token-1", "token-1"]


@pytest.mark.parametrize(
    "changed",
    [{"token": "token-2"}, {"dlr_webhook_id": "2"}],
    ids=["new-token", "new-webhook-id"],
)
def test_a_connection_read_again_with_another_token_or_webhook_reads_the_signature_again(
    secrets: Secrets, webhook_reads: list[str], changed: dict[str, str]
) -> None:
    clock = Clock()
    connections = Connections(clock=clock)
    connections.signature(connections.get("sms_default"))
    secrets.connections["sms_default"] = sms_connection(
        "sms_default",
        token=changed.get("token", "token-1"),
        dlr_webhook_id=changed.get("dlr_webhook_id", "1"),
    )

    clock.now += CONNECTION_TTL
    receiving = connections.get("sms_default")

    assert connections.known_signature(receiving) is None
    expected = changed.get("token", "token-1")
    assert connections.signature(receiving) == f"sig-{expected}"
    assert webhook_reads == ["token-1", expected]


def test_the_flushers_lookups_log_nothing_and_a_call_says_why_it_is_refused_once_per_lookup(
    secrets: Secrets, caplog: pytest.LogCaptureFixture
) -> None:
    from airflow_provider_sms.api_server.app import build_app
    from airflow_provider_sms.delivery_reports.flusher import default_limits

    caplog.set_level("WARNING", logger=connections_module.__name__)
    clock = Clock()
    connections = Connections(clock=clock)
    # The flusher's per-connection limits, as the receiver's app gives them to it.
    limits = build_app(connections, group_commit=1).state.flusher._limits

    # Connections with campaigns, looked at on the flusher's timer for 9 minutes: a send-only one (no
    # dlr_webhook_id), one since deleted, one that receives.
    for _ in range(9 * 60):
        clock.now += 1
        assert limits("no_dlr") == limits("nobody") == default_limits("no_dlr")
        assert connections.settings("sms_default") is not None
    assert secrets.lookups.count("no_dlr") == 9 * 60 // CONNECTION_TTL  # read again each TTL, quietly
    assert caplog.messages == []

    # Calls for them: each says why, once for what the last lookup found.
    for _ in range(3):
        refusal_of(connections, "no_dlr")
        with pytest.raises(Refusal):
            connections.fresh("nobody")
    assert caplog.messages == [
        "Delivery reports: calls for 'no_dlr' are refused: its extra has no dlr_webhook_id",
        "Delivery reports: calls for 'nobody' are refused: there is no such connection",
    ]
    # The timer's next lookup is a new answer: the next call says why again.
    clock.now += CONNECTION_TTL
    assert limits("no_dlr") == default_limits("no_dlr")
    assert len(caplog.messages) == 2
    refusal_of(connections, "no_dlr")
    refusal_of(connections, "no_dlr")
    assert len(caplog.messages) == 3


# The receiver as `make demo` starts it, with the warnings a user would see made errors: every one Python
# shows by default, and a deprecation the provider's own code or the demo calls.
DEMO_RECEIVER = """
import sys
import warnings
from pathlib import Path

warnings.simplefilter("error")
warnings.simplefilter("ignore", DeprecationWarning)
warnings.filterwarnings(
    "error", category=DeprecationWarning, module=r"(airflow_provider_sms|dags_examples)(\\.|$)"
)

from dags_examples.demo import airflow_env, delivery_receiver

home = Path(sys.argv[1])
with delivery_receiver(airflow_env(home, home)) as url:
    print("receiver at", url)
assert "starlette.testclient" not in sys.modules, "Starlette's test client was imported"
"""


def test_the_receiver_as_the_demo_serves_it_prints_no_warning(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", DEMO_RECEIVER, str(tmp_path)],
        cwd=Path(__file__).parents[2],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "receiver at http://127.0.0.1:" in done.stdout
