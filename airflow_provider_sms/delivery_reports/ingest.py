"""Reports in at storage speed: concurrent calls share one INSERT and one commit. Not public API.

Each receiving call hands its report to :class:`GroupCommit` and waits. While one commit is under way,
the reports of the calls arriving meanwhile gather; the next commit takes them all (up to
``max_rows``) in one multi-row INSERT. Every call is answered only after the commit that holds its
report, so nothing acknowledged is lost; a commit that fails is each of its calls' 503, which the
service retries.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from contextlib import suppress
from typing import TYPE_CHECKING

from starlette.concurrency import run_in_threadpool

from airflow_provider_sms import metrics

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from sqlalchemy.engine import Connection, Engine

    from airflow_provider_sms.models import DeliveryReport

log = logging.getLogger(__name__)

Pending = tuple[str, "DeliveryReport"]

# The writer keeps its database connection (no pool pre-ping) while commits come this close together,
# and for this long at most (then it takes a fresh one from the pool, pinged and recycled as the pool says).
KEEP_IDLE = 5.0
KEEP_AT_MOST = 60.0
# How long closing the receiver waits for a commit under way before leaving its connection be.
CLOSE_WAIT = 5.0


class StoreFailed(Exception):
    """The commit that held a call's report failed (logged once, with its cause, for the whole batch)."""


def airflow_engine() -> Engine:
    """The engine of Airflow's metadata database (``airflow.settings.engine``)."""
    from airflow import settings

    if settings.engine is None:
        raise RuntimeError("Airflow's database is not configured (airflow.settings.engine is None)")
    return settings.engine


def write_reports(
    reports: Sequence[Pending], flush_rows: set[str], connection: Connection | None = None
) -> list[bool]:
    """Insert ``reports`` and commit; for each, whether it is new (False: a duplicate).

    :param flush_rows: the connections known to have their flusher's row; grows with the new ones.
    :param connection: the database connection to write on (a Core connection, no ORM session: the
        commit is the whole transaction); one from Airflow's pool when None.
    """
    from airflow_provider_sms.delivery_reports.store import ensure_flush_rows, insert_reports

    if connection is None:
        with airflow_engine().connect() as pooled:
            return write_reports(reports, flush_rows, pooled)
    new_connections = {conn_id for conn_id, _ in reports} - flush_rows
    # Leaving the block commits (or rolls back and raises): the calls are answered only after it.
    with connection.begin():
        stored = insert_reports(connection, reports)
        ensure_flush_rows(connection, new_connections)
    flush_rows |= new_connections
    return stored


class ReportWriter:
    """The receiver's writer: :func:`write_reports` on a database connection it keeps between commits.

    A connection taken from Airflow's pool is pinged first (``[database] sql_alchemy_pool_pre_ping``):
    a round trip to the database per commit. The writer keeps its connection, without that ping, while
    it commits often; after :data:`KEEP_IDLE` seconds without a commit, :data:`KEEP_AT_MOST` seconds in
    all, or any failure, it gives the connection back and takes a fresh (pinged) one. A connection the
    database dropped between two close commits fails the next commit (its calls are answered 503,
    which the service retries); the commit after it gets a new connection. A call made while the kept
    connection is busy (group commit off: each call commits alone, at once) takes one from the pool.
    """

    def __init__(self) -> None:
        self.flush_rows: set[str] = set()
        self._connection: Connection | None = None
        self._used_at = self._taken_at = 0.0
        self._lock = threading.Lock()

    def __call__(self, reports: Sequence[Pending]) -> list[bool]:
        if not self._lock.acquire(blocking=False):
            return write_reports(reports, self.flush_rows)
        try:
            connection = self._kept()
            try:
                stored = write_reports(reports, self.flush_rows, connection)
            except BaseException:
                self._give_back()
                raise
            self._used_at = time.monotonic()
            return stored
        finally:
            self._lock.release()

    def _kept(self) -> Connection:
        engine = airflow_engine()
        connection = self._connection
        if connection is not None and (
            connection.closed
            or connection.invalidated
            or connection.engine is not engine
            or time.monotonic() - self._used_at >= KEEP_IDLE
            or time.monotonic() - self._taken_at >= KEEP_AT_MOST
        ):
            self._give_back()
            connection = None
        if connection is None:
            connection = self._connection = engine.connect()
            self._taken_at = time.monotonic()
        return connection

    def close(self) -> None:
        """Give the kept connection back to the pool, once the commit under way (if any) is done."""
        if self._lock.acquire(timeout=CLOSE_WAIT):
            try:
                self._give_back()
            finally:
                self._lock.release()

    def _give_back(self) -> None:
        # Back to the pool, which discards it if the database dropped it.
        connection, self._connection = self._connection, None
        if connection is not None:
            with suppress(Exception):
                connection.close()


