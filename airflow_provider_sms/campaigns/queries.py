"""Reading the campaigns for the JSON API: a page of the list, one campaign, its failed numbers. Not
public API.

A page is read from ``sms_campaign`` newest first (``idx_sms_campaign_sent``), limited to the DAGs the
user may read, with each campaign's delivery as kept on its row (:mod:`.totals`): one statement.

The delivery filter (:data:`DELIVERY_STATES`) is asked of SQL on those totals against the ``sent``
column, in the same statement. A campaign whose reports the retention deleted stands as no state (its
delivery is unknown); one that may have been sent (a batch of unknown outcome, with no reports) is
never complete.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, get_args

from sqlalchemy import and_, false, func, or_, select, text, tuple_

from airflow_provider_sms.campaigns.record import CampaignRecord
from airflow_provider_sms.campaigns.resources import Campaign, CampaignPage, Delivery, TimelinePoint
from airflow_provider_sms.campaigns.tables import campaign_table
from airflow_provider_sms.campaigns.totals import statuses_of
from airflow_provider_sms.delivery_reports.tables import (
    delivery_country_table,
    delivery_message_table,
    delivery_timeline_table,
)
from airflow_provider_sms.models import DELIVERED_STATUSES, DELIVERY_STATUSES, PENDING_DELIVERY_STATUSES

if TYPE_CHECKING:
    from collections import Counter
    from collections.abc import Collection, Sequence
    from datetime import datetime

    from sqlalchemy import ColumnElement
    from sqlalchemy.orm import Session

    from airflow_provider_sms.campaigns.access import Scope

# Campaigns per page: the most, and when the caller does not say.
MAX_PAGE, DEFAULT_PAGE = 200, 50
# The most points of a campaign's delivery over time.
MAX_POINTS = 500
# How much earlier than the send a campaign's chart starts: the service's clock and ours may disagree.
CLOCK_SKEW = timedelta(minutes=1)
# Numbers per IN list when reading the failed numbers' details.
DETAILS_CHUNK = 500
# The list's delivery filter: some messages not final yet; every message sent final; a failure or more.
DeliveryState = Literal["not_final", "complete", "with_failures"]
DELIVERY_STATES: tuple[str, ...] = get_args(DeliveryState)
MAYBE_SENT = "maybe_sent"


class UnknownCursor(LookupError):
    """A page's ``before`` that names no campaign of the DAGs the user may read."""

    def __init__(self, before: int) -> None:
        super().__init__(before)
        self.before = before


def dag_ids_with_campaigns(session: Session) -> set[str]:
    """The DAGs that sent campaigns (what the auth manager is asked about): a loose index scan (a
    recursive CTE stepping from one DAG id to the next in ``idx_sms_campaign_dag_sent``), one probe per
    DAG whatever the number of campaigns, where ``SELECT DISTINCT`` reads them all. On MySQL, whose
    recursion stops at ``cte_max_recursion_depth`` (1,000 by default), ``SELECT DISTINCT``."""
    if session.get_bind().dialect.name == "mysql":
        return set(session.scalars(select(campaign_table.c.dag_id).distinct()))
    return {dag_id for dag_id in session.scalars(_DAG_IDS) if dag_id is not None}


_DAG_IDS = text(
    "WITH RECURSIVE dag_ids(dag_id) AS ("
    " SELECT MIN(dag_id) FROM sms_campaign"
    " UNION ALL"
    " SELECT (SELECT MIN(c.dag_id) FROM sms_campaign c WHERE c.dag_id > d.dag_id)"
    " FROM dag_ids d WHERE d.dag_id IS NOT NULL"
    ") SELECT dag_id FROM dag_ids"
)


def scope_of(row: Any) -> Scope:
    """A campaign row's scope: its DAG and the team it was sent under."""
    return (row.dag_id, row.team)


