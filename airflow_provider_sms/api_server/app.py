"""The provider's app on the Airflow API server, put together: the delivery-report receiver, the
claim store's routes, the campaigns page and its JSON API, the health probe, and the work its lifespan
runs. Not public API.

The plugin (:mod:`.plugin`) mounts it under ``/sms``. Airflow's API server runs the lifespan of the
apps it mounts: here the delivery-report flusher, the campaign indexer, and, when it ends, the report
writer's close.

``GET /sms/delivery-reports/_health`` says whether the provider's tables are there, for load balancers
and probes: it reads no connection, so a caller learns nothing but the tables' state.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import asynccontextmanager, suppress
from typing import TYPE_CHECKING

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from airflow_provider_sms.api_server.claims_api import claims_router
from airflow_provider_sms.api_server.database_errors import MIGRATE_HINT, tables_missing
from airflow_provider_sms.api_server.refusal import Refusal, invalid_call, refused
from airflow_provider_sms.campaigns.api import API_PREFIX as CAMPAIGNS_API_PREFIX
from airflow_provider_sms.campaigns.api import router as campaigns_api
from airflow_provider_sms.campaigns.indexer import run_indexer
from airflow_provider_sms.campaigns.pages import UI_PREFIX as CAMPAIGNS_UI_PREFIX
from airflow_provider_sms.campaigns.pages import router as campaign_pages
from airflow_provider_sms.db_manager import registration_hint
from airflow_provider_sms.delivery_reports.connections import Connections
from airflow_provider_sms.delivery_reports.flusher import Flusher, default_limits
from airflow_provider_sms.delivery_reports.ingest import GroupCommit, ReportWriter
from airflow_provider_sms.delivery_reports.receiver import delivery_reports_router
from airflow_provider_sms.delivery_reports.refusals import RefusalCounter
from airflow_provider_sms.delivery_reports.settings import HEALTH_PATH

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

log = logging.getLogger(__name__)

# How long the health probe trusts its last look at the tables: probes come often, and it must stay cheap.
HEALTH_TTL = 5.0
# Reports stored in one commit at most (``[sms] delivery_report_group_commit``; 1: each call alone).
DEFAULT_GROUP_COMMIT = 500


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

        from airflow_provider_sms.db_manager import SmsProviderDBManager

        metadata = SmsProviderDBManager.metadata

        try:
            with create_session(scoped=False) as session:
                for table in metadata.tables.values():
                    session.execute(select(*table.primary_key.columns).limit(1))
        except Exception as exc:
            if tables_missing(exc):
                # The probe answers anyone: what to set, which names Airflow's version, is logged at start.
                return 503, {"status": "unhealthy", "detail": MIGRATE_HINT}
            log.error("Delivery reports: the health probe cannot reach the database: %s", exc)
            return 503, {"status": "unhealthy", "detail": "the metadata database is unreachable"}
        return 200, {"status": "healthy"}


def group_commit_rows() -> int:
    """``[sms] delivery_report_group_commit``: the most reports one commit stores (1: no grouping)."""
    from airflow.configuration import conf

    return max(1, conf.getint("sms", "delivery_report_group_commit", fallback=DEFAULT_GROUP_COMMIT))


def warn_if_not_migrated() -> None:
    """Say once, when the API server starts, that ``airflow db migrate`` will not make the provider's
    tables (Airflow 3.0 and 3.1 without the DB manager in ``[database] external_db_managers``)."""
    hint = registration_hint()
    if hint:
        log.warning("SMS provider: its tables are made by its own DB manager%s", hint)


def build_app(connections: Connections | None = None, *, group_commit: int | None = None) -> FastAPI:
    """The provider's app, mounted by the plugin under ``/sms`` on the API server.

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
        warn_if_not_migrated()
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
    # The campaigns API says whether each campaign's connection receives its reports here.
    app.state.connections = connections

    @app.get(HEALTH_PATH)
    async def health() -> Response:
        answer = tables.fresh()
        if answer is None:
            answer = await run_in_threadpool(tables.answer)
        status, body = answer
        return JSONResponse(body, status_code=status)

    app.include_router(delivery_reports_router(connections, writer, refusals))
    app.include_router(claims_router(connections))
    app.include_router(campaigns_api, prefix=CAMPAIGNS_API_PREFIX)
    app.include_router(campaign_pages, prefix=CAMPAIGNS_UI_PREFIX)
    return app
