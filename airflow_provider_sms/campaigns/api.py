"""The campaigns JSON API, version 1, served by the provider's app on the API server under
``/sms/campaigns/api/v1``. Not public API (the routes and answers are: see the Campaigns page).

- ``GET /campaigns``: a page of campaigns, newest first; filters ``conn_id``, ``dag_id``, ``run_id``,
  ``task_id``, ``map_index``, ``since``, ``until``, ``delivery``; ``limit`` and ``before`` page.
- ``GET /campaigns/{id}``: one campaign, its delivery over time, its failures by status and by
  country, the first page of its failed numbers.
- ``GET /campaigns/{id}/delivery.svg``: its delivery over time, drawn.
- ``GET /campaigns/{id}/failed``: a page of its failed numbers (``after``, ``limit``): for users who
  may edit the DAG (the others get the first page, masked, with the campaign). ``after`` is the
  previous page's ``next``, an opaque position (no number in a URL: the access log keeps URLs).
- ``GET /campaigns/{id}/failed.csv``: all its failed numbers with status, country and date, for users
  who may edit the DAG.

Every route needs Airflow's login (:mod:`.access`): 401 without it; a campaign of a DAG the user may
not read is 404, as one that does not exist; numbers are masked for users who may not edit its DAG.
"""

from __future__ import annotations

import csv
import io
from typing import TYPE_CHECKING, Annotated

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import AwareDatetime
from sqlalchemy.exc import SQLAlchemyError
from starlette.concurrency import run_in_threadpool

from airflow_provider_sms.api_server.refusal import Refusal, try_later
from airflow_provider_sms.campaigns import queries
from airflow_provider_sms.campaigns.access import Scope, Viewer, viewer_of
from airflow_provider_sms.campaigns.resources import Campaign, CampaignDetail, CampaignPage, FailedNumbers
from airflow_provider_sms.delivery_reports.store import FAILED_PAGE, REPORT_ID_MAX, UnknownPosition
from airflow_provider_sms.models import (
    CAMPAIGN_ID_MAX,
    REPORT_DATE_MAX,
    REPORT_DATE_MIN,
)
from airflow_provider_sms.phone_numbers import mask_number

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterable, Sequence
    from typing import Any, TypeVar

    from airflow_provider_sms.delivery_reports.connections import Connections

    T = TypeVar("T")

API_PREFIX = "/campaigns/api/v1"
# Failed numbers on the campaign's page (the JSON API pages them; the CSV has them all).
FAILED_ON_PAGE = 100
NOT_FOUND = "no such campaign, or not one of a DAG you may read"
NOT_EDITOR = (
    "telephone numbers are personal data: they are shown in full and downloaded only by users who may "
    "edit the DAG that sent the campaign"
)
# Failed numbers per page of the CSV's reads.
CSV_PAGE = 10_000
# What makes a spreadsheet read a cell as a formula (OWASP's CSV injection rule).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")

CampaignPath = Annotated[int, Path(ge=1, le=CAMPAIGN_ID_MAX)]
# The logged-in caller: a dependency, so that FastAPI asks for the login before it checks the path and
# the parameters (an anonymous call with a bad parameter is 401, not 422).
LoggedIn = Annotated[Viewer, Depends(viewer_of)]
Instant = Annotated[AwareDatetime | None, Query(ge=REPORT_DATE_MIN, le=REPORT_DATE_MAX)]

router = APIRouter()


async def read(work: Callable[..., T], *args: Any) -> T:
    """Run ``work(session, *args)`` in a thread; a database that cannot be read is 503 with Retry-After."""
    from airflow.utils.session import create_session

    def in_session() -> T:
        with create_session(scoped=False) as session:
            return work(session, *args)

    try:
        return await run_in_threadpool(in_session)
    except SQLAlchemyError:
        raise try_later(
            "the campaigns cannot be read now (the database is unreachable or busy, or not migrated with "
            "`airflow db migrate`); try again later"
        ) from None