def campaign_page(
    session: Session,
    readable: Collection[tuple[str, str]] | None,
    *,
    conn_id: str | None = None,
    dag_id: str | None = None,
    run_id: str | None = None,
    task_id: str | None = None,
    map_index: int | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    delivery: DeliveryState | None = None,
    before: int | None = None,
    limit: int = DEFAULT_PAGE,
    seen: set[Scope] | None = None,
) -> CampaignPage:
    """A page of the campaigns of the ``readable`` scopes (DAG and team; None: of every campaign),
    newest first.

    :param task_id: only this task's; ``map_index``: only this mapped task instance's.
    :param since: sent at or after; ``until``: sent before.
    :param delivery: only the campaigns whose delivery stands so (:data:`DELIVERY_STATES`).
    :param before: the page starts after this campaign (the previous page's ``next``).
    :param seen: gets the scopes of every campaign read (those shown, the one that tells whether there
        is a next page, the ``before`` one): read for every DAG, the page is the one of the ``readable``
        scopes when all of them are.
    """
    table = campaign_table.c
    readable_only: list[ColumnElement[bool]] = []
    if readable is not None:
        readable_only.append(tuple_(table.dag_id, table.team).in_(sorted(readable)) if readable else false())
    conditions: list[ColumnElement[bool]] = [*readable_only]
    for column, value in (
        (table.conn_id, conn_id),
        (table.dag_id, dag_id),
        (table.run_id, run_id),
        (table.task_id, task_id),
        (table.map_index, map_index),
    ):
        if value is not None:
            conditions.append(column == value)
    if since is not None:
        conditions.append(table.sent_at >= since)
    if until is not None:
        conditions.append(table.sent_at < until)
    if delivery is not None:
        conditions.append(_may_stand_as(delivery))
    start = None
    if before is not None:
        start = session.execute(
            select(table.sent_at, table.id, table.dag_id, table.team).where(
                table.id == before, *readable_only
            )
        ).one_or_none()
        if start is None:
            raise UnknownCursor(before)
        if seen is not None:
            seen.add(scope_of(start))
    rows = _rows_after(session, conditions, start, limit + 1)
    if seen is not None:
        seen.update(scope_of(row) for row in rows)
    more = len(rows) > limit
    rows = rows[:limit]
    deliveries = page_delivery(rows)
    return CampaignPage(
        campaigns=[campaign_of(row, deliveries[row.id]) for row in rows],
        next=str(rows[-1].id) if more else None,
    )


def _rows_after(
    session: Session, conditions: Sequence[ColumnElement[bool]], start: Any, limit: int
) -> Sequence[Any]:
    """At most ``limit`` campaign rows meeting ``conditions``, newest first, after ``start`` (a row with
    ``sent_at`` and ``id``; None: from the newest)."""
    table = campaign_table.c
    after = (
        [or_(table.sent_at < start.sent_at, and_(table.sent_at == start.sent_at, table.id < start.id))]
        if start is not None
        else []
    )
    return session.execute(
        select(campaign_table)
        .where(*conditions, *after)
        .order_by(table.sent_at.desc(), table.id.desc())
        .limit(limit)
    ).all()


def _may_stand_as(state: DeliveryState) -> ColumnElement[bool]:
    """Whether the outer campaign row stands as ``state`` says, from the totals kept on it: a campaign
    whose reports were pruned stands as none (its delivery is unknown); one that may have been sent is
    never complete (a batch of unknown outcome has no reports)."""
    table = campaign_table.c
    final = table.delivered + table.failed
    maybe_sent = table.outcome == MAYBE_SENT
    if state == "not_final":
        kept = or_(table.sent > final, maybe_sent)
    elif state == "complete":
        kept = and_(table.sent <= final, ~maybe_sent)
    else:
        kept = table.failed > 0
    return and_(table.reports_pruned_at.is_(None), kept)


def campaign_row(session: Session, campaign: int) -> Any:
    """The row of campaign ``campaign`` (its id on the page), or None."""
    return session.execute(select(campaign_table).where(campaign_table.c.id == campaign)).one_or_none()


def page_delivery(rows: Sequence[Any]) -> dict[int, Counter[int]]:
    """Messages by status of each campaign of ``rows``: the totals kept on its row (:mod:`.totals`)."""
    return {row.id: statuses_of(row) for row in rows}


def delivery_of(sent: int, statuses: Counter[int], pruned_at: datetime | None = None) -> Delivery:
    """The delivery bar's figures of a campaign that sent ``sent`` numbers.

    :param pruned_at: when the retention deleted its reports: its figures are unknown (zero).
    """
    if pruned_at is not None:
        return Delivery(
            sent=sent,
            delivered=0,
            failed=0,
            not_final=0,
            delivered_share=0.0,
            by_status={},
            reports_pruned_at=pruned_at,
        )
    delivered = sum(count for status, count in statuses.items() if status in DELIVERED_STATUSES)
    final = sum(count for status, count in statuses.items() if status not in PENDING_DELIVERY_STATUSES)
    return Delivery(
        sent=sent,
        delivered=delivered,
        failed=final - delivered,
        not_final=max(sent - final, 0),
        delivered_share=round(delivered / sent, 4) if sent else 0.0,
        by_status={status_name(status): count for status, count in sorted(statuses.items()) if count},
    )


