"""The campaign indexer: copies the send tasks' campaign records (XCom ``sms_campaign``) into the
provider's ``sms_campaign`` table. Runs in each API server, beside the delivery-report flusher. Not
public API.

Workers cannot write the metadata database; they push the record through Airflow's own XCom, which the
API server stores. The indexer reads those rows in time order from where it stopped (``idx_xcom_key``
finds them among the other XComs), so a campaign shows on the page seconds after its task pushed it,
and stays there when Airflow clears the task's XComs (a retry, a cleared task, ``airflow db clean``).
A row committed late, with a time the indexer had already passed, is caught by reading again the
:data:`LOOKBACK` before where it stopped; a row already copied is not written again. Each campaign it
adds or updates gets its delivery totals (:mod:`.totals`) from the counts the flusher kept, with the
connection's flusher row locked. One API server at
a time indexes (the lock on the indexer's row); the others skip that look.

A record is copied only when its signature (:mod:`.record`) verifies with its connection's access token
and the task instance whose XCom row holds it; any other (unsigned, changed, of a connection that cannot
be read, pushed by another task) is left out, counted and logged once, by task instance and connection.
Its metrics: ``indexer.copied`` (the campaigns each look committed) and ``indexer.left_out`` (by reason).
Each campaign keeps the team its DAG stood under when it was copied (:mod:`.access`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter, OrderedDict
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, NamedTuple

# At import, in the thread that builds the app: imported first in the indexer's own thread, Airflow's
# models can deadlock with another thread importing them (seen on Airflow 3.0: xcom <-> taskinstance).
from airflow.models.xcom import XComModel
from pydantic import ValidationError
from sqlalchemy import delete, insert, select, tuple_, update
from starlette.concurrency import run_in_threadpool

from airflow_provider_sms import metrics
from airflow_provider_sms.campaigns.access import current_teams
from airflow_provider_sms.campaigns.record import RECORD_KEY, CampaignRecord, TaskInstance, signed_by_holder
from airflow_provider_sms.campaigns.tables import (
    campaign_indexer_table,
    campaign_table,
    campaign_ticket_table,
)
from airflow_provider_sms.campaigns.totals import lock_connections, refresh_rows

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sqlalchemy.orm import Session

log = logging.getLogger(__name__)

# The indexer's row in sms_campaign_indexer.
INDEXER = "xcom"
# How far before where it stopped the indexer reads again, for rows committed after later ones.
LOOKBACK = timedelta(minutes=2)
# The most new rows one look copies (a first look on a database with many records takes several).
PAGE = 500
# How often the indexer looks; after a failure it waits longer, doubling up to the maximum.
EVERY, MAX_BACKOFF = 5.0, 60.0
START = datetime(1970, 1, 2, tzinfo=timezone.utc)
# Records left out that are remembered as logged (each is read again during LOOKBACK): a flood of them
# costs no more memory than this many.
LEFT_OUT_KEPT = 4096


class TaskKey(NamedTuple):
    """A campaign's place in Airflow: its task instance, and when its first batch was posted."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    sent_at: datetime


