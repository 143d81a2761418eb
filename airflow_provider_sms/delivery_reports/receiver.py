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

``GET /sms/delivery-reports/{conn_id}/summary`` tells where campaigns stand, for the delivery-reports
sensor and trigger, and ``GET /sms/delivery-reports/{conn_id}/batches/{n}`` gives the reports of an asset
event, for ``reports_from_events``. Both take the key derived from the connection's token
(``check_reader``): a call without that key gets one 401, whatever the name, before its parameters are
read. Their URLs hold no telephone number: the failed numbers are paged by opaque positions.

Plugin apps get no Airflow authentication: these checks are the only gate.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from contextlib import asynccontextmanager, contextmanager, suppress
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import Field
from sqlalchemy.exc import SQLAlchemyError
from starlette.concurrency import run_in_threadpool

from airflow_provider_sms import codec
from airflow_provider_sms.campaigns.api import API_PREFIX as CAMPAIGNS_API_PREFIX
from airflow_provider_sms.campaigns.api import router as campaigns_router
from airflow_provider_sms.campaigns.indexer import run_indexer
from airflow_provider_sms.campaigns.pages import UI_PREFIX as CAMPAIGNS_UI_PREFIX
from airflow_provider_sms.campaigns.pages import router as campaign_pages
from airflow_provider_sms.delivery_reports.connections import (
    NOT_RECEIVING,
    RETRY_AFTER_SECONDS,
    Connections,
    ReceivingConnection,
    Refusal,
    require_settings,
    signature_matches,
)
from airflow_provider_sms.delivery_reports.flusher import Flusher, default_limits
from airflow_provider_sms.delivery_reports.ingest import GroupCommit, ReportWriter, StoreFailed
from airflow_provider_sms.delivery_reports.refusals import RefusalCounter
from airflow_provider_sms.delivery_reports.settings import (
    SIGNATURE_HEADER,
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
    from collections.abc import AsyncIterator, Iterator

    from airflow_provider_sms.models import DeliveryReport

CampaignId = Annotated[int, Field(ge=1, le=CAMPAIGN_ID_MAX)]

log = logging.getLogger(__name__)

MAX_CAMPAIGNS_PER_SUMMARY = 1000
# The one answer of the readers' endpoints (summary, batches) to a call without the right key, whatever
# the name: it does not say whether the connection exists or receives reports.
READER_REFUSED = (
    "the summary and the batches need the key derived from the access token of the connection named"
)
# How long _health trusts its last look at the tables: probes come often, and it must stay cheap.
HEALTH_TTL = 5.0
# Reports stored in one commit at most (``[sms] delivery_report_group_commit``; 1: each call alone).
DEFAULT_GROUP_COMMIT = 500
MIGRATE_HINT = (
    "the delivery-report tables are missing from Airflow's metadata database: run `airflow db migrate` "
    "with the provider installed (see the Delivery reports page)"
)


def tables_missing(exc: BaseException) -> bool:
    """Whether a database error says a table is not there (PostgreSQL, MySQL, SQLite)."""
    from sqlalchemy.exc import OperationalError, ProgrammingError

    text = str(exc).lower()
    return isinstance(exc, (ProgrammingError, OperationalError)) and (
        "no such table" in text or "does not exist" in text or "doesn't exist" in text
    )


def database_refusal(exc: BaseException, conn_id: str, what: str) -> Refusal:
    """The answer for a database error while reading ``what``: 500 naming the fix when the tables are
    missing (waiting does not cure it), else 503 with Retry-After (the database is down or busy)."""
    if tables_missing(exc):
        log.error("Delivery reports for %s: %s cannot be read: %s", conn_id, what, MIGRATE_HINT)
        return Refusal(500, MIGRATE_HINT)
    # The failed numbers' statements have numbers for parameters: the parameters are left out.
    log.error("Delivery reports for %s: %s cannot be read: %s", conn_id, what, without_parameters(exc))
    return Refusal(
        503,
        f"the {what} cannot be read now (the database is unreachable or busy); try again later",
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )


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


class TablesCheck:
    """Whether the tables are there, looked at most every :data:`HEALTH_TTL` seconds."""

    def __init__(self) -> None:
        self._answer: tuple[int, dict[str, str]] | None = None
        self._checked_at = 0.0

    def fresh(self) -> tuple[int, dict[str, str]] | None:
        """The last answer, if it is recent enough (no I/O: the common case needs no thread)."""
        if self._answer is None or time.monotonic() - self._checked_at >= HEALTH_TTL:
            return None
        return self._answer

    def answer(self) -> tuple[int, dict[str, str]]:
        """(HTTP status, body) of the health probe, looking at the database when the last look is old."""
        answer = self.fresh()
        if answer is None:
            answer = self._answer = self._check()
            self._checked_at = time.monotonic()
        return answer

    @staticmethod
    def _check() -> tuple[int, dict[str, str]]:
        from airflow.utils.session import create_session
        from sqlalchemy import select

        from airflow_provider_sms.delivery_reports.db import SmsDeliveryReportsDBManager

        metadata = SmsDeliveryReportsDBManager.metadata

        try:
            with create_session(scoped=False) as session:
                for table in metadata.tables.values():
                    session.execute(select(*table.primary_key.columns).limit(1))
        except Exception as exc:
            if tables_missing(exc):
                return 503, {"status": "unhealthy", "detail": MIGRATE_HINT}
            log.error("Delivery reports: the health probe cannot reach the database: %s", exc)
            return 503, {"status": "unhealthy", "detail": "the metadata database is unreachable"}
        return 200, {"status": "healthy"}


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
        raise Refusal(
            503,
            "the webhook's signature could not be read; try again later",
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        ) from None
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
        raise Refusal(
            503,
            "the report could not be stored; try again later",
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        ) from None


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
    # A name that receives nothing is compared with a key too; the empty token's key opens nothing.
    token = receiving.hook.settings.token if receiving is not None else ""
    matches = hmac.compare_digest(given.encode(), read_key(token).encode())
    if receiving is None or not matches:
        raise Refusal(401, READER_REFUSED, reason="the call's key is not the connection's, or there is none")
    require_settings(receiving, conn_id)


async def refused(request: Request, exc: Refusal) -> Response:
    """Answer a refusal ``{"detail": ...}`` with its status, and log it with the caller's address."""
    conn_id = request.path_params.get("conn_id")
    caller = request.client.host if request.client else None
    # The name is the caller's: quoted, so that no character of it can start a line of its own.
    where = f"Delivery reports for {conn_id!r}" if conn_id is not None else "Campaigns API"
    log.warning("%s: refused a call from %s: %s", where, caller, exc.reason)
    return JSONResponse({"detail": exc.detail}, status_code=exc.status, headers=exc.headers)


async def invalid_call(request: Request, exc: RequestValidationError) -> Response:
    """422 naming each parameter refused and its rule, as FastAPI answers it but without the value given,
    which could be a telephone number (e.g. where a position is due): it is neither answered nor logged."""
    errors = [{"type": one["type"], "loc": list(one["loc"]), "msg": one["msg"]} for one in exc.errors()]
    caller = request.client.host if request.client else None
    named = "; ".join(f"{'.'.join(map(str, error['loc']))}: {error['msg']}" for error in errors)
    log.warning("SMS provider: refused a call to %s from %s: %s", request.url.path, caller, named)
    return JSONResponse({"detail": errors}, status_code=422)


@contextmanager
def counted(refusals: RefusalCounter, conn_id: str, reason: str) -> Iterator[None]:
    """Count a refusal raised in the block for ``conn_id`` under ``reason``, then let it go on."""
    try:
        yield
    except Refusal as exc:
        refusals.count(conn_id, reason, exc.reason)
        raise


def group_commit_rows() -> int:
    """``[sms] delivery_report_group_commit``: the most reports one commit stores (1: no grouping)."""
    from airflow.configuration import conf

    return max(1, conf.getint("sms", "delivery_report_group_commit", fallback=DEFAULT_GROUP_COMMIT))


def build_app(connections: Connections | None = None, *, group_commit: int | None = None) -> FastAPI:
    """The receiver's app, mounted by the plugin under ``/sms`` on the API server.

    Its lifespan (which Airflow's API server runs for mounted apps) runs the flusher and the campaign
    indexer (:mod:`airflow_provider_sms.campaigns.indexer`).

    :param connections: where connections are read (a fresh :class:`Connections` when None).
    :param group_commit: the most reports in one commit (``[sms] delivery_report_group_commit`` when None).
    """
    connections = connections or Connections()
    refusals = RefusalCounter()
    report_writer = ReportWriter()
    writer = GroupCommit(
        report_writer,
        group_commit if group_commit is not None else group_commit_rows(),
    )
    tables = TablesCheck()

    def limits(conn_id: str) -> tuple[int, float]:
        # On the flusher's timer: a quiet lookup (why a name receives nothing is logged by calls for it).
        try:
            settings = connections.settings(conn_id)
        except Refusal:
            settings = None
        if settings is None:
            return default_limits(conn_id)
        return settings.event_max_reports, settings.event_interval

    flusher = Flusher(limits, refusals)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        tasks = [
            asyncio.create_task(flusher.run(), name="sms delivery-report flusher"),
            asyncio.create_task(run_indexer(), name="sms campaign indexer"),
        ]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with suppress(asyncio.CancelledError):
                    await task
            report_writer.close()

    app = FastAPI(
        title="SMS delivery reports",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        exception_handlers={Refusal: refused, RequestValidationError: invalid_call},
        lifespan=lifespan,
    )
    app.state.flusher = flusher
    app.include_router(campaigns_router, prefix=CAMPAIGNS_API_PREFIX)
    app.include_router(campaign_pages, prefix=CAMPAIGNS_UI_PREFIX)

    @app.get("/delivery-reports/_health")
    async def health() -> Response:
        # For load balancers and probes: no connection, nothing a caller can learn but the tables' state.
        answer = tables.fresh()
        if answer is None:
            answer = await run_in_threadpool(tables.answer)
        status, body = answer
        return JSONResponse(body, status_code=status)

    @app.post("/delivery-reports/{conn_id}")
    async def receive(conn_id: str, request: Request) -> Response:
        receiving, settings = await check_connection(connections, conn_id)
        with counted(refusals, conn_id, "caller_not_allowed"):
            check_caller(request, settings, conn_id)
        with counted(refusals, conn_id, "invalid_report"):
            body = await read_body(request, settings.max_body)
            check_content_type(request)
        try:
            await check_signature(connections, receiving, request)
        except Refusal as exc:
            reason = "signature_unavailable" if exc.status == 503 else "bad_signature"
            refusals.count(conn_id, reason, exc.reason)
            raise
        with counted(refusals, conn_id, "invalid_report"):
            check_json(body)
            report = decode_report(body)
        with counted(refusals, conn_id, "store_unavailable"):
            stored = await store(writer, conn_id, report)
        return JSONResponse({"outcome": "recorded" if stored else "duplicate"})

    async def reader(conn_id: str, request: Request) -> None:
        # A dependency of the readers' routes: FastAPI runs it before it reads their other parameters,
        # so a call without the right key gets the 401 whatever else it says.
        await check_reader(connections, request, conn_id)

    @app.get("/delivery-reports/{conn_id}/summary", dependencies=[Depends(reader)])
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

    @app.get("/delivery-reports/{conn_id}/batches/{batch}", dependencies=[Depends(reader)])
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

    return app