def _is_data_error(exc: BaseException) -> bool:
    """Whether ``exc`` is about the rows (one bad report) rather than the database being unreachable."""
    from sqlalchemy.exc import DataError, IntegrityError

    return isinstance(exc, (DataError, IntegrityError))


class GroupCommit:
    """Shares commits between concurrent calls; with ``max_rows=1`` each call commits alone.

    :param write: stores a list of reports in one transaction, returning for each whether it is new.
    :param max_rows: the most reports in one commit.
    """

    def __init__(self, write: Callable[[Sequence[Pending]], list[bool]], max_rows: int = 500) -> None:
        self._write = write
        self._max_rows = max_rows
        self._waiting: list[tuple[str, DeliveryReport, asyncio.Future[bool | StoreFailed]]] = []
        self._writer: asyncio.Task[None] | None = None

    async def store(self, conn_id: str, report: DeliveryReport) -> bool:
        """Store ``report``; True once committed, False when it was stored before; raises StoreFailed."""
        if self._max_rows <= 1:
            outcome = (await self._commit([(conn_id, report)]))[0]
            count_outcomes([conn_id], [outcome])
        else:
            future: asyncio.Future[bool | StoreFailed] = asyncio.get_running_loop().create_future()
            self._waiting.append((conn_id, report, future))
            if self._writer is None:
                self._writer = asyncio.create_task(self._write_waiting())
            # Shielded: a caller that hangs up does not cancel the commit its report shares with others.
            outcome = await asyncio.shield(future)
        if isinstance(outcome, StoreFailed):
            raise outcome
        return outcome

    async def _write_waiting(self) -> None:
        try:
            while self._waiting:
                taken, self._waiting = self._waiting[: self._max_rows], self._waiting[self._max_rows :]
                outcomes = await self._commit([(conn_id, report) for conn_id, report, _ in taken])
                for (*_, future), outcome in zip(taken, outcomes, strict=True):
                    if not future.done():
                        future.set_result(outcome)
                # Once the calls are answered: a few metric calls per commit, none per report.
                count_outcomes([conn_id for conn_id, _, _ in taken], outcomes)
        finally:
            self._writer = None

    async def _commit(self, reports: list[Pending]) -> list[bool | StoreFailed]:
        """Each report's outcome: new, duplicate, or the failure its call is answered 503 for."""
        try:
            return list(await run_in_threadpool(self._write, reports))
        except Exception as exc:
            from airflow_provider_sms.delivery_reports.store import without_parameters

            without_parameters(exc)  # its text would quote the reports' numbers
            if len(reports) > 1 and _is_data_error(exc):
                # One report the database refuses must not fail the others: each alone, then.
                log.warning(
                    "A commit of %d delivery reports failed (%s); storing them one by one", len(reports), exc
                )
                return [outcome for report in reports for outcome in await self._commit([report])]
            log.exception(
                "%d delivery report(s) not stored (answered 503; the service retries them). Is the "
                "database reachable, and are the tables there (`airflow db migrate`)?",
                len(reports),
            )
            return [_failure(exc) for _ in reports]


def count_outcomes(conn_ids: Iterable[str], outcomes: Iterable[bool | StoreFailed]) -> None:
    """Count the reports of one commit, per connection: stored (new) and duplicates. A report not stored
    is its call's refusal, which the receiver counts.

    :param conn_ids: each report's connection, in the commit's order.
    :param outcomes: each report's outcome, in the same order.
    """
    stored: Counter[str] = Counter()
    duplicates: Counter[str] = Counter()
    for conn_id, outcome in zip(conn_ids, outcomes, strict=True):
        if outcome is True:
            stored[conn_id] += 1
        elif outcome is False:
            duplicates[conn_id] += 1
    for conn_id, reports in stored.items():
        metrics.count("receiver.stored", reports, conn_id=conn_id)
    for conn_id, reports in duplicates.items():
        metrics.count("receiver.duplicates", reports, conn_id=conn_id)


def _failure(cause: Exception) -> StoreFailed:
    # One exception per call: a shared one would grow its traceback each time it is raised.
    failure = StoreFailed("the report could not be stored")
    failure.__cause__ = cause
    return failure
