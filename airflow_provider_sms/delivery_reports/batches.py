"""One step of the flusher: the next batch of a connection's stored reports, in one transaction.

The batch gets the next number after the connection's watermark (``sms_delivery_flush.last_batch``);
its reports are marked with it, the campaigns' latest statuses and counts are brought up to date (and
the delivery kept on the campaigns page's rows: :mod:`airflow_provider_sms.campaigns.totals`), the
watermark advances and, when a DAG schedules on the connection's asset, one asset event names the
batch. All of it commits together or not at all, so a stored report is in exactly one batch, and in
exactly one asset event when there is a DAG to hear it, whatever crashes. The connection's row in
``sms_delivery_flush`` is locked for the transaction: one flusher at a time works on a connection,
across API servers. Not public API.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, NamedTuple

# At import, in the thread that builds the app (as the campaign indexer's XCom model): imported first in
# the flusher's worker thread, Airflow's models can deadlock with another thread importing them.
from airflow.assets.manager import asset_manager
from airflow.models.asset import AssetActive, AssetModel
from sqlalchemy import func, select, tuple_, update

from airflow_provider_sms.campaigns.totals import refresh_for_tickets
from airflow_provider_sms.delivery_reports.store import write_rows
from airflow_provider_sms.delivery_reports.tables import (
    delivery_campaign_table,
    delivery_count_table,
    delivery_country_table,
    delivery_flush_table,
    delivery_message_table,
    delivery_report_table,
    delivery_timeline_table,
)
from airflow_provider_sms.models import DELIVERED_STATUSES

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sqlalchemy.orm import Session

log = logging.getLogger(__name__)

# How long the flusher trusts that a DAG declares (or not) a connection's asset.
ASSET_TTL = 30.0
# Row-value IN lists are sent in chunks this long (SQLite allows 32,766 parameters per statement).
KEY_CHUNK = 500


@dataclass(frozen=True)
class Batch:
    """A batch of one connection's reports, as its asset event describes it: no phone number.

    :param conn_id: the connection.
    :param number: the batch's number (1, 2, ... per connection).
    :param reports: how many reports it holds.
    :param first_id: its lowest report id.
    :param last_id: its highest report id.
    :param campaign_ids: the campaigns its reports are about.
    """

    conn_id: str
    number: int
    reports: int
    first_id: int
    last_id: int
    campaign_ids: list[int]

    def event_extra(self) -> dict[str, Any]:
        """The extra of the batch's asset event (what ``reports_from_events`` reads)."""
        return {
            "conn_id": self.conn_id,
            "batch": self.number,
            "reports": self.reports,
            "first_id": self.first_id,
            "last_id": self.last_id,
            "campaign_ids": self.campaign_ids,
        }


class Pending(NamedTuple):
    """A connection's reports not in a batch yet: how many, and when the oldest arrived."""

    reports: int
    oldest: datetime | None


class Latest(NamedTuple):
    """A message's latest report: a final status wins over ``sent``, then the later date, then the
    later id (the first three fields, compared in order)."""

    final: bool
    reported_at: datetime
    report_id: int
    status: int
    country_code: str | None

    def outcome(self) -> str | None:
        """``delivered`` or ``failed`` once final; None while not."""
        if not self.final:
            return None
        return "delivered" if self.status in DELIVERED_STATUSES else "failed"

    def minute(self) -> datetime:
        """The minute of the report's date, in UTC: the chart's step."""
        return self.reported_at.astimezone(timezone.utc).replace(second=0, microsecond=0)


def pending(session: Session, conn_id: str) -> Pending:
    """How many of ``conn_id``'s reports wait for a batch, and when the oldest of them arrived."""
    reports = delivery_report_table.c
    count, oldest = session.execute(
        select(func.count(), func.min(reports.received_at)).where(
            reports.conn_id == conn_id, reports.batch.is_(None)
        )
    ).one()
    return Pending(int(count), oldest)


