"""Sends over real TLS (issue 27, item 2): "nothing was sent" is decided by where a send failed.

requests raises ``SSLError`` for a failed TLS handshake (nothing sent) and for a TLS record broken while
the answer is read, after the whole POST was written (maybe sent). Against a TLS server on 127.0.0.1
with a certificate made at test time (tests/tls_server.py, the sandbox behind it), no mocks: a send
is ``SmsTransportError`` ("nothing was sent", Airflow may retry) only when it failed before a byte of
the request left, and ``SmsMaybeSentError`` after, whatever the exception's class. The fault matrix
(test_fault_matrix.py) runs the broken-record rows on every endpoint; this file adds what it cannot
show: the exception really is an ``SSLError``, handshake failures, and proxies.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import certifi
import pytest

from airflow_provider_sms.exceptions import SmsMaybeSentError, SmsTransportError
from airflow_provider_sms.hooks._request_progress import ProgressAdapter
from airflow_provider_sms.hooks.sms import SmsHook
from tests.reliability.test_fault_matrix import closed_port
from tests.tls_server import AFTER_STATUS, BEFORE_STATUS, ConnectProxy, TlsFront

if TYPE_CHECKING:
    from airflow_provider_sms.sandbox.server import SandboxServer

pytestmark = pytest.mark.integration

CONN_ID = "sms_tls"
ALERT = {"text": "Your parcel is on its way", "pushtype": "alert"}
NUMBERS = ["33612000001", "33612000002"]
SENDS = {
    "/send": lambda hook: hook.send(ALERT, NUMBERS),
    "/send/lists": lambda hook: hook.send_lists(ALERT, [1]),
}


@pytest.fixture
def sandbox(sms_sandbox: SandboxServer, monkeypatch: pytest.MonkeyPatch) -> SandboxServer:
    """The session's sandbox, reset, with no proxy from the environment."""
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    return sms_sandbox


def connect(
    monkeypatch: pytest.MonkeyPatch, sandbox: SandboxServer, url: str, verify: bool | str = True
) -> SmsHook:
    """A hook on the ``sms_tls`` connection: the sandbox's token at ``url``, with ``verify``."""
    connection = json.loads(sandbox.connection_json("json", timeout=2, verify=verify))
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps({**connection, "host": url}))
    return SmsHook(CONN_ID)


def trusting(monkeypatch: pytest.MonkeyPatch, sandbox: SandboxServer, front: TlsFront) -> SmsHook:
    """A hook on ``front`` that trusts its certificate (the connection's ``verify``)."""
    return connect(monkeypatch, sandbox, front.url, str(front.certificate.cert))


def test_a_send_over_tls_succeeds_with_the_connections_ca_bundle(
    sandbox: SandboxServer, tls_front: TlsFront, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tracking adapter carries a normal send; the connection's ``verify`` beats REQUESTS_CA_BUNDLE."""
    # A CA bundle set for the whole process (common in containers) must not replace the connection's.
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", certifi.where())
    hook = trusting(monkeypatch, sandbox, tls_front)

    result = hook.send(ALERT, NUMBERS)

    assert isinstance(hook.session.get_adapter(tls_front.url), ProgressAdapter)
    assert result.status == 1
    assert len(sandbox.inspect.campaigns()) == 1


@pytest.mark.parametrize("break_at", [BEFORE_STATUS, AFTER_STATUS])
@pytest.mark.parametrize("path", list(SENDS))
def test_tls_broken_after_the_whole_post_is_maybe_sent(
    sandbox: SandboxServer, tls_front: TlsFront, monkeypatch: pytest.MonkeyPatch, path: str, break_at: str
) -> None:
    """The server read the whole POST (the campaign exists), then broke the TLS record: an SSLError,
    and a send that must not be repeated."""
    hook = trusting(monkeypatch, sandbox, tls_front)
    tls_front.break_at, tls_front.breaks = break_at, 1

    with pytest.raises(SmsMaybeSentError, match="must not be sent again") as caught:
        SENDS[path](hook)

    assert "SSLError" in str(caught.value)  # the class that used to read as "nothing was sent"
    tls_front.stop()
    (method, seen_path, body_size), *more = tls_front.requests
    assert (method, seen_path, len(more)) == ("POST", path, 0)
    assert body_size > 0
    assert tls_front.breaks == 0
    assert len(sandbox.inspect.campaigns()) == 1


@pytest.mark.parametrize("failure", ["certificate not trusted", "closed during the handshake"])
def test_a_failed_tls_handshake_is_nothing_sent(
    sandbox: SandboxServer, tls_front: TlsFront, monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    """The handshake failed: no byte of the request left, the server saw none, Airflow may retry."""
    if failure == "certificate not trusted":
        hook = connect(monkeypatch, sandbox, tls_front.url, verify=True)  # self-signed: refused
    else:
        tls_front.close_in_handshake = True
        hook = trusting(monkeypatch, sandbox, tls_front)

    with pytest.raises(SmsTransportError, match="nothing was sent") as caught:
        hook.send(ALERT, NUMBERS)

    assert type(caught.value) is SmsTransportError
    assert "SSLError" in str(caught.value)
    tls_front.stop()  # waits for the server to be done with the connection
    requests_seen = len(tls_front.requests)
    assert requests_seen == 0
    if failure == "certificate not trusted":
        assert tls_front.handshake_failures == 1
    else:
        assert len(tls_front.hellos) == 1
    assert sandbox.inspect.requests()["/send"] == 0


def test_connection_refused_over_https_is_nothing_sent(
    sandbox: SandboxServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing listens: nothing was sent."""
    hook = connect(monkeypatch, sandbox, f"https://127.0.0.1:{closed_port()}")

    with pytest.raises(SmsTransportError, match="nothing was sent") as caught:
        hook.send(ALERT, NUMBERS)

    assert type(caught.value) is SmsTransportError


def test_a_proxy_refusing_the_tunnel_is_nothing_sent(
    sandbox: SandboxServer, tls_front: TlsFront, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The proxy refused CONNECT: the tunnel's CONNECT is not the request, nothing was sent.

    By its class alone (a ProxyError, a kind of ConnectionError) this would be "maybe sent".
    """
    proxy = ConnectProxy(status=403)
    try:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        hook = trusting(monkeypatch, sandbox, tls_front)

        with pytest.raises(SmsTransportError, match="nothing was sent") as caught:
            hook.send(ALERT, NUMBERS)
    finally:
        proxy.stop()

    assert type(caught.value) is SmsTransportError
    assert proxy.connects == 1
    tls_front.stop()
    requests_seen = len(tls_front.requests)
    assert requests_seen == 0


@pytest.mark.parametrize("breaks", [0, 1], ids=["answered", "TLS broken after the status line"])
def test_a_send_through_a_proxy_tunnel_is_tracked_too(
    sandbox: SandboxServer, tls_front: TlsFront, monkeypatch: pytest.MonkeyPatch, breaks: int
) -> None:
    """Through an HTTP proxy's tunnel: a send goes out once, and a record broken after it is maybe sent."""
    proxy = ConnectProxy(status=200)
    tls_front.break_at, tls_front.breaks = AFTER_STATUS, breaks
    try:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        hook = trusting(monkeypatch, sandbox, tls_front)
        if breaks:
            with pytest.raises(SmsMaybeSentError, match="SSLError"):
                hook.send(ALERT, NUMBERS)
        else:
            assert hook.send(ALERT, NUMBERS).status == 1
    finally:
        proxy.stop()

    assert proxy.connects == 1
    assert len(sandbox.inspect.campaigns()) == 1
