"""The refusals of the provider's app on the API server, and how they are answered. Not public API.

The delivery-report receiver and the campaigns API refuse a call by raising :class:`Refusal`; the app
answers it with :func:`refused`, and a call whose parameters FastAPI cannot read with
:func:`invalid_call`. Each refusal is answered ``{"detail": ...}`` and logged at warning level with the
caller's address.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from fastapi.responses import JSONResponse, Response

if TYPE_CHECKING:
    from fastapi import Request
    from fastapi.exceptions import RequestValidationError

log = logging.getLogger(__name__)

# How long a caller answered 503 is asked to wait before it tries again.
RETRY_AFTER_SECONDS = 30


class Refusal(Exception):
    """A call answered with ``status`` and ``detail``, having changed nothing.

    :param reason: what the log and the refusal counts say, when the caller must not be told
        (default: ``detail``).
    """

    def __init__(
        self, status: int, detail: str, *, headers: dict[str, str] | None = None, reason: str | None = None
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.headers = headers
        self.reason = reason or detail


def try_later(detail: str) -> Refusal:
    """A 503 with Retry-After: the call may be accepted later, as it is.

    :param detail: what cannot be done now, and that the caller may try again.
    """
    return Refusal(503, detail, headers={"Retry-After": str(RETRY_AFTER_SECONDS)})


async def refused(request: Request, exc: Refusal) -> Response:
    """Answer a refusal ``{"detail": ...}`` with its status, and log it with the caller's address."""
    conn_id = request.path_params.get("conn_id")
    caller = request.client.host if request.client else None
    # The name is the caller's: quoted, so that no character of it can start a line of its own.
    if conn_id is None:
        where = "Campaigns API"
    elif "/claims/" in request.url.path:
        where = f"Claim store for {conn_id!r}"
    else:
        where = f"Delivery reports for {conn_id!r}"
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
