"""Fixtures of the integration tests that use the provider's tables on the session's metadata database."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from airflow_provider_sms.delivery_reports.tables import metadata

if TYPE_CHECKING:
    from collections.abc import Iterator


def clear(metadata_db: Any) -> None:
    """Empty every table of the provider's (reports, batches, counts, campaigns)."""
    with metadata_db.engine.begin() as connection:
        for table in metadata.tables.values():
            connection.execute(table.delete())


@pytest.fixture
def db(metadata_db: Any) -> Iterator[Any]:
    """The session's metadata database with the provider's tables empty, before and after the test."""
    clear(metadata_db)
    yield metadata_db
    clear(metadata_db)
