"""Pytest fixtures for testing DAGs against the sandbox (a pytest plugin, loaded automatically).

- ``sms_sandbox_server``: one sandbox per test session.
- ``sms_sandbox``: the same server, reset to its seeds (faults cleared) before the test.
- ``sms_connection``: ``sms_sandbox`` plus ``AIRFLOW_CONN_SMS_DEFAULT`` pointing at it (JSON format).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from airflow_provider_sms.sandbox.server import SandboxServer

TEST_TOKEN = "sandbox-test-token-7c1d"


@pytest.fixture(scope="session")
def sms_sandbox_server() -> Iterator[SandboxServer]:
    """A sandbox serving on a free 127.0.0.1 port for the whole test session."""
    with SandboxServer(token=TEST_TOKEN) as server:
        yield server


@pytest.fixture
def sms_sandbox(sms_sandbox_server: SandboxServer) -> SandboxServer:
    """The session's sandbox, reset to its seeds with no faults."""
    sms_sandbox_server.state.reset()
    return sms_sandbox_server


@pytest.fixture
def sms_connection(sms_sandbox: SandboxServer, monkeypatch: pytest.MonkeyPatch) -> SandboxServer:
    """``sms_sandbox`` with the ``sms_default`` connection pointing at it."""
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", sms_sandbox.connection_json("json"))
    return sms_sandbox