class LeftOut:
    """The records this API server left out, counted by reason; each logged once."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._logged: OrderedDict[tuple[Any, ...], None] = OrderedDict()

    def note(self, row: Any, conn_id: object, reason: str) -> None:
        """Count (here and in the ``indexer.left_out`` metric) and log, once per XCom row, a record of
        ``row`` left out for ``reason`` (a key of :data:`LEFT_OUT_CAUSES`)."""
        key = (row.dag_id, row.run_id, row.task_id, row.map_index, row.timestamp)
        if key in self._logged:
            return
        self._logged[key] = None
        while len(self._logged) > LEFT_OUT_KEPT:
            self._logged.popitem(last=False)
        self.counts[reason] += 1
        metrics.count("indexer.left_out", reason=LEFT_OUT_CAUSES[reason])
        log.warning(
            "Campaigns: left out the campaign record of %s / %s / %s (map index %s) naming connection %r: "
            "%s (%d record(s) left out so far for that reason)",
            row.dag_id,
            row.run_id,
            row.task_id,
            row.map_index,
            str(conn_id)[:250],
            reason,
            self.counts[reason],
        )


LEFT_OUT = LeftOut()
UNSIGNED = (
    "it is not signed with its connection's current access token: pushed by another task, changed, or "
    "signed before the token was rotated (then the campaign was sent, but is not listed: its tickets are "
    "in the send task's XCom)"
)
UNREADABLE_CONNECTION = (
    "its connection cannot be read here to verify it (no such sms connection, or no token)"
)
OTHER_CONNECTION = "the campaign of that task instance was copied from a record of another connection"
# Each reason's name in the ``indexer.left_out`` metric.
LEFT_OUT_CAUSES = {
    UNSIGNED: "unsigned",
    UNREADABLE_CONNECTION: "connection_unreadable",
    OTHER_CONNECTION: "other_connection",
}


class ConnectionTokens:
    """The access token of each connection the records of one look name, read once per look."""

    def __init__(self) -> None:
        self._tokens: dict[str, str | None] = {}

    def __getitem__(self, conn_id: str) -> str | None:
        if conn_id not in self._tokens:
            self._tokens[conn_id] = _token_of(conn_id)
        return self._tokens[conn_id]


def _token_of(conn_id: str) -> str | None:
    """The access token of ``conn_id`` from Airflow's secrets backends (under its team, in multi-team
    mode); None when it cannot be read."""
    from airflow_provider_sms.delivery_reports.connections import lookup_connection

    try:
        conn = lookup_connection(conn_id)
    except Exception as exc:  # not found, or a backend that failed: the record cannot be verified now
        log.debug("Campaigns: connection %r cannot be read: %s", conn_id, exc)
        return None
    if conn.conn_type != "sms" or not conn.password:
        return None
    token: str = conn.password
    return token


def index_records(session: Session) -> int:
    """Copy the records pushed since the last look (in ``session``'s transaction; the caller commits).

    :return: how many campaigns were added or brought up to date; 0 when another server holds the lock.
    """
    cursor = _lock(session)
    if cursor is None:
        return 0
    xcom = XComModel.__table__.c
    columns = (xcom.dag_id, xcom.run_id, xcom.task_id, xcom.map_index, xcom.value, xcom.timestamp)
    late = session.execute(
        select(*columns).where(
            xcom.key == RECORD_KEY, xcom.timestamp >= cursor - LOOKBACK, xcom.timestamp <= cursor
        )
    ).all()
    new = session.execute(
        select(*columns)
        .where(xcom.key == RECORD_KEY, xcom.timestamp > cursor)
        .order_by(xcom.timestamp)
        .limit(PAGE)
    ).all()
    written = _copy(session, [*late, *new])
    if new:
        session.execute(
            update(campaign_indexer_table)
            .where(campaign_indexer_table.c.name == INDEXER)
            .values(read_until=new[-1].timestamp)
        )
    return written


def _lock(session: Session) -> datetime | None:
    """Where the last look stopped, the indexer's row locked for this transaction; None when another
    server holds it. The row is made on the first look."""
    table = campaign_indexer_table.c
    if session.get_bind().dialect.name == "sqlite":
        # No row locks on SQLite: writing first takes the database's write lock.
        session.execute(
            update(campaign_indexer_table).where(table.name == INDEXER).values(read_until=table.read_until)
        )
    found = session.execute(
        select(table.read_until).where(table.name == INDEXER).with_for_update(skip_locked=True)
    ).one_or_none()
    if found is not None:
        read_until: datetime = found.read_until
        return read_until
    if session.execute(select(table.name).where(table.name == INDEXER)).one_or_none() is not None:
        return None  # locked by another server
    # The first look: two servers making the row at once fail one insert; that one tries next look.
    session.execute(insert(campaign_indexer_table).values(name=INDEXER, read_until=START))
    return START


def _copy(session: Session, rows: Sequence[Any]) -> int:
    """Add or update the campaigns of ``rows`` (XCom rows), skipping those already copied."""
    records: dict[TaskKey, tuple[CampaignRecord, datetime, Any]] = {}
    tokens = ConnectionTokens()
    for row in rows:
        record = _record(row, tokens)
        if record is None:
            continue
        key = TaskKey(row.dag_id, row.run_id, row.task_id, row.map_index, record.sent_at)
        if key not in records or records[key][1] < row.timestamp:
            records[key] = (record, row.timestamp, row)
    if not records:
        return 0
    table = campaign_table.c
    held = {
        TaskKey(found.dag_id, found.run_id, found.task_id, found.map_index, found.sent_at): found
        for found in session.execute(
            select(
                table.id,
                table.dag_id,
                table.run_id,
                table.task_id,
                table.map_index,
                table.sent_at,
                table.recorded_at,
                table.conn_id,
            ).where(
                tuple_(table.dag_id, table.run_id, table.task_id, table.map_index).in_(
                    sorted({key[:4] for key in records})
                )
            )
        )
    }
    # A task instance's campaigns are sent on one connection: the one of its campaign copied first (or,
    # among these records, pushed first). A record naming another, whatever its send time (signed by
    # whoever holds that other connection), adds or replaces nothing.
    connection_of = {key[:4]: found.conn_id for key, found in held.items()}
    plan = []
    for key, (record, recorded_at, row) in sorted(records.items(), key=lambda item: item[1][1]):
        found = held.get(key)
        if found is not None and found.recorded_at >= recorded_at:
            continue
        if connection_of.setdefault(key[:4], record.conn_id) != record.conn_id:
            LEFT_OUT.note(row, record.conn_id, OTHER_CONNECTION)
            continue
        plan.append((key, record, recorded_at, found))
    if not plan:
        return 0
    # Before any campaign row is written: no batch of these connections commits until this transaction
    # does, so the delivery totals read below from their counts cannot miss one.
    lock_connections(session, {record.conn_id for _, record, _, _ in plan})
    # A campaign keeps the team it was sent under, set when it is first copied and never changed by a
    # later push (its DAG may stand under another team by then); None when its DAG had no row.
    teams = current_teams(session, {key.dag_id for key, _, _, found in plan if found is None})
    row_ids = []
    for key, record, recorded_at, found in plan:
        values = {
            "conn_id": record.conn_id,
            "outcome": record.outcome,
            "sent": record.sent,
            "recorded_at": recorded_at,
            "record": record.xcom_value(),
        }
        if found is None:
            team = {"team": teams.get(key.dag_id)}
            inserted = session.execute(insert(campaign_table).values({**key._asdict(), **values, **team}))
            row_id = inserted.inserted_primary_key[0]  # type: ignore[attr-defined]
        else:
            row_id = found.id
            session.execute(update(campaign_table).where(table.id == row_id).values(values))
            session.execute(
                delete(campaign_ticket_table).where(campaign_ticket_table.c.campaign_row == row_id)
            )
        if record.tickets:
            session.execute(
                insert(campaign_ticket_table),
                [
                    {"campaign_row": row_id, "conn_id": record.conn_id, "campaign_id": ticket}
                    for ticket in sorted(set(record.tickets))
                ],
            )
        row_ids.append(row_id)
    # Its delivery so far: its reports may have been flushed before its row was copied.
    refresh_rows(session, row_ids)
    return len(plan)


def _record(row: Any, tokens: ConnectionTokens) -> CampaignRecord | None:
    """The record an XCom row holds, once verified; None (logged) when it is not one this provider can
    read or verify."""
    value = row.value
    try:
        # The SDK stores JSON types as they are; Airflow's older path stores a JSON string.
        if isinstance(value, (str, bytes)):
            value = json.loads(value)
        record = CampaignRecord.model_validate(value)
    except (ValueError, ValidationError) as exc:
        log.warning(
            "Campaigns: the XCom %r of %s / %s / %s (map index %s) is not a campaign record this provider "
            "can read, left out of the campaigns page: %s",
            RECORD_KEY,
            row.dag_id,
            row.run_id,
            row.task_id,
            row.map_index,
            str(exc).splitlines()[0],
        )
        return None
    token = tokens[record.conn_id]
    if token is None:
        LEFT_OUT.note(row, record.conn_id, UNREADABLE_CONNECTION)
        return None
    if not signed_by_holder(value, TaskInstance(row.dag_id, row.run_id, row.task_id, row.map_index), token):
        LEFT_OUT.note(row, record.conn_id, UNSIGNED)
        return None
    return record


def index_once() -> int:
    """One look, in its own transaction (blocking: run it in a thread); what it wrote is counted in the
    ``indexer.copied`` metric once committed."""
    from airflow.utils.session import create_session

    with create_session(scoped=False) as session:
        written = index_records(session)
    metrics.count("indexer.copied", written)
    return written


async def run_indexer() -> None:
    """Look every :data:`EVERY` seconds until cancelled; a failure is logged once per streak."""
    backoff = 0.0
    while True:
        try:
            written = await run_in_threadpool(index_once)
        except Exception:
            if not backoff:
                log.exception(
                    "The campaign indexer cannot read or write its tables (is the database up, and migrated "
                    "with `airflow db migrate`?); trying again, quietly until it works"
                )
            backoff = min(max(backoff * 2, EVERY), MAX_BACKOFF)
        else:
            if backoff:
                log.info("The campaign indexer works again")
            backoff = 0.0
            if written:
                log.info("Campaigns: %d campaign record(s) added or brought up to date", written)
                continue  # more may be waiting (a first look pages through)
        await asyncio.sleep(backoff or EVERY)
