"""The receiver of the service's delivery reports, served by the Airflow API server. Not public API.

``POST /sms/delivery-reports/{conn_id}`` takes one report per call, as the service posts them. Its
handler, ``receive``, is these steps in this order; each of the first seven checks one thing and refuses the
call, storing nothing, when it fails:

1. ``check_connection``: an ``sms`` connection whose extra names the DLR webhook, else 404 (503 while
   the connections cannot be read);
2. ``check_caller``: the caller's address is allowed, else 404 (the same answer as for a name that
   receives nothing: a caller from elsewhere learns nothing about which connections exist);
3. ``read_body``: the body is at most ``dlr_max_body`` bytes, else 413;
4. ``check_content_type``: it is declared ``application/json``, else 415;
5. ``check_signature``: the ``X-SMSFactor-Signature`` header is the webhook's signature, else 401
   when missing, 403 when wrong (503 when the signature cannot be read from the service);
6. ``check_json``: the body is JSON, else 400;
7. ``decode_report``: it is a valid report, else 422;
8. ``store``: the report and its asset event in one transaction; the 200 comes after the commit, so
   a report the service saw acknowledged is never lost, and a retried one is stored once (answered
   200 ``duplicate``). A database that cannot store it is answered 503, which the service retries.

Each call counts once in the provider's metrics: a refused one by the step that refused it
(``receiver.refused``, by reason), a stored one by its commit (``receiver.stored`` or
``receiver.duplicates``, counted per commit: nothing per report on the call's path but the insert).

``GET /sms/delivery-reports/{conn_id}/summary`` tells where campaigns stand, for the delivery-reports
sensor and trigger, and ``GET /sms/delivery-reports/{conn_id}/batches/{n}`` gives the reports of an asset
event, for ``reports_from_events``. Both take the key derived from the connection's token
(``check_reader``): a call without that key gets one 401, whatever the name, before its parameters are
read. Their URLs hold no telephone number: the failed numbers are paged by opaque positions.

Plugin apps get no Airflow authentication: these checks are the only gate. The app that serves these
routes is put together in :mod:`airflow_provider_sms.api_server.app`.
"""

from __future__ import annotations

import hmac
import json
import logging
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import Field
from sqlalchemy.exc import SQLAlchemyError
from starlette.concurrency import run_in_threadpool

from airflow_provider_sms import codec, metrics
from airflow_provider_sms.api_server.database_errors import MIGRATE_HINT, migrate_hint, tables_missing
from airflow_provider_sms.api_server.refusal import Refusal, try_later
from airflow_provider_sms.delivery_reports.connections import (
    NOT_RECEIVING,
    Connections,
    ReceivingConnection,
    key_matches,
    require_settings,
    signature_matches,
)
from airflow_provider_sms.delivery_reports.ingest import GroupCommit, StoreFailed
from airflow_provider_sms.delivery_reports.settings import (
    BATCH_PATH,
    RECEIVER_PATH,
    SIGNATURE_HEADER,
    SUMMARY_PATH,
    ReceiverSettings,
    read_key,
)
from airflow_provider_sms.delivery_reports.store import (
    FAILED_PAGE,
    REPORT_ID_MAX,
    REPORTS_PAGE,
    UnknownPosition,
    without_parameters,
)
from airflow_provider_sms.delivery_reports.summary import encode_batch_page, encode_delivery_summary
from airflow_provider_sms.exceptions import SmsError, SmsValidationError
from airflow_provider_sms.models import CAMPAIGN_ID_MAX

if TYPE_CHECKING:
    from collections.abc import Iterator

    from airflow_provider_sms.delivery_reports.refusals import RefusalCounter
    from airflow_provider_sms.models import DeliveryReport

CampaignId = Annotated[int, Field(ge=1, le=CAMPAIGN_ID_MAX)]

log = logging.getLogger(__name__)

MAX_CAMPAIGNS_PER_SUMMARY = 1000
# The one answer of the readers' endpoints (summary, batches) to a call without the right key, whatever
# the name: it does not say whether the connection exists or receives reports.
READER_REFUSED = (
    "the summary and the batches need the key derived from the access token of the connection the path names."
)


