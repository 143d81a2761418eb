"""The service's API in the sandbox: its six endpoints in JSON and XML, the token check and the faults.

Every endpoint answers in the same order: the token and the request faults (before any work), the
work, the answer faults, then the ``slow`` fault.
"""

# No ``from __future__ import annotations``: FastAPI reads the routes' annotations at run time.
import time

from fastapi import APIRouter, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from airflow_provider_sms import codec
from airflow_provider_sms.exceptions import SmsApiError
from airflow_provider_sms.models import NpaiList
from airflow_provider_sms.sandbox.app_state import SandboxDep, expected_authorization
from airflow_provider_sms.sandbox.dlr_poster import post_delivery_reports
from airflow_provider_sms.sandbox.responses import (
    HTML_PAGE,
    DroppedResponse,
    TruncatedResponse,
    answer,
    api_error,
    body_format,
    error,
    response_format,
)
from airflow_provider_sms.sandbox.state import CAMPAIGN_PATHS, SandboxState
from airflow_provider_sms.sandbox.wire import decode_request

router = APIRouter()


def refusal(state: SandboxState, request: Request, path: str, fmt: codec.WireFormat) -> Response | None:
    """The answer given before any work: wrong token, then an injected 429 or HTTP error; else None.

    :param state: the account, which counts the request and holds the faults.
    :param request: the request, whose ``Authorization`` is checked.
    :param path: the endpoint, as faults name it.
    :param fmt: the answer's format.
    """
    state.count_request(path)
    if request.headers.get("authorization", "") != expected_authorization(request):
        return error(-1, "invalid or missing access token", fmt)
    fault = state.take_fault(path)
    if fault is None:
        return None
    kind, value = fault
    if kind == "rate_limit":
        return answer(
            {"status": -99, "message": "Too many requests"}, fmt, 429, {"Retry-After": f"{value:g}"}
        )
    # What a proxy in front of a failing service answers: HTML, not the service's envelope.
    code = int(value)
    return Response(f"<html><body><h1>{code} sandbox fault</h1></body></html>", code, media_type="text/html")


def with_answer_fault(state: SandboxState, path: str, good: Response, fmt: codec.WireFormat) -> Response:
    """``good`` (the answer of a processed request), or what an answer fault makes of it.

    :param state: the account, which holds the faults.
    :param path: the endpoint, as faults name it.
    :param good: the answer without a fault.
    :param fmt: the answer's format.
    """
    fault = state.take_answer_fault(path)
    if fault == "maybe_sent":
        return error(-8, "Campaign held for moderation", fmt)
    if fault == "drop_after_record":
        return DroppedResponse()
    if fault == "bad_success_shape":
        return answer({"status": 1, "message": "OK"}, fmt)
    if fault == "unknown_error":
        # HTTP 200, as the service answers a status it cannot explain.
        return answer({"status": -99, "message": "Unknown error"}, fmt)
    if fault == "truncated":
        return TruncatedResponse(good.body, good.status_code, media_type=good.media_type)
    if fault == "empty_body":
        return Response(b"", good.status_code, media_type=good.media_type)
    if fault == "wrong_content_type":
        return Response(HTML_PAGE, good.status_code, media_type="text/html")
    return good


def pause(state: SandboxState, path: str) -> None:
    """The ``slow`` fault (runs in a worker thread, never on the event loop).

    Taken after the answer faults: a request the client gave up on must not wake up later and consume
    the faults meant for the next one.

    :param state: the account, which holds the faults.
    :param path: the endpoint, as faults name it.
    """
    seconds = state.slowness(path)
    if seconds:
        time.sleep(seconds)


def campaign(state: SandboxState, path: str, body: bytes, request: Request) -> Response:
    """A send or a simulation, then its delivery reports when they are on.

    :param state: the account.
    :param path: the campaign endpoint called.
    :param body: the request's body, JSON or XML.
    :param request: the request (its headers).
    """
    fmt = response_format(request)
    early = refusal(state, request, path, fmt)
    if early is not None:
        return early
    try:
        result, record = state.campaign(path, decode_request(body, body_format(request, body)))
    except SmsApiError as exc:
        return api_error(exc, fmt)
    response = with_answer_fault(state, path, answer(result, fmt), fmt)
    pause(state, path)
    if record is not None and state.dlr_enabled:
        post_delivery_reports(state, record)
    return response


async def post_campaign(request: Request, state: SandboxDep) -> Response:
    """``POST`` on any of the campaign endpoints (one handler: the route says which)."""
    body = await request.body()
    path: str = request.scope["route"].path
    # The work takes the state's lock and may sleep (slow fault): keep it off the event loop.
    return await run_in_threadpool(campaign, state, path, body, request)


for campaign_path in CAMPAIGN_PATHS:
    router.add_api_route(campaign_path, post_campaign, methods=["POST"], name=campaign_path)


@router.get("/webhook/{webhook_id}")
def get_webhook(webhook_id: str, request: Request, state: SandboxDep) -> Response:
    fmt = response_format(request)
    early = refusal(state, request, "/webhook", fmt)
    if early is not None:
        return early
    try:
        webhook = state.webhook(webhook_id)
    except SmsApiError as exc:
        return api_error(exc, fmt)
    good = answer({"status": 1, "message": "OK", "webhook": webhook.model_dump()}, fmt)
    response = with_answer_fault(state, "/webhook", good, fmt)
    pause(state, "/webhook")
    return response


@router.get("/npai")
def get_npai(
    request: Request, state: SandboxDep, start: int = Query(0, ge=0), length: int | None = Query(None, ge=0)
) -> Response:
    # start/length follow the service's other list endpoints, but without them the whole list is
    # returned (the interface shows no paging).
    fmt = response_format(request)
    early = refusal(state, request, "/npai", fmt)
    if early is not None:
        return early
    entries = list(state.npai)
    page = entries[start:] if length is None else entries[start : start + length]
    listing = NpaiList(
        status=1, message="OK", list=page, totalRecords=len(entries), totalDisplayRecords=len(page)
    )
    response = with_answer_fault(state, "/npai", answer(listing, fmt), fmt)
    pause(state, "/npai")
    return response
