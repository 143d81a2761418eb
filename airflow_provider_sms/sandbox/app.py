"""The sandbox's HTTP application (FastAPI): the service's API and the inspection API, put together.

The routes are in :mod:`~airflow_provider_sms.sandbox.service_api` and
:mod:`~airflow_provider_sms.sandbox.inspection_api`; they reach the state through the app
(:mod:`~airflow_provider_sms.sandbox.app_state`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError

from airflow_provider_sms.exceptions import SmsApiError
from airflow_provider_sms.sandbox import inspection_api, service_api
from airflow_provider_sms.sandbox.app_state import attach
from airflow_provider_sms.sandbox.responses import (
    SERVER_SEND,
    DroppedConnection,
    api_error,
    error,
    response_format,
)

if TYPE_CHECKING:
    from starlette.types import Receive, Scope, Send

    from airflow_provider_sms.sandbox.state import SandboxState


class SandboxApp(FastAPI):
    """The sandbox's FastAPI application; it keeps the server's own ``send`` in the request scope.

    Starlette's middlewares wrap ``send``; only the server's own one (uvicorn's, a bound method of the
    request cycle) reaches the connection, which :class:`~.responses.DroppedResponse` closes without
    answering.
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope[SERVER_SEND] = send
        await super().__call__(scope, receive, send)


class _QuietDroppedConnection(logging.Filter):
    """Keep uvicorn from logging a traceback for a connection the sandbox drops on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], DroppedConnection))


async def invalid_request(request: Request, exc: RequestValidationError) -> Response:
    """Bad query parameters (GET /npai) or inspection payloads: a data error naming the field."""
    problems = "; ".join(
        ".".join(str(part) for part in err["loc"] if part not in ("body", "query", "path"))
        + ": "
        + str(err["msg"]).removeprefix("Value error, ")
        for err in exc.errors()
    )
    return error(-7, problems, response_format(request))


async def refused(request: Request, exc: SmsApiError) -> Response:
    """An inspection call refused (the service's endpoints answer their refusals themselves)."""
    return api_error(exc, response_format(request))


async def unexpected(request: Request, exc: Exception) -> Response:
    """A sandbox bug still answers in the service's shape: status -99, unknown error."""
    return error(-99, f"sandbox error: {type(exc).__name__}: {exc}", response_format(request))


def quiet_dropped_connections() -> None:
    """Filter uvicorn's error log once per process, however many apps are made."""
    uvicorn_errors = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _QuietDroppedConnection) for f in uvicorn_errors.filters):
        uvicorn_errors.addFilter(_QuietDroppedConnection())


def create_app(state: SandboxState, token: str) -> FastAPI:
    """Build the sandbox application around ``state``.

    :param state: the account the endpoints read and change.
    :param token: the access token accepted in ``Authorization: Bearer <token>``.
    """
    app = SandboxApp(
        title="SMS service sandbox",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        exception_handlers={
            RequestValidationError: invalid_request,
            SmsApiError: refused,
            Exception: unexpected,
        },
    )
    quiet_dropped_connections()
    attach(app, state, token)
    app.include_router(service_api.router)
    app.include_router(inspection_api.router)
    return app