def database_refusal(exc: BaseException, conn_id: str, what: str) -> Refusal:
    """The answer for a database error while reading ``what``: 500 naming the fix when the tables are
    missing (waiting does not cure it), else 503 with Retry-After (the database is down or busy)."""
    if tables_missing(exc):
        # What to set names Airflow's version: for the log, not for the caller.
        log.error("Delivery reports for %s: %s cannot be read: %s", conn_id, what, migrate_hint())
        return Refusal(500, MIGRATE_HINT)
    # The failed numbers' statements have numbers for parameters: the parameters are left out.
    log.error("Delivery reports for %s: %s cannot be read: %s", conn_id, what, without_parameters(exc))
    return try_later(f"the {what} cannot be read now (the database is unreachable or busy); try again later")


def read_summary(
    conn_id: str,
    campaign_ids: list[int],
    with_failed: bool,
    failed_after: int | None,
    failed_limit: int,
) -> bytes:
    """The summary of ``campaign_ids``, with the connection's recent refusals, as
    the answer's body.

    :raises Refusal: 422 naming ``failed_after`` when it is not a position of these campaigns.
    """
    from airflow.utils.session import create_session

    from airflow_provider_sms.delivery_reports.refusals import recent_refusals
    from airflow_provider_sms.delivery_reports.store import campaign_summary

    with create_session(scoped=False) as session:
        try:
            summary = campaign_summary(
                session,
                conn_id,
                campaign_ids,
                with_failed=with_failed,
                failed_after=failed_after,
                failed_limit=failed_limit,
                refusals=recent_refusals(session, conn_id),
            )
        except UnknownPosition as exc:
            raise Refusal(422, f"failed_after: {exc}") from None
    return encode_delivery_summary(summary)


def read_batch(conn_id: str, batch: int, after_id: int, limit: int) -> bytes:
    """One page of the reports of ``batch`` (an asset event), as the answer's body."""
    from airflow.utils.session import create_session

    from airflow_provider_sms.delivery_reports.store import batch_page

    with create_session(scoped=False) as session:
        page = batch_page(session, conn_id, batch, after_id=after_id, limit=limit)
    return encode_batch_page(page)


# The steps of ``receive``, in the order it takes them (the module's docstring lists them).


async def read_connection(connections: Connections, conn_id: str) -> ReceivingConnection:
    """The connection ``conn_id`` as the receiver knows it; 404 when it receives no reports (but for
    one without ``dlr_webhook_id``: :func:`require_settings` refuses that one).

    :param connections: where connections are read.
    :param conn_id: the connection the call names.
    """
    # The connection is read once in a while: the common case needs no thread.
    receiving = connections.fresh(conn_id)
    if receiving is None:
        receiving = await run_in_threadpool(connections.get, conn_id)
    return receiving


async def check_connection(
    connections: Connections, conn_id: str
) -> tuple[ReceivingConnection, ReceiverSettings]:
    """404 unless ``conn_id`` is an ``sms`` connection whose extra names the DLR webhook.

    :param connections: where connections are read.
    :param conn_id: the connection the call names.
    """
    receiving = await read_connection(connections, conn_id)
    return receiving, require_settings(receiving, conn_id)


def check_caller(request: Request, settings: ReceiverSettings, conn_id: str) -> None:
    """404, as for a name that receives nothing, unless the caller's address is allowed: a caller from
    elsewhere must not learn that the connection exists (the log and the refusal counts say why).

    :param request: the call.
    :param settings: the connection's receiver settings (the allowed callers).
    :param conn_id: the connection's id, for the log's text.
    """
    caller = request.client.host if request.client else None
    if not settings.allows(caller):
        raise Refusal(
            404,
            NOT_RECEIVING,
            reason=f"calls from {caller} are not allowed for connection {conn_id!r}; add the address "
            "to the connection's extra dlr_allowed_callers if it is the service's or a proxy's",
        )


