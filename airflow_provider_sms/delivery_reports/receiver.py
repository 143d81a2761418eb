"""The receiver of the service's delivery reports, served by the Airflow API server. Not public API.

``POST /sms/delivery-reports/{conn_id}`` takes one report per call, as the service posts them. Its
handler, ``receive``, is these steps in this order; each of the first seven checks one thing and refuses the
call, storing nothing, when it fails:

1. ``check_connection``: an ``sms`` connection whose extra names the DLR webhook, else 404;
2. ``check_caller``: the caller's address is allowed, else 403;
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
sensor and trigger; it takes the key derived from the connection's token.

Plugin apps get no Airflow authentication: these checks are the only gate.
"""

from __future__ import annotations

import hmac
import json
import logging
import time
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import FastAPI, Query, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from airflow_provider_sms import codec
from airflow_provider_sms.delivery_reports.connections import (
    Connections,
    ReceivingConnection,
    Refusal,
    require_settings,
    signature_matches,
)
from airflow_provider_sms.delivery_reports.settings import (
    SIGNATURE_HEADER,
    ReceiverSettings,
    asset_name,
    read_key,
)
from airflow_provider_sms.exceptions import SmsError, SmsValidationError

if TYPE_CHECKING:
    from airflow_provider_sms.models import DeliveryReport

log = logging.getLogger(__name__)

# How long the receiver trusts that a DAG declares (or not) a connection's asset.
ASSET_TTL = 30.0
# How long the service is asked to wait before retrying a report the database could not take.
RETRY_AFTER_SECONDS = 30
MAX_CAMPAIGNS_PER_SUMMARY = 1000


def store_report(conn_id: str, report: DeliveryReport, assets: DeclaredAssets) -> bool:
    """Store ``report`` and its asset event in one transaction; False when it was stored before.

    :param assets: which assets DAGs declare (only those get events).
    """
    from airflow.assets.manager import asset_manager
    from airflow.utils.session import create_session
    from sqlalchemy.exc import IntegrityError

    from airflow_provider_sms.delivery_reports.store import insert_report

    name = asset_name(conn_id)
    try:
        # Leaving the block commits: the caller answers 200 only after this returns.
        with create_session(scoped=False) as session:
            insert_report(session, conn_id, report)
            asset = assets.get(name, session)
            if asset is not None:
                asset_manager.register_asset_change(
                    asset=asset, extra=event_extra(conn_id, report), session=session
                )
    except IntegrityError:
        return False
    return True


class DeclaredAssets:
    """Whether a DAG declares a connection's asset, looked up at most every :data:`ASSET_TTL` seconds.

    ``register_asset_change`` looks the asset up itself, but logs a warning per call when no DAG
    declares it (or declared it once); at thousands of reports a minute, the receiver checks first,
    and says it once.
    """

    def __init__(self) -> None:
        self._known: dict[str, tuple[Any, float]] = {}

    def get(self, name: str, session: Any) -> Any:
        """The asset's row (detached; its name and URI are what is used), or None when none is declared."""
        from airflow.models.asset import AssetActive, AssetModel
        from sqlalchemy import select

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
            log.info("No DAG schedules on asset %r: delivery reports are stored, without asset events", name)
        self._known[name] = (asset, time.monotonic() + ASSET_TTL)
        return asset


def event_extra(conn_id: str, report: DeliveryReport) -> dict[str, Any]:
    """The extra of a report's asset event: the report's fields and the connection id."""
    return {**report.model_dump(mode="json"), "conn_id": conn_id}


def read_summary(conn_id: str, campaign_ids: list[int], with_failed: bool) -> bytes:
    """The summary of ``campaign_ids`` as the receiver's answer body."""
    from airflow.utils.session import create_session

    from airflow_provider_sms.delivery_reports.store import campaign_summary

    with create_session(scoped=False) as session:
        summary = campaign_summary(session, conn_id, campaign_ids, with_failed=with_failed)
    return codec.encode_delivery_summary(summary)


# The steps of ``receive``, in the order it takes them (the module's docstring lists them).