def with_receivers(campaigns: Sequence[Campaign], request: Request) -> list[Campaign]:
    """``campaigns``, each saying whether the delivery reports of its connection are received here.

    Read from the API server's connections (kept for a few seconds); a connection that cannot be read
    now leaves it unknown.
    """
    connections: Connections = request.app.state.connections
    received: dict[str, bool | None] = {}
    for conn_id in {campaign.conn_id for campaign in campaigns}:
        try:
            found = connections.holding_token(conn_id)
        except Refusal:
            found = None
        received[conn_id] = None if found is None else found.settings is not None
    return [
        campaign.model_copy(
            update={
                "delivery": campaign.delivery.model_copy(
                    update={"reports_received": received[campaign.conn_id]}
                )
            }
        )
        for campaign in campaigns
    ]


def readable_campaign(session: Any, viewer: Viewer, campaign: int) -> Any:
    """The campaign's row; 404 when there is none or its DAG is not one the user may read."""
    row = queries.campaign_row(session, campaign)
    if row is None or not viewer.readable(session, [queries.scope_of(row)]):
        raise Refusal(404, NOT_FOUND)
    return row


@router.get("/campaigns")
async def list_campaigns(
    request: Request,
    viewer: LoggedIn,
    conn_id: Annotated[str | None, Query(max_length=250)] = None,
    dag_id: Annotated[str | None, Query(max_length=250)] = None,
    run_id: Annotated[str | None, Query(max_length=250)] = None,
    task_id: Annotated[str | None, Query(max_length=250)] = None,
    map_index: Annotated[int | None, Query(ge=-1, le=2**31 - 1)] = None,
    since: Instant = None,
    until: Instant = None,
    delivery: queries.DeliveryState | None = None,
    before: Annotated[int | None, Query(ge=1, le=CAMPAIGN_ID_MAX)] = None,
    limit: Annotated[int, Query(ge=1, le=queries.MAX_PAGE)] = queries.DEFAULT_PAGE,
) -> Response:

    def page(session: Any) -> bytes:
        filters: dict[str, Any] = {
            "conn_id": conn_id,
            "dag_id": dag_id,
            "run_id": run_id,
            "task_id": task_id,
            "map_index": map_index,
            "since": since,
            "until": until,
            "delivery": delivery,
            "before": before,
            "limit": limit,
        }
        try:
            if delivery is None:
                # First read for every DAG: when the user may read every DAG it met (an admin, or a
                # list of one DAG), that is their page, and no question is asked about the others.
                seen: set[Scope] = set()
                found = queries.campaign_page(session, None, seen=seen, **filters)
                if viewer.readable(session, seen) == seen:
                    return answer(found)
            readable = viewer.readable_scopes(session, queries.dag_ids_with_campaigns(session))
            found = queries.campaign_page(session, readable, **filters)
        except queries.UnknownCursor as exc:
            # Another DAG's campaign is no better a cursor than none: its time is not told.
            raise Refusal(
                422, f"before: {exc.before} is not a campaign you may read; give a page's next"
            ) from None
        return answer(found)

    def answer(found: CampaignPage) -> bytes:
        page = found.model_copy(update={"campaigns": with_receivers(found.campaigns, request)})
        return page.model_dump_json().encode()

    return Response(await read(page), media_type="application/json")


def failed_page(
    session: Any, row: Any, viewer: Viewer, after: int | None, limit: int
) -> tuple[Any, FailedNumbers]:
    """The campaign's summary with one page of failed numbers, masked unless the user
    may edit the DAG; 422 naming ``after`` when it is not a position of this campaign's."""
    from airflow_provider_sms.delivery_reports.store import campaign_summary

    tickets = row.record["tickets"]
    try:
        summary = campaign_summary(
            session,
            row.conn_id,
            tickets,
            with_failed=bool(tickets),
            failed_after=after,
            failed_limit=limit,
        )
    except UnknownPosition as exc:
        raise Refusal(422, f"after: {exc}") from None
    show = viewer.may_edit(session, queries.scope_of(row))
    numbers = summary.failed or []
    # A masked page gives no position to page on (its "more" says there is more).
    position = summary.failed_next if show else None
    return summary, FailedNumbers(
        numbers=numbers if show else [mask_number(number) for number in numbers],
        masked=not show,
        next=None if position is None else str(position),
        more=summary.failed_next is not None,
    )