async def read_body(request: Request, limit: int) -> bytes:
    """The body; 413 as soon as it is longer than ``limit`` bytes, whatever it declares.

    :param request: the call.
    :param limit: the largest body taken, in bytes.
    """
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise Refusal(413, f"the body is larger than {limit} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise Refusal(413, f"the body is larger than {limit} bytes")
    return bytes(body)


def check_content_type(request: Request) -> None:
    """415 unless the body is declared ``application/json``.

    :param request: the call.
    """
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != "application/json":
        raise Refusal(415, f"the body must be application/json, not {content_type or 'untyped'}")


async def check_signature(connections: Connections, receiving: ReceivingConnection, request: Request) -> None:
    """401 when the signature header is missing, 403 when it is not the webhook's signature.

    A webhook whose signature cannot be read from the service is answered 503, which the service retries.

    :param connections: where the signature is read and kept.
    :param receiving: the connection the call names.
    :param request: the call.
    """
    given = request.headers.get(SIGNATURE_HEADER)
    if not given:
        raise Refusal(401, f"the {SIGNATURE_HEADER} header is missing")
    # The signature is read once in a while: the common case needs no thread.
    known = connections.known_signature(receiving)
    if known is not None and hmac.compare_digest(given.encode(), known.encode()):
        return
    try:
        matches = await run_in_threadpool(signature_matches, connections, receiving, given)
    except SmsError as exc:
        log.error(
            "Delivery reports for %s: the webhook's signature could not be read: %s",
            receiving.hook.sms_conn_id,
            exc,
        )
        raise try_later("the webhook's signature could not be read; try again later") from None
    if not matches:
        raise Refusal(403, f"the {SIGNATURE_HEADER} header does not match the webhook's signature")


def check_json(body: bytes) -> None:
    """400 unless the body is JSON.

    :param body: the call's body.
    """
    try:
        json.loads(body)
    except ValueError:
        raise Refusal(400, "the body is not JSON") from None


def decode_report(body: bytes) -> DeliveryReport:
    """The report the body holds; 422 when it is not a valid one (the text names the field).

    :param body: the call's body, JSON.
    """
    try:
        return codec.decode_delivery_report(body)
    except SmsValidationError as exc:
        raise Refusal(422, str(exc)) from None


async def store(writer: GroupCommit, conn_id: str, report: DeliveryReport) -> bool:
    """Store ``report`` (committed, possibly with other calls' reports); 503 when it cannot be.

    :param writer: the group commit the receiver's calls share.
    :param conn_id: the connection the call names.
    :param report: the report, checked.
    """
    try:
        return await writer.store(conn_id, report)
    except StoreFailed:
        raise try_later("the report could not be stored; try again later") from None


def bearer(request: Request) -> str:
    """The key a call carries (``Authorization: Bearer <key>``); empty when none."""
    return request.headers.get("authorization", "").removeprefix("Bearer ").strip()


async def check_reader(connections: Connections, request: Request, conn_id: str) -> None:
    """401 unless the call carries the key derived from the access token of connection ``conn_id`` (the
    summary's and the batches' reader: a worker or the triggerer); then 404 unless it receives reports.

    Every call without the right key gets the same 401, whatever the name: one without a key is refused
    before any lookup; one with a key looks the name up as any other (kept as long, whether it receives
    reports or not) and is compared with a key in every case, so neither the answer nor its cost tells
    which connections exist.

    :param connections: where connections are read.
    :param request: the call.
    :param conn_id: the connection the call names.
    """
    given = bearer(request)
    if not given:
        raise Refusal(401, READER_REFUSED, reason="the call carries no key")
    try:
        receiving: ReceivingConnection | None = await read_connection(connections, conn_id)
    except Refusal as exc:
        if exc.status != 404:
            raise
        receiving = None
    if not key_matches(receiving, given, read_key) or receiving is None:
        raise Refusal(401, READER_REFUSED, reason="the call's key is not the connection's, or there is none")
    require_settings(receiving, conn_id)


def count_refusal(refusals: RefusalCounter, conn_id: str, reason: str, cause: str, refusal: Refusal) -> None:
    """Count a refused call for ``conn_id``, a connection that receives reports: under ``reason`` for the
    waits of that connection, and in the ``receiver.refused`` metric under ``cause``.

    :param refusals: the per-connection counts the waits read.
    :param conn_id: the connection the call names.
    :param reason: a reason of the per-connection counts (:data:`.summary.REFUSAL_REASONS`).
    :param cause: the metric's reason (:data:`airflow_provider_sms.metrics.RECEIVER_REFUSALS`).
    :param refusal: the refusal, whose text the per-connection counts keep.
    """
    refusals.count(conn_id, reason, refusal.reason)
    metrics.count("receiver.refused", conn_id=conn_id, reason=cause)


@contextmanager
def counted(refusals: RefusalCounter, conn_id: str, reason: str, cause: str) -> Iterator[None]:
    """Count a refusal raised in the block (:func:`count_refusal`), then let it go on."""
    try:
        yield
    except Refusal as exc:
        count_refusal(refusals, conn_id, reason, cause, exc)
        raise


def delivery_reports_router(
    connections: Connections, writer: GroupCommit, refusals: RefusalCounter
) -> APIRouter:
    """The receiver's routes: the service's reports in, the summary and the batches out.

    :param connections: where connections are read.
    :param writer: the group commit the calls share.
    :param refusals: where refused calls are counted, per connection and reason.
    """
    router = APIRouter()

    @router.post(RECEIVER_PATH)
    async def receive(conn_id: str, request: Request) -> Response:
        # Each refused call is counted once, by the step that refused it; a stored one, by its commit.
        try:
            receiving, settings = await check_connection(connections, conn_id)
        except Refusal as exc:
            # The name is the caller's, not known to receive reports: counted without it.
            cause = "connection_unavailable" if exc.status == 503 else "unknown_name"
            metrics.count("receiver.refused", reason=cause)
            raise
        with counted(refusals, conn_id, "caller_not_allowed", "caller"):
            check_caller(request, settings, conn_id)
        with counted(refusals, conn_id, "invalid_report", "size"):
            body = await read_body(request, settings.max_body)
        with counted(refusals, conn_id, "invalid_report", "body"):
            check_content_type(request)
        try:
            await check_signature(connections, receiving, request)
        except Refusal as exc:
            if exc.status == 503:
                count_refusal(refusals, conn_id, "signature_unavailable", "signature_unavailable", exc)
            else:
                count_refusal(refusals, conn_id, "bad_signature", "signature", exc)
            raise
        with counted(refusals, conn_id, "invalid_report", "body"):
            check_json(body)
            report = decode_report(body)
        with counted(refusals, conn_id, "store_unavailable", "store_unavailable"):
            stored = await store(writer, conn_id, report)
        return JSONResponse({"outcome": "recorded" if stored else "duplicate"})

    async def reader(conn_id: str, request: Request) -> None:
        # A dependency of the readers' routes: FastAPI runs it before it reads their other parameters,
        # so a call without the right key gets the 401 whatever else it says.
        await check_reader(connections, request, conn_id)

    @router.get(SUMMARY_PATH, dependencies=[Depends(reader)])
    async def summary(
        conn_id: str,
        campaign_id: Annotated[list[CampaignId], Query(min_length=1, max_length=MAX_CAMPAIGNS_PER_SUMMARY)],
        failed: bool = False,
        failed_after: Annotated[int | None, Query(ge=1, le=REPORT_ID_MAX)] = None,
        failed_limit: Annotated[int, Query(ge=1, le=FAILED_PAGE)] = FAILED_PAGE,
    ) -> Response:
        try:
            body = await run_in_threadpool(
                read_summary, conn_id, campaign_id, failed, failed_after, failed_limit
            )
        except SQLAlchemyError as exc:
            raise database_refusal(exc, conn_id, "summary") from None
        return Response(body, media_type="application/json")

    @router.get(BATCH_PATH, dependencies=[Depends(reader)])
    async def batch_page(
        conn_id: str,
        batch: Annotated[int, Path(ge=1, le=CAMPAIGN_ID_MAX)],
        after_id: Annotated[int, Query(ge=0, le=REPORT_ID_MAX)] = 0,
        limit: Annotated[int, Query(ge=1, le=REPORTS_PAGE)] = REPORTS_PAGE,
    ) -> Response:
        try:
            body = await run_in_threadpool(read_batch, conn_id, batch, after_id, limit)
        except SQLAlchemyError as exc:
            raise database_refusal(exc, conn_id, "batch's reports") from None
        return Response(body, media_type="application/json")

    return router