def flush_batch(
    session: Session, conn_id: str, *, max_reports: int, min_reports: int, asset: Any
) -> Batch | None:
    """Make ``conn_id``'s next batch in ``session``'s transaction (the caller commits); None when there
    is nothing to do: fewer than ``min_reports`` waiting, or another flusher holds the connection.

    :param max_reports: the most reports in the batch (its asset event).
    :param min_reports: the fewest worth a batch now (1 once the oldest report has waited long enough).
    :param asset: the connection's asset (an ``AssetModel``) if a DAG schedules on it, else None.
    """
    flush = delivery_flush_table.c
    if session.get_bind().dialect.name == "sqlite":
        # SQLite has no row locks (FOR UPDATE is not even said): writing first takes the database's
        # write lock, so that no other flusher reads the same reports before this one commits.
        session.execute(
            update(delivery_flush_table).where(flush.conn_id == conn_id).values(last_batch=flush.last_batch)
        )
    # SKIP LOCKED: another flusher busy with this connection means there is nothing to do here.
    watermark = session.execute(
        select(flush.last_batch, flush.reports)
        .where(flush.conn_id == conn_id)
        .with_for_update(skip_locked=True)
    ).one_or_none()
    if watermark is None:
        return None
    reports = delivery_report_table.c
    rows = session.execute(
        select(
            reports.id,
            reports.campaign_id,
            reports.destination,
            reports.status,
            reports.final,
            reports.country_code,
            reports.reported_at,
            reports.received_at,
        )
        .where(reports.conn_id == conn_id, reports.batch.is_(None))
        .order_by(reports.id)
        .limit(max_reports)
    ).all()
    if not rows or len(rows) < min_reports:
        return None
    number = watermark.last_batch + 1
    ids = [row.id for row in rows]
    session.execute(update(delivery_report_table).where(reports.id.in_(ids)).values(batch=number))
    roll_up(session, conn_id, rows)
    session.execute(
        update(delivery_flush_table)
        .where(flush.conn_id == conn_id)
        .values(
            last_batch=number, reports=watermark.reports + len(rows), flushed_at=datetime.now(timezone.utc)
        )
    )
    batch = Batch(conn_id, number, len(rows), ids[0], ids[-1], sorted({row.campaign_id for row in rows}))
    if asset is not None:
        asset_manager.register_asset_change(asset=asset, extra=batch.event_extra(), session=session)
    return batch


def roll_up(session: Session, conn_id: str, rows: Sequence[Any]) -> None:
    """Bring the messages, counts and campaigns of ``rows`` (new reports, by id) up to date."""
    messages = delivery_message_table.c
    keys = sorted({(row.campaign_id, row.destination) for row in rows})
    before: dict[tuple[int, str], Latest] = {}
    for start in range(0, len(keys), KEY_CHUNK):
        held = session.execute(
            select(
                messages.campaign_id,
                messages.destination,
                messages.final,
                messages.reported_at,
                messages.report_id,
                messages.status,
                messages.country_code,
            ).where(
                messages.conn_id == conn_id,
                tuple_(messages.campaign_id, messages.destination).in_(keys[start : start + KEY_CHUNK]),
            )
        )
        for held_row in held:
            before[(held_row.campaign_id, held_row.destination)] = Latest(*held_row[2:])
    latest = dict(before)
    for report in rows:
        candidate = Latest(report.final, report.reported_at, report.id, report.status, report.country_code)
        key = (report.campaign_id, report.destination)
        if key not in latest or candidate[:3] > latest[key][:3]:
            latest[key] = candidate
    changed = {key: message for key, message in latest.items() if before.get(key) != message}
    counts: Counter[tuple[int, int]] = Counter()
    # Final messages by (campaign, minute or country, outcome): +1 where one stands now, -1 where it stood.
    minutes: Counter[tuple[int, datetime, str]] = Counter()
    countries: Counter[tuple[int, str, str]] = Counter()
    for (campaign_id, _), message in changed.items():
        counts[(campaign_id, message.status)] += 1
        if outcome := message.outcome():
            minutes[(campaign_id, message.minute(), outcome)] += 1
            countries[(campaign_id, message.country_code or "", outcome)] += 1
    for key in changed.keys() & before.keys():
        was = before[key]
        counts[(key[0], was.status)] -= 1
        if outcome := was.outcome():
            minutes[(key[0], was.minute(), outcome)] -= 1
            countries[(key[0], was.country_code or "", outcome)] -= 1
    _write_messages(session, conn_id, changed, before)
    _write_tallies(session, delivery_count_table, conn_id, ("campaign_id", "status"), {"messages": counts})
    _write_tallies(
        session,
        delivery_timeline_table,
        conn_id,
        ("campaign_id", "minute"),
        _by_outcome(minutes),
    )
    _write_tallies(
        session,
        delivery_country_table,
        conn_id,
        ("campaign_id", "country_code"),
        _by_outcome(countries),
    )
    _write_campaigns(session, conn_id, rows)
    # The list's totals on the campaign rows: from the counts just written.
    refresh_for_tickets(session, conn_id, {row.campaign_id for row in rows})


def _by_outcome(tallies: Counter[tuple[int, Any, str]]) -> dict[str, Counter[tuple[int, Any]]]:
    """``{outcome: {(campaign, key): delta}}`` of ``tallies`` keyed (campaign, key, outcome): the
    ``delivered`` and ``failed`` columns."""
    columns: dict[str, Counter[tuple[int, Any]]] = {"delivered": Counter(), "failed": Counter()}
    for (campaign_id, key, outcome), delta in tallies.items():
        columns[outcome][(campaign_id, key)] += delta
    return columns