async def check_connection(
    connections: Connections, conn_id: str
) -> tuple[ReceivingConnection, ReceiverSettings]:
    """404 unless ``conn_id`` is an ``sms`` connection whose extra names the DLR webhook.

    :param connections: where connections are read.
    :param conn_id: the connection the call names.
    """
    # The connection is read once in a while: the common case needs no thread.
    receiving = connections.fresh(conn_id)
    if receiving is None:
        receiving = await run_in_threadpool(connections.get, conn_id)
    return receiving, require_settings(receiving, conn_id)


def check_caller(request: Request, settings: ReceiverSettings, conn_id: str) -> None:
    """403 unless the caller's address is allowed for the connection.

    :param request: the call.
    :param settings: the connection's receiver settings (the allowed callers).
    :param conn_id: the connection's id, for the refusal's text.
    """
    caller = request.client.host if request.client else None
    if not settings.allows(caller):
        raise Refusal(403, f"calls from {caller} are not allowed for connection {conn_id!r}")


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


async def store(conn_id: str, report: DeliveryReport, assets: DeclaredAssets) -> bool:
    """:func:`store_report` off the event loop; 503 when the database cannot take the report.

    :param conn_id: the connection the call names.
    :param report: the report, checked.
    :param assets: which assets DAGs declare.
    """
    try:
        return await run_in_threadpool(store_report, conn_id, report, assets)
    except Exception:
        log.exception(
            "Delivery reports for %s: report of campaign %s for %s not stored (is the table there? run "
            "`airflow db migrate`; see the Delivery reports page)",
            conn_id,
            report.campaign_id,
            report.destination,
        )
        raise Refusal(
            503,
            "the report could not be stored; try again later",
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        ) from None


def check_summary_key(request: Request, receiving: ReceivingConnection) -> None:
    """401 unless the call carries the key derived from the connection's access token.

    :param request: the call.
    :param receiving: the connection the call names.
    """
    given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
    token = receiving.hook.settings.token
    if not given or not hmac.compare_digest(given.encode(), read_key(token).encode()):
        raise Refusal(401, "the summary needs the key derived from the connection's access token")


async def refused(request: Request, exc: Refusal) -> Response:
    """Answer a refusal ``{"detail": ...}`` with its status, and log it with the caller's address."""
    conn_id = request.path_params.get("conn_id")
    caller = request.client.host if request.client else None
    log.warning("Delivery reports for %s: refused a call from %s: %s", conn_id, caller, exc.detail)
    return JSONResponse({"detail": exc.detail}, status_code=exc.status, headers=exc.headers)


def build_app(connections: Connections | None = None) -> FastAPI:
    """The receiver's app, mounted by the plugin under ``/sms`` on the API server.

    :param connections: where connections are read (a fresh :class:`Connections` when None).
    """
    connections = connections or Connections()
    assets = DeclaredAssets()
    app = FastAPI(
        title="SMS delivery reports",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        exception_handlers={Refusal: refused},
    )

    @app.get("/delivery-reports/_health")
    async def health() -> dict[str, str]:
        # For load balancers and probes: no connection, no database, nothing a caller can learn.
        return {"status": "healthy"}

    @app.post("/delivery-reports/{conn_id}")
    async def receive(conn_id: str, request: Request) -> Response:
        receiving, settings = await check_connection(connections, conn_id)
        check_caller(request, settings, conn_id)
        body = await read_body(request, settings.max_body)
        check_content_type(request)
        await check_signature(connections, receiving, request)
        check_json(body)
        report = decode_report(body)
        stored = await store(conn_id, report, assets)
        return JSONResponse({"outcome": "recorded" if stored else "duplicate"})

    @app.get("/delivery-reports/{conn_id}/summary")
    async def summary(
        conn_id: str,
        request: Request,
        campaign_id: Annotated[list[int], Query(min_length=1, max_length=MAX_CAMPAIGNS_PER_SUMMARY)],
        failed: bool = False,
    ) -> Response:
        receiving = await run_in_threadpool(connections.get, conn_id)
        check_summary_key(request, receiving)
        require_settings(receiving, conn_id)
        body = await run_in_threadpool(read_summary, conn_id, campaign_id, failed)
        return Response(body, media_type="application/json")

    return app