@router.get("/campaigns/{campaign}")
async def get_campaign(request: Request, campaign: CampaignPath, viewer: LoggedIn) -> Response:

    def detail(session: Any) -> bytes:
        from collections import Counter

        from airflow_provider_sms.models import (
            DELIVERED_STATUSES,
            DELIVERY_STATUSES,
            PENDING_DELIVERY_STATUSES,
        )

        row = readable_campaign(session, viewer, campaign)
        summary, failed = failed_page(session, row, viewer, None, FAILED_ON_PAGE)
        codes = {name: status for status, name in DELIVERY_STATUSES.items()}
        statuses = Counter({codes.get(name, -1): count for name, count in summary.by_status.items()})
        tickets = row.record["tickets"]
        return (
            CampaignDetail(
                campaign=with_receivers([queries.campaign_of(row, statuses)], request)[0],
                timeline=queries.delivery_timeline(session, row.conn_id, tickets, row.sent_at)
                if tickets
                else [],
                failed_by_status={
                    name: count
                    for name, count in summary.by_status.items()
                    if codes.get(name) not in DELIVERED_STATUSES | PENDING_DELIVERY_STATUSES
                },
                failed_by_country=queries.failed_by_country(session, row.conn_id, tickets) if tickets else {},
                failed=failed,
            )
            .model_dump_json()
            .encode()
        )

    return Response(await read(detail), media_type="application/json")


def editable_campaign(session: Any, viewer: Viewer, campaign: int) -> Any:
    """The campaign's row when the user may edit its DAG; 404 when they may not read it, 403 when they
    may read but not edit it."""
    row = readable_campaign(session, viewer, campaign)
    if not viewer.may_edit(session, queries.scope_of(row)):
        raise Refusal(403, NOT_EDITOR)
    return row


@router.get("/campaigns/{campaign}/failed")
async def get_failed(
    campaign: CampaignPath,
    viewer: LoggedIn,
    after: Annotated[int | None, Query(ge=1, le=REPORT_ID_MAX)] = None,
    limit: Annotated[int, Query(ge=1, le=FAILED_PAGE)] = FAILED_ON_PAGE,
) -> Response:

    def page(session: Any) -> bytes:
        row = editable_campaign(session, viewer, campaign)
        _, failed = failed_page(session, row, viewer, after, limit)
        return failed.model_dump_json().encode()

    return Response(await read(page), media_type="application/json")


@router.get("/campaigns/{campaign}/failed.csv")
async def get_failed_csv(campaign: CampaignPath, viewer: LoggedIn) -> Response:
    # Checked before the answer starts: a refusal mid-stream could not change the status.
    row = await read(editable_campaign, viewer, campaign)
    first = await read(queries.failed_details, row, None, CSV_PAGE)

    async def lines() -> AsyncIterator[str]:
        rows, after = first
        yield csv_text([("number", "status", "country", "reported_at")])
        while True:
            yield csv_text(rows)
            if after is None:
                return
            rows, after = await read(queries.failed_details, row, after, CSV_PAGE)

    name = f"sms-campaign-{row.id}-failed.csv"
    return StreamingResponse(
        lines(),
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


def csv_text(rows: Iterable[Sequence[object]]) -> str:
    """``rows`` as CSV lines (RFC 4180: CRLF ends a line, and a cell holding either is quoted, so that no
    cell starts a row of its own), every cell inert (:func:`inert_cell`)."""
    out = io.StringIO()
    csv.writer(out, lineterminator="\r\n").writerows([inert_cell(cell) for cell in row] for row in rows)
    return out.getvalue()


def inert_cell(cell: object) -> str:
    """``cell`` as text a spreadsheet shows as text: one it would read as a formula (OWASP's rule: a
    leading ``=``, ``+``, ``-``, ``@``, tab or carriage return) gets a leading single quote.

    :param cell: a value of the CSV (a number, a status, a country, a date).
    """
    text = str(cell)
    return f"'{text}" if text.startswith(FORMULA_STARTS) else text


@router.get("/campaigns/{campaign}/delivery.svg")
async def get_delivery_chart(campaign: CampaignPath, viewer: LoggedIn) -> Response:

    def chart(session: Any) -> str:
        from datetime import datetime, timezone

        from airflow_provider_sms.campaigns.chart import delivery_svg

        row = readable_campaign(session, viewer, campaign)
        tickets = row.record["tickets"]
        points = queries.delivery_timeline(session, row.conn_id, tickets, row.sent_at) if tickets else []
        return delivery_svg(points, row.record["sent"], row.sent_at, datetime.now(timezone.utc))

    return Response(await read(chart), media_type="image/svg+xml")
