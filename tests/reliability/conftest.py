"""Fixtures of the reliability suites: the session's sandbox behind real TLS (tests/tls_server.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.tls_server import Certificate, TlsFront, make_certificate

if TYPE_CHECKING:
    from collections.abc import Iterator

    from airflow_provider_sms.sandbox.server import SandboxServer


@pytest.fixture(scope="session")
def tls_certificate(tmp_path_factory: pytest.TempPathFactory) -> Certificate:
    """A self-signed certificate for 127.0.0.1, made once per session."""
    return make_certificate(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def tls_front(sms_sandbox_server: SandboxServer, tls_certificate: Certificate) -> Iterator[TlsFront]:
    """A TLS front of the session's sandbox, answering whole until told to break; stopped afterwards.

    It starts listening on first use (its ``url`` or ``port``): tests that never use it pay nothing.
    """
    front = TlsFront(tls_certificate, sms_sandbox_server.url)
    try:
        yield front
    finally:
        front.stop()
