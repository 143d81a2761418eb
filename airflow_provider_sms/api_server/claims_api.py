"""The claim store's routes on the API server, which the send tasks of the workers call. Not public API.

``POST /sms/claims/{conn_id}`` decides whether a send may go (:func:`~.claims.claim`);
``.../{claim_id}/numbers`` claims a batch of its numbers, ``.../sent`` records its tickets and
``.../release`` forgets a send that sent nothing; ``POST /sms/claims/{conn_id}/fold`` decides whether an
``SmsNotifier`` alert goes now or is held (:func:`~.claims.fold`). Each call is one transaction of
:mod:`.claims`.

Airflow does not authenticate a plugin's routes: every call carries the key derived from the access
token of the connection it names (purpose ``CLAIMS``), and any call without it is answered one 401,
whatever the name, before its body is read. That key proves only that the caller could read the
connection, which any task can: a forged call can claim (and so refuse other sends), release its own
claimant's claims or hold a connection's alerts for one fold interval (the next alert carries them),
nothing the token itself does not allow (see the trust table of the Reliability page).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import Response
from pydantic import BaseModel, ValidationError
from sqlalchemy.exc import SQLAlchemyError
from starlette.concurrency import run_in_threadpool

from airflow_provider_sms.api_server import claims
from airflow_provider_sms.api_server.database_errors import MIGRATE_HINT, migrate_hint, tables_missing
from airflow_provider_sms.api_server.refusal import Refusal, try_later
from airflow_provider_sms.delivery_reports.connections import Connections, key_matches
from airflow_provider_sms.token_keys import CLAIMS, derived_key

if TYPE_CHECKING:
    from collections.abc import Callable

log = logging.getLogger(__name__)

# The one answer to a call without the right key, whatever the name.
CLAIMS_REFUSED = "the claim store needs the key derived from the access token of the connection in the path"
# The largest body read: a batch of digests, base64 (with room for the claimant).
MAX_BODY = claims.MAX_NUMBERS_PER_CALL * claims.NUMBER_KEY_BYTES * 4 // 3 + 4096
ClaimId = Annotated[int, Path(ge=1, le=2**63 - 1)]
_Body = TypeVar("_Body", bound=BaseModel)


def claim_key(token: str) -> str:
    """The key of the claim store's routes, derived from the connection's access token."""
    return derived_key(token, CLAIMS)


async def body_of(request: Request, model: type[_Body]) -> _Body:
    """The call's JSON body as ``model``; 413 past :data:`MAX_BODY`, 422 naming what is wrong."""
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise Refusal(413, f"the body is larger than {MAX_BODY} bytes")
    try:
        return model.model_validate_json(bytes(body))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, error['loc'])) or 'body'}: {error['msg']}" for error in exc.errors()
        )
        raise Refusal(422, problems) from None


def decided(conn_id: str, decide: Callable[[Any], BaseModel | None]) -> Response:
    """Run ``decide(session)`` in one transaction; its answer as JSON (204 when it returns none).

    A claim that is not this claimant's is 404; tables missing 500 naming the fix; any other database
    error 503 with Retry-After (the claim was not decided: the worker may ask again).
    """
    from airflow.utils.session import create_session

    try:
        with create_session(scoped=False) as session:
            answer = decide(session)
    except claims.ClaimNotFound as exc:
        raise Refusal(404, str(exc)) from None
    except SQLAlchemyError as exc:
        if tables_missing(exc):
            log.error("Claim store for %r: %s", conn_id, migrate_hint())
            raise Refusal(500, MIGRATE_HINT) from None
        log.error("Claim store for %r: the database did not decide: %s", conn_id, exc)
        raise try_later("the claim store cannot decide now (the database is unreachable or busy)") from None
    if answer is None:
        return Response(status_code=204)
    return Response(answer.model_dump_json(), media_type="application/json")


def claims_router(connections: Connections) -> APIRouter:
    """The claim store's routes.

    :param connections: where connections are read (the receiver's cache: the same lookups).
    """

    async def holder(conn_id: str, request: Request) -> None:
        # A dependency: FastAPI runs it before the route reads anything else of the call.
        given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        if not given:
            raise Refusal(401, CLAIMS_REFUSED, reason="the call carries no key")
        receiving = await run_in_threadpool(connections.holding_token, conn_id)
        if not key_matches(receiving, given, claim_key):
            raise Refusal(
                401, CLAIMS_REFUSED, reason="the call's key is not the connection's, or there is none"
            )

    router = APIRouter(dependencies=[Depends(holder)])

    @router.post(claims.CLAIMS_PATH)
    async def claim(conn_id: str, request: Request) -> Response:
        asked = await body_of(request, claims.ClaimRequest)
        return await run_in_threadpool(
            decided, conn_id, lambda session: claims.claim(session, conn_id, asked)
        )

    @router.post(claims.CLAIM_NUMBERS_PATH)
    async def claim_numbers(conn_id: str, claim_id: ClaimId, request: Request) -> Response:
        asked = await body_of(request, claims.NumbersRequest)
        return await run_in_threadpool(
            decided, conn_id, lambda session: claims.claim_numbers(session, conn_id, claim_id, asked)
        )

    @router.post(claims.CLAIM_SENT_PATH)
    async def sent(conn_id: str, claim_id: ClaimId, request: Request) -> Response:
        asked = await body_of(request, claims.SentRequest)
        return await run_in_threadpool(
            decided, conn_id, lambda session: claims.mark_sent(session, conn_id, claim_id, asked)
        )

    @router.post(claims.FOLD_PATH)
    async def fold(conn_id: str, request: Request) -> Response:
        asked = await body_of(request, claims.FoldRequest)
        return await run_in_threadpool(decided, conn_id, lambda session: claims.fold(session, conn_id, asked))

    @router.post(claims.CLAIM_RELEASE_PATH)
    async def release(conn_id: str, claim_id: ClaimId, request: Request) -> Response:
        asked = await body_of(request, claims.ReleaseRequest)
        return await run_in_threadpool(
            decided, conn_id, lambda session: claims.release(session, conn_id, claim_id, asked)
        )

    return router