def campaign_of(row: Any, statuses: Counter[int]) -> Campaign:
    """The API's campaign from its row and its messages by status."""
    record = CampaignRecord.model_validate(row.record)
    return Campaign(
        id=row.id,
        dag_id=row.dag_id,
        run_id=row.run_id,
        task_id=row.task_id,
        map_index=row.map_index,
        **record.model_dump(exclude={"version"}),
        delivery=delivery_of(row.sent, statuses, pruned_at=row.reports_pruned_at),
    )


def status_name(status: int) -> str:
    return DELIVERY_STATUSES.get(status, f"status {status}")


def failed_by_country(session: Session, conn_id: str, campaign_ids: Sequence[int]) -> dict[str, int]:
    """Failed messages of ``campaign_ids`` by the country their reports named (``unknown`` when none),
    most first, from the counts the flusher keeps."""
    countries = delivery_country_table.c
    rows = session.execute(
        select(countries.country_code, func.sum(countries.failed))
        .where(countries.conn_id == conn_id, countries.campaign_id.in_(list(campaign_ids)))
        .group_by(countries.country_code)
    ).all()
    found = [(country or "unknown", int(failed)) for country, failed in rows if failed]
    return dict(sorted(found, key=lambda item: (-item[1], item[0])))


def delivery_timeline(
    session: Session, conn_id: str, campaign_ids: Sequence[int], since: datetime
) -> list[TimelinePoint]:
    """Messages delivered and failed so far, minute by minute from ``since`` (the send, less
    :data:`CLOCK_SKEW`), from the counts the flusher keeps; at most :data:`MAX_POINTS`
    points (whole minutes merged when the campaign lasts longer)."""
    timeline = delivery_timeline_table.c
    rows = session.execute(
        select(timeline.minute, func.sum(timeline.delivered), func.sum(timeline.failed))
        .where(
            timeline.conn_id == conn_id,
            timeline.campaign_id.in_(list(campaign_ids)),
            timeline.minute >= (since - CLOCK_SKEW).replace(second=0, microsecond=0),
        )
        .group_by(timeline.minute)
        .order_by(timeline.minute)
    ).all()
    step = max(1, -(-len(rows) // MAX_POINTS))
    points: list[TimelinePoint] = []
    delivered = failed = 0
    for index, (minute, delivered_then, failed_then) in enumerate(rows):
        delivered += int(delivered_then)
        failed += int(failed_then)
        if (index + 1) % step == 0 or index == len(rows) - 1:
            points.append(TimelinePoint(at=minute, delivered=delivered, failed=failed))
    return points


def failed_details(
    session: Session, row: Any, after: int | None, limit: int
) -> tuple[list[tuple[Any, ...]], int | None]:
    """One page of campaign ``row``'s failed numbers, each with its latest
    status, country and date; and the position the next page starts after (an opaque one: see
    :func:`~airflow_provider_sms.delivery_reports.store.failed_numbers`)."""
    from airflow_provider_sms.delivery_reports.store import campaign_summary

    tickets = row.record["tickets"]
    if not tickets:
        return [], None
    summary = campaign_summary(
        session,
        row.conn_id,
        tickets,
        with_failed=True,
        failed_after=after,
        failed_limit=limit,
    )
    numbers = summary.failed or []
    messages = delivery_message_table.c
    latest: dict[str, tuple[Any, ...]] = {}
    for start in range(0, len(numbers), DETAILS_CHUNK):
        for found in session.execute(
            select(messages.destination, messages.status, messages.country_code, messages.reported_at).where(
                messages.conn_id == row.conn_id,
                messages.campaign_id.in_(tickets),
                messages.destination.in_(numbers[start : start + DETAILS_CHUNK]),
            )
        ):
            latest[found.destination] = (
                status_name(found.status),
                found.country_code or "",
                found.reported_at.isoformat(),
            )
    return [(number, *latest.get(number, ("", "", ""))) for number in numbers], summary.failed_next
