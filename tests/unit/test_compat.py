"""airflow_provider_sms._compat: the same result from common-compat and from the fallbacks for older releases.

The suite's lowest run (Python 3.10, common-compat 1.20) takes the fallbacks for real; these tests take
every path on whichever release is installed, by hiding what newer releases bring.
"""

from __future__ import annotations

import json
import sys
import threading
import types
from typing import Any

import pytest
from airflow.providers.common.compat.sdk import redact
from airflow.sdk import Connection

from airflow_provider_sms._compat import get_async_extra_dejson, mask_secret
from tests.compat import secrets_masker

SECRET = "compat-secret-9d41c7e2"
EXTRA = {"format": "xml", "timeout": 7}


def hide(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    """Make ``from <module> import <name>`` fail for ``modules``, as on releases that lack the name."""
    for module in modules:
        monkeypatch.setitem(sys.modules, module, types.ModuleType(module))


@pytest.mark.parametrize(
    "hidden",
    [
        pytest.param((), id="common-compat"),
        # Then airflow.sdk.log (Airflow 3.1+) or, on Airflow 3.0, its secrets_masker module.
        pytest.param(("airflow.providers.common.compat.sdk",), id="airflow"),
    ],
)
def test_mask_secret_registers_the_secret_with_airflows_masker(monkeypatch, hidden):
    masker = secrets_masker()
    monkeypatch.setattr(masker, "patterns", set())
    monkeypatch.setattr(masker, "replacer", None)
    with monkeypatch.context() as hiding:
        hide(hiding, *hidden)
        mask_secret(SECRET)
    assert redact(f"token {SECRET} sent") == "token *** sent"


def real_connection() -> Connection:
    return Connection(conn_id="sms_compat", conn_type="sms", extra=json.dumps(EXTRA))


@pytest.mark.parametrize("hidden", [(), ("airflow.providers.common.compat.connection",)])
async def test_get_async_extra_dejson_reads_a_real_connection(monkeypatch, hidden):
    hide(monkeypatch, *hidden)
    assert await get_async_extra_dejson(real_connection()) == EXTRA


class ThreadRecordingConnection:
    """A connection of an Airflow without ``aextra_dejson``: records the thread that reads its extra."""

    def __init__(self) -> None:
        self.read_in: threading.Thread | None = None

    @property
    def extra_dejson(self) -> dict[str, Any]:
        self.read_in = threading.current_thread()
        return dict(EXTRA)


async def test_without_aextra_dejson_the_extra_is_read_off_the_event_loop(monkeypatch):
    hide(monkeypatch, "airflow.providers.common.compat.connection")
    conn = ThreadRecordingConnection()
    loop_thread = threading.current_thread()
    assert await get_async_extra_dejson(conn) == EXTRA  # type: ignore[arg-type]
    assert conn.read_in is not None
    assert conn.read_in is not loop_thread
