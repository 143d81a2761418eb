"""Writing reports in, and reading what campaigns stand at. Not public API.

A report is stored once per connection: the same report posted again (the service retries until it
gets a 2xx) has the same digest, which the table's unique key refuses. The receiver writes reports
here; the summary and the reports of asset events are read here. The tables are in :mod:`.tables`;
the flusher that keeps the summary's tables is :mod:`.batches`. Imported on the API server only.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from sqlalchemy import bindparam, func, insert, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import StatementError

from airflow_provider_sms import codec
from airflow_provider_sms.delivery_reports.summary import BatchPage, DeliverySummary, StoredReport
from airflow_provider_sms.delivery_reports.tables import (
    delivery_count_table,
    delivery_flush_table,
    delivery_message_table,
    delivery_report_table,
)
from airflow_provider_sms.models import DELIVERED_STATUSES, DELIVERY_STATUSES, PENDING_DELIVERY_STATUSES

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from sqlalchemy.orm import Session

    from airflow_provider_sms.delivery_reports.summary import RefusalCount
    from airflow_provider_sms.models import DeliveryReport

# The most failed numbers one summary call returns; the next page starts after the last one.
FAILED_PAGE = 10_000
# The largest report id (a BIGINT): what a page's position may be.
REPORT_ID_MAX = 2**63 - 1
# The most reports one call for the reports of asset events returns.
REPORTS_PAGE = 5_000


class UnknownPosition(LookupError):
    """A position in the failed numbers that this receiver did not give for these campaigns: no report
    of theirs has that id (another campaign's or connection's, made up, or pruned since). Its text
    names the rule, not the value (which could be a number given where a position was due)."""

    def __init__(self) -> None:
        super().__init__(
            "not a position this server gave for these campaigns' failed numbers; give the previous "
            "page's next position, or none for the first page"
        )


def without_parameters(exc: BaseException) -> BaseException:
    """``exc``, its statement's parameters left out of its text and of the text of the errors it came from.

    SQLAlchemy's errors quote the failed statement's parameters, and those of the reports' statements
    are telephone numbers: the API server's log says which statement failed, not with which numbers.
    """
    seen: set[int] = set()
    error: BaseException | None = exc
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, StatementError):
            error.hide_parameters = True
        error = error.__cause__ or error.__context__
    return exc


def report_digest(conn_id: str, report: DeliveryReport) -> str:
    """What makes a report the same report: its connection and every field, as re-encoded."""
    return hashlib.sha256(conn_id.encode() + b"\0" + codec.encode_delivery_report(report)).hexdigest()


def report_row(conn_id: str, report: DeliveryReport, received_at: datetime) -> dict[str, Any]:
    """The table row of ``report``, received for ``conn_id`` at ``received_at``."""
    return {
        "conn_id": conn_id,
        "digest": report_digest(conn_id, report),
        "campaign_id": report.campaign_id,
        "destination": report.destination,
        "message_id": report.message_id,
        "status": report.status,
        "final": report.final,
        "country_code": report.country_code,
        "reported_at": report.date.astimezone(timezone.utc),
        "received_at": received_at,
        "batch": None,
    }


def insert_ignoring_duplicates(db: Session | Connection, table: Any, key: list[str]) -> Any:
    """An INSERT into ``table`` that skips rows whose ``key`` is taken (PostgreSQL, SQLite, MySQL)."""
    name, dialect_insert = _dialect_insert(db)
    if name == "mysql":
        return dialect_insert(table).prefix_with("IGNORE")
    return dialect_insert(table).on_conflict_do_nothing(index_elements=key)


def upsert(
    db: Session | Connection,
    table: Any,
    key: list[str],
    values: Mapping[str, Any],
    changes: Mapping[str, Any],
) -> Any:
    """An INSERT of ``values`` into ``table`` that, where its ``key`` is taken, updates that row with
    ``changes`` instead (PostgreSQL, SQLite, MySQL): one statement, the row locked either way."""
    name, dialect_insert = _dialect_insert(db)
    if name == "mysql":
        return dialect_insert(table).values(values).on_duplicate_key_update(changes)
    return dialect_insert(table).values(values).on_conflict_do_update(index_elements=key, set_=changes)


def _dialect_insert(db: Session | Connection) -> tuple[str, Any]:
    """The database's name and its dialect's ``insert`` (which knows its way of meeting a taken key)."""
    from sqlalchemy.dialects import mysql, postgresql, sqlite

    name = _dialect(db).name
    dialect: Any = {"postgresql": postgresql, "sqlite": sqlite, "mysql": mysql}.get(name)
    if dialect is None:
        raise NotImplementedError(f"the provider's tables are on PostgreSQL, MySQL or SQLite, not {name}")
    return name, dialect.insert


def _dialect(db: Session | Connection) -> Any:
    """The SQLAlchemy dialect of a session's database or a connection's."""
    return db.dialect if isinstance(db, Connection) else db.get_bind().dialect


Row = dict[str, Any]


def write_rows(
    session: Session,
    table: Any,
    fixed: Mapping[str, Any],
    new: Sequence[Row],
    moved: Sequence[tuple[Row, Row]],
) -> None:
    """Insert the ``new`` rows and update the ``moved`` ones, one statement each (the flusher's writes).

    :param fixed: the columns every row shares (e.g. the connection), added to the new rows and
        matched by the update.
    :param moved: for each row to update, its key columns and its new values (every row the same columns).
    """
    if new:
        session.execute(insert(table), [{**fixed, **row} for row in new])
    if moved:
        key, values = moved[0]
        session.execute(
            update(table)
            .where(
                *(table.c[name] == value for name, value in fixed.items()),
                *(table.c[name] == bindparam(f"k_{name}") for name in key),
            )
            .values({name: bindparam(f"v_{name}") for name in values}),
            [
                {**{f"k_{name}": v for name, v in key.items()}, **{f"v_{name}": v for name, v in row.items()}}
                for key, row in moved
            ],
        )


def insert_reports(db: Session | Connection, reports: Sequence[tuple[str, DeliveryReport]]) -> list[bool]:
    """Add ``reports`` (connection id, report) in the transaction of ``db`` (an ORM session or a Core
    connection), one statement where the database returns what it inserted; for each, whether it is new
    (False: stored before, or earlier in the list).
    """
    if not reports:
        return []
    received_at = datetime.now(timezone.utc)
    rows = [report_row(conn_id, report, received_at) for conn_id, report in reports]
    keys = [(row["conn_id"], row["digest"]) for row in rows]
    # The service may post a report again while its first post is in this very batch.
    first = {key: index for index, key in reversed(list(enumerate(keys)))}
    # In arrival order: ids follow it, and they break ties between reports of the same number and date.
    unique = [rows[index] for index in sorted(first.values())]
    dialect = _dialect(db)
    # PostgreSQL, and SQLite with SQLAlchemy 2: the rows as parameters of one statement, which SQLAlchemy
    # compiles once (cached) and sends as one multi-row INSERT ... RETURNING.
    if getattr(dialect, "insert_executemany_returning", False):
        inserted = {tuple(row) for row in db.execute(_report_insert_returning(dialect.name, db), unique)}
    else:
        # One row at a time: a skipped duplicate counts no row.
        statement = insert_ignoring_duplicates(db, delivery_report_table, ["conn_id", "digest"])
        connection = db if isinstance(db, Connection) else db.connection()
        inserted = {
            (row["conn_id"], row["digest"])
            for row in unique
            if connection.execute(statement.values(row)).rowcount
        }
    return [key in inserted and first[key] == index for index, key in enumerate(keys)]


# One statement object per dialect: built once, its cache key computed once (SQLAlchemy memoizes it).
_REPORT_INSERTS: dict[str, Any] = {}


def _report_insert_returning(dialect_name: str, db: Session | Connection) -> Any:
    """The reports' INSERT that skips duplicates and returns the keys it inserted (built once)."""
    statement = _REPORT_INSERTS.get(dialect_name)
    if statement is None:
        columns = delivery_report_table.c
        statement = insert_ignoring_duplicates(db, delivery_report_table, ["conn_id", "digest"]).returning(
            columns.conn_id, columns.digest
        )
        _REPORT_INSERTS[dialect_name] = statement
    return statement


def ensure_flush_rows(db: Session | Connection, conn_ids: Iterable[str]) -> None:
    """Give each connection its flusher's row (the watermark, and what the flusher locks), if it has none."""
    rows = [{"conn_id": conn_id, "last_batch": 0, "reports": 0, "flushed_at": None} for conn_id in conn_ids]
    if rows:
        db.execute(insert_ignoring_duplicates(db, delivery_flush_table, ["conn_id"]).values(rows))


def campaign_summary(
    session: Session,
    conn_id: str,
    campaign_ids: Sequence[int],
    *,
    with_failed: bool = False,
    failed_after: int | None = None,
    failed_limit: int = FAILED_PAGE,
    refusals: list[RefusalCount] | None = None,
) -> DeliverySummary:
    """Where the messages of ``campaign_ids`` stand, from the counts the flusher keeps (no report read):
    a campaign id is its campaign's key, so every report of it counts.

    :param with_failed: also list the numbers whose final status is not ``delivered`` (one page).
    :param failed_after: the page starts after the number this position stands for (the previous
        page's ``failed_next``).
    :param failed_limit: the most numbers in the page.
    :param refusals: what the receiver refused for the connection lately, returned as given.
    :raises UnknownPosition: ``failed_after`` is not a position of these campaigns.
    """
    summed: Counter[int] = Counter()
    kept = delivery_count_table.c
    for status, messages in session.execute(
        select(kept.status, kept.messages).where(
            kept.conn_id == conn_id, kept.campaign_id.in_(list(campaign_ids))
        )
    ):
        summed[int(status)] += int(messages)
    counts = [(status, count) for status, count in sorted(summed.items()) if count]
    final_statuses = {status for status, _ in counts if status not in PENDING_DELIVERY_STATUSES}
    failed_statuses = {status for status in final_statuses if status not in DELIVERED_STATUSES}
    failed: list[str] | None = None
    failed_next: int | None = None
    if with_failed:
        failed, failed_next = failed_numbers(session, conn_id, campaign_ids, failed_after, failed_limit)
    return DeliverySummary(
        campaign_ids=list(campaign_ids),
        reported=sum(count for _, count in counts),
        by_status={DELIVERY_STATUSES.get(status, f"status {status}"): count for status, count in counts},
        final=sum(count for status, count in counts if status in final_statuses),
        failed_count=sum(count for status, count in counts if status in failed_statuses),
        failed=failed,
        failed_next=failed_next,
        refusals=refusals or [],
    )


def failed_numbers(
    session: Session,
    conn_id: str,
    campaign_ids: Sequence[int],
    after: int | None,
    limit: int,
) -> tuple[list[str], int | None]:
    """One page of the failed numbers of ``campaign_ids``, in number order, and the position of the next.

    Positions are report ids, resolved here to their numbers: a URL that pages never holds a number, and
    the order (by number, which a message never changes) stays the same whatever arrives between pages.

    :param after: the page starts after the number of this position (a previous page's next).
    :raises UnknownPosition: ``after`` is no report of these campaigns.
    """
    messages = delivery_message_table.c
    numbers = (
        select(messages.destination)
        .where(
            messages.conn_id == conn_id,
            messages.campaign_id.in_(list(campaign_ids)),
            messages.failed.is_(True),
        )
        .distinct()
        .subquery()
    )
    query = select(numbers.c.destination).order_by(numbers.c.destination).limit(limit + 1)
    if after is not None:
        query = query.where(numbers.c.destination > number_at(session, conn_id, campaign_ids, after))
    page = list(session.scalars(query))
    if len(page) > limit:
        return page[:limit], position_of(session, conn_id, campaign_ids, page[limit - 1])
    return page, None


def position_of(session: Session, conn_id: str, campaign_ids: Sequence[int], number: str) -> int | None:
    """The position that stands for ``number``, a failed number of ``campaign_ids``: the id of one of
    its reports (None when the retention deleted them meanwhile: nothing is left to page through)."""
    reports = delivery_report_table.c
    position = session.scalar(
        select(func.max(reports.id)).where(
            reports.conn_id == conn_id,
            reports.campaign_id.in_(list(campaign_ids)),
            reports.destination == number,
        )
    )
    return None if position is None else int(position)


def number_at(session: Session, conn_id: str, campaign_ids: Sequence[int], position: int) -> str:
    """The number a position (:func:`position_of`) stands for.

    :raises UnknownPosition: no report of ``campaign_ids`` has id ``position``.
    """
    reports = delivery_report_table.c
    number = session.scalar(
        select(reports.destination).where(
            reports.id == position, reports.conn_id == conn_id, reports.campaign_id.in_(list(campaign_ids))
        )
    )
    if number is None:
        raise UnknownPosition
    return str(number)


def batch_page(
    session: Session, conn_id: str, batch: int, *, after_id: int = 0, limit: int = REPORTS_PAGE
) -> BatchPage:
    """The reports of ``batch`` (one asset event) with id above ``after_id``, by id: one page."""
    reports = delivery_report_table.c
    rows = session.execute(
        select(
            reports.id,
            reports.reported_at,
            reports.status,
            reports.destination,
            reports.message_id,
            reports.campaign_id,
            reports.country_code,
        )
        .where(reports.conn_id == conn_id, reports.batch == batch, reports.id > after_id)
        .order_by(reports.id)
        .limit(limit + 1)
    ).all()
    page = [
        StoredReport(
            id=row.id,
            date=row.reported_at,
            status=row.status,
            destination=row.destination,
            message_id=row.message_id,
            campaign_id=row.campaign_id,
            country_code=row.country_code,
        )
        for row in rows[:limit]
    ]
    return BatchPage(reports=page, next_after_id=page[-1].id if len(rows) > limit else None)
