"""Pytest fixtures for testing DAGs against the sandbox (a pytest plugin, loaded automatically).

The plugin is registered by the ``pytest11`` entry point ``sms_sandbox``; nothing to import:

- ``sms_sandbox_server``: one sandbox per test session, on a free 127.0.0.1 port.
- ``sms_sandbox``: the same server, reset to its seeds with no faults before the test.
- ``sms_connection``: ``sms_sandbox`` plus ``AIRFLOW_CONN_SMS_DEFAULT`` pointing at it (JSON format).

The sandbox is imported only when a test uses one of them, so the plugin costs other test runs nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

    from airflow_provider_sms.sandbox.server import SandboxServer

# The sandbox fixtures' access token, and the canary of this project's test suite (tests/token_canary.py):
# distinctive, so that finding it in a log, an XCom or an error message means it leaked, and long enough
# for Airflow's secrets masker (which skips secrets shorter than [logging] min_length_masked_secret).
# Letters, digits and hyphens only: it is valid in a connection URI as it is.
TEST_TOKEN = "sms-canary-token-4f9c2e7a1b3d8e65"


@pytest.fixture(scope="session")
def sms_sandbox_server() -> Iterator[SandboxServer]:
    """A sandbox serving on a free 127.0.0.1 port for the whole test session."""
    from airflow_provider_sms.sandbox.server import SandboxServer

    with SandboxServer(token=TEST_TOKEN) as server:
        yield server


@pytest.fixture
def sms_sandbox(sms_sandbox_server: SandboxServer) -> SandboxServer:
    """The session's sandbox, reset to its seeds with no faults.

    It has ``.url``, ``.token``, ``.inspect`` (an ``InspectionClient``), ``.state`` and
    ``.connection_json(format="json")``.
    """
    sms_sandbox_server.state.reset()
    return sms_sandbox_server


@pytest.fixture
def sms_connection(sms_sandbox: SandboxServer, monkeypatch: pytest.MonkeyPatch) -> SandboxServer:
    """``sms_sandbox`` with the ``sms_default`` connection pointing at it (JSON format)."""
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", sms_sandbox.connection_json("json"))
    return sms_sandbox
