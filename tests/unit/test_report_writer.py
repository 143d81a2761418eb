"""The receiver's writer on a real database (SQLite): the connection it keeps between commits, and
what happens when the database drops it."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import create_engine, event, func, select

from airflow_provider_sms.api_server.refusal import Refusal
from airflow_provider_sms.delivery_reports import ingest
from airflow_provider_sms.delivery_reports.ingest import GroupCommit, ReportWriter
from airflow_provider_sms.delivery_reports.receiver import store
from airflow_provider_sms.delivery_reports.tables import delivery_report_table, metadata
from tests.unit.test_group_commit import report

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


class Engine:
    """A SQLite engine with the delivery-report tables, as ``airflow.settings.engine``; counts its
    connections' checkouts from the pool (each pinged)."""

    def __init__(self, path: Path) -> None:
        # Shared by threads as Airflow's own SQLite engine is (its settings turn check_same_thread off:
        # the API server's endpoints run in a thread pool); SQLAlchemy 1.4 leaves it on by default.
        self.engine = create_engine(
            f"sqlite:///{path}", pool_pre_ping=True, connect_args={"check_same_thread": False}
        )
        self.reader = create_engine(f"sqlite:///{path}")  # the test's own reads: not counted
        metadata.create_all(self.engine)
        self.checkouts = 0

        @event.listens_for(self.engine, "checkout")
        def counted(*_: Any) -> None:
            self.checkouts += 1

    def stored(self) -> int:
        with self.reader.connect() as connection:
            return int(connection.scalar(select(func.count()).select_from(delivery_report_table)) or 0)


@pytest.fixture
def database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Engine]:
    from airflow import settings

    database = Engine(tmp_path / "reports.db")
    monkeypatch.setattr(settings, "engine", database.engine)
    yield database
    database.engine.dispose()
    database.reader.dispose()


def test_the_writer_keeps_its_connection_between_close_commits(database: Engine) -> None:
    writer = ReportWriter()
    assert writer([("sms_default", report(1))]) == [True]
    assert writer([("sms_default", report(2)), ("sms_default", report(1))]) == [True, False]
    # One checkout (pinged) for both commits; the duplicate is still told apart.
    assert database.checkouts == 1
    assert database.stored() == 2
    writer.close()


def test_after_an_idle_spell_the_writer_takes_a_fresh_connection(
    database: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = ReportWriter()
    writer([("sms_default", report(1))])
    monkeypatch.setattr(ingest, "KEEP_IDLE", 0.0)
    writer([("sms_default", report(2))])
    assert database.checkouts == 2
    monkeypatch.setattr(ingest, "KEEP_IDLE", 60.0)
    monkeypatch.setattr(ingest, "KEEP_AT_MOST", 0.0)
    writer([("sms_default", report(3))])
    assert database.checkouts == 3
    assert database.stored() == 3
    writer.close()


def test_a_connection_dropped_by_the_database_fails_that_commit_503_and_the_next_one_works(
    database: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    writer = ReportWriter()
    group = GroupCommit(writer)

    async def post(*indexes: int) -> list[bool | BaseException]:
        calls = (store(group, "sms_default", report(index)) for index in indexes)
        return await asyncio.gather(*calls, return_exceptions=True)

    assert asyncio.run(post(1)) == [True]
    # The database ends the kept connection between two commits (a restart, an idle timeout).
    kept = writer._connection
    assert kept is not None
    kept.connection.dbapi_connection.close()  # type: ignore[union-attr]

    with caplog.at_level("ERROR", logger="airflow_provider_sms.delivery_reports.ingest"):
        failed = asyncio.run(post(2, 3))
    assert all(isinstance(outcome, Refusal) and outcome.status == 503 for outcome in failed), failed
    assert "not stored (answered 503" in caplog.text
    assert "33600000002" not in caplog.text  # the numbers stay out of the log
    assert database.stored() == 1
    # The service's retries, and what comes next, are stored on a fresh connection.
    assert asyncio.run(post(2, 3, 4)) == [True, True, True]
    assert asyncio.run(post(4)) == [False]
    assert database.stored() == 4
    assert database.checkouts == 2
    writer.close()


def test_a_call_while_the_kept_connection_is_busy_takes_one_from_the_pool(database: Engine) -> None:
    writer = ReportWriter()
    writer([("sms_default", report(1))])
    with writer._lock:  # another commit under way (group commit off: each call commits alone)
        assert writer([("sms_default", report(2))]) == [True]
    assert database.checkouts == 2
    assert database.stored() == 2
    writer.close()
    writer.close()  # closing twice is harmless