def _message_values(message: Latest) -> dict[str, Any]:
    return {
        "status": message.status,
        "final": message.final,
        "failed": message.final and message.status not in DELIVERED_STATUSES,
        "country_code": message.country_code,
        "reported_at": message.reported_at,
        "report_id": message.report_id,
    }


def _write_messages(
    session: Session,
    conn_id: str,
    changed: dict[tuple[int, str], Latest],
    before: dict[tuple[int, str], Latest],
) -> None:
    write_rows(
        session,
        delivery_message_table,
        {"conn_id": conn_id},
        [
            {"campaign_id": key[0], "destination": key[1], **_message_values(message)}
            for key, message in changed.items()
            if key not in before
        ],
        [
            ({"campaign_id": key[0], "destination": key[1]}, _message_values(message))
            for key, message in changed.items()
            if key in before
        ],
    )


def _write_tallies(
    session: Session,
    table: Any,
    conn_id: str,
    key: tuple[str, str],
    deltas: dict[str, Counter[tuple[int, Any]]],
) -> None:
    """Add ``deltas`` (per column, per (campaign, second key)) to the rows of ``table``, made as needed:
    the counts by status, by minute and by country."""
    keys = {k for column in deltas.values() for k, delta in column.items() if delta}
    if not keys:
        return
    columns = table.c
    held = {
        (row[0], row[1]): row
        for row in session.execute(
            select(columns[key[0]], columns[key[1]], *(columns[name] for name in deltas)).where(
                columns.conn_id == conn_id, columns[key[0]].in_({k[0] for k in keys})
            )
        )
    }
    # A row is keyed by its values as read back: a minute from SQLite comes back as the same instant.
    new, moved = [], []
    for k in sorted(keys):
        values = {name: deltas[name][k] for name in deltas}
        if k in held:
            row = held[k]
            moved.append(
                ({key[0]: k[0], key[1]: k[1]}, {name: getattr(row, name) + values[name] for name in deltas})
            )
        else:
            new.append({key[0]: k[0], key[1]: k[1], **values})
    write_rows(session, table, {"conn_id": conn_id}, new, moved)


def _write_campaigns(session: Session, conn_id: str, rows: Sequence[Any]) -> None:
    seen: dict[int, dict[str, Any]] = {}
    for row in rows:
        campaign = seen.setdefault(
            row.campaign_id,
            {"reports": 0, "last_received_at": row.received_at},
        )
        campaign["reports"] += 1
        campaign["last_received_at"] = max(campaign["last_received_at"], row.received_at)
    table = delivery_campaign_table.c
    held = {
        row.campaign_id: row
        for row in session.execute(
            select(table.campaign_id, table.reports, table.last_received_at).where(
                table.conn_id == conn_id, table.campaign_id.in_(list(seen))
            )
        )
    }
    write_rows(
        session,
        delivery_campaign_table,
        {"conn_id": conn_id},
        [{"campaign_id": cid, **values} for cid, values in seen.items() if cid not in held],
        [
            (
                {"campaign_id": cid},
                {
                    "reports": held[cid].reports + values["reports"],
                    "last_received_at": max(held[cid].last_received_at, values["last_received_at"]),
                },
            )
            for cid, values in seen.items()
            if cid in held
        ],
    )


class DeclaredAssets:
    """Whether a DAG declares a connection's asset, looked up at most every :data:`ASSET_TTL` seconds.

    ``register_asset_change`` looks the asset up itself, but logs a warning per call when no DAG
    declares it (or declared it once); the flusher checks first, and says it once.
    """

    def __init__(self) -> None:
        self._known: dict[str, tuple[Any, float]] = {}

    def get(self, name: str, session: Session) -> Any:
        """The asset's row (its name and URI are what is used), or None when no DAG declares it."""
        known = self._known.get(name)
        if known is not None and known[1] > time.monotonic():
            return known[0]
        # Active: a DAG that is still there declares it (an asset whose DAGs are gone keeps its row).
        asset = session.scalar(
            select(AssetModel)
            .join(AssetActive, (AssetActive.name == AssetModel.name) & (AssetActive.uri == AssetModel.uri))
            .where(AssetModel.name == name, AssetModel.uri == name)
        )
        if asset is None and known is None:
            log.info(
                "No DAG schedules on asset %r: delivery reports are stored and counted, without asset events",
                name,
            )
        self._known[name] = (asset, time.monotonic() + ASSET_TTL)
        return asset
