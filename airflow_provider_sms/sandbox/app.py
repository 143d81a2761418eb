"""The sandbox's HTTP interface (FastAPI): the six endpoints of the service and the inspection API."""

from __future__ import annotations

import logging
import socket
import struct
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import httpx
import pendulum
from fastapi import Body, FastAPI, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from starlette.concurrency import run_in_threadpool
from starlette.types import Receive, Scope, Send

from airflow_provider_sms import codec
from airflow_provider_sms.delay import PARIS
from airflow_provider_sms.exceptions import SmsApiError
from airflow_provider_sms.models import DeliveryReport, NpaiList
from airflow_provider_sms.sandbox.state import CAMPAIGN_PATHS, COUNTRY_CODES, Faults, SandboxState

# HTTP status of each error status (the real service's codes are not documented; these are ours).
# -8 is 200: the campaign exists and may still go out, exactly like a success.
HTTP_STATUS = {-1: 401, -2: 400, -3: 402, -4: 400, -5: 404, -6: 400, -7: 400, -8: 200, -99: 500}
INSPECTION_PREFIX = "/_sandbox"
# The scope key under which SandboxApp keeps the server's own ``send`` (see DroppedResponse).
SERVER_SEND = "sms_sandbox.server_send"
# What a proxy, a captive portal or a web site at the wrong base URL answers: a page, not an answer.
HTML_PAGE = (
    b"<!DOCTYPE html><html><head><title>Welcome</title></head>"
    b"<body><h1>Welcome</h1><p>sandbox fault: an HTML page instead of an answer</p></body></html>"
)
# The webhook delivery reports go to, and the only hosts they may go to.
DLR_WEBHOOK_ID = "1"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost")


def response_format(request: Request) -> codec.WireFormat:
    """The answer's format: JSON if ``Accept`` asks for it, else XML (like the real service)."""
    if request.url.path.startswith(INSPECTION_PREFIX):
        return "json"
    return "json" if "json" in request.headers.get("accept", "") else "xml"


def body_format(request: Request, body: bytes) -> codec.WireFormat:
    """The request body's format: from ``Content-Type``, else sniffed from its first character."""
    content_type = request.headers.get("content-type", "")
    if "xml" in content_type:
        return "xml"
    if "json" in content_type:
        return "json"
    return "xml" if body.lstrip().startswith(b"<") else "json"


def answer(
    data: Any, fmt: codec.WireFormat, status_code: int = 200, headers: dict[str, str] | None = None
) -> Response:
    """Encode ``data`` as the service would (codec), in ``fmt``."""
    return Response(
        codec.encode_response(data, fmt),
        status_code=status_code,
        media_type=codec.CONTENT_TYPES[fmt],
        headers=headers,
    )


def error(status: int, message: str, fmt: codec.WireFormat) -> Response:
    """The error envelope ``{status, message}`` (XML root ``response``) with its HTTP code."""
    return answer({"status": status, "message": message}, fmt, HTTP_STATUS.get(status, 400))


def api_error(exc: SmsApiError, fmt: codec.WireFormat) -> Response:
    return error(exc.status if exc.status is not None else -99, exc.message, fmt)


class DroppedConnection(ConnectionAbortedError):
    """Raised mid-answer to make the server cut the connection (``drop_after_record``, ``truncated``)."""


class SandboxApp(FastAPI):
    """The sandbox's FastAPI application; it keeps the server's own ``send`` in the request scope.

    Starlette's middlewares wrap ``send``; only the server's own one (uvicorn's, a bound method of the
    request cycle) reaches the connection, which :class:`DroppedResponse` closes without answering.
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope[SERVER_SEND] = send
        await super().__call__(scope, receive, send)


class DroppedResponse(Response):
    """Closes the connection without a byte of answer (a reset): the client cannot know what happened.

    Under a server whose connection cannot be reached, the answer is started and cut instead.
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        server_send = scope.get(SERVER_SEND)
        transport = getattr(getattr(server_send, "__self__", None), "transport", None)
        if transport is not None:
            sock = transport.get_extra_info("socket")
            if sock is not None:
                # Linger 0: the close sends a TCP reset, as a crashed server or a broken proxy does.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            transport.close()
        else:
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"4096")]}
            )
            await send({"type": "http.response.body", "body": b'{"status":1,', "more_body": True})
        raise DroppedConnection("sandbox fault: connection dropped after the request was processed")


class TruncatedResponse(Response):
    """Sends the headers of the full answer (its ``Content-Length``), half of its body, then hangs up."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        await send(
            {"type": "http.response.body", "body": self.body[: len(self.body) // 2], "more_body": True}
        )
        raise DroppedConnection("sandbox fault: answer truncated")


class _QuietDroppedConnection(logging.Filter):
    """Keep uvicorn from logging a traceback for a connection the sandbox drops on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], DroppedConnection))


def create_app(state: SandboxState, token: str) -> FastAPI:
    """Build the sandbox application around ``state``.

    :param state: the account the endpoints read and change.
    :param token: the access token accepted in ``Authorization: Bearer <token>``.
    """
    app = SandboxApp(title="SMS service sandbox", docs_url=None, redoc_url=None, openapi_url=None)
    uvicorn_errors = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _QuietDroppedConnection) for f in uvicorn_errors.filters):
        uvicorn_errors.addFilter(_QuietDroppedConnection())
    expected_authorization = f"Bearer {token}"

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> Response:
        # Bad query parameters (GET /npai) or inspection payloads: a data error naming the field.
        problems = "; ".join(
            ".".join(str(part) for part in err["loc"] if part not in ("body", "query", "path"))
            + ": "
            + str(err["msg"]).removeprefix("Value error, ")
            for err in exc.errors()
        )
        return error(-7, problems, response_format(request))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> Response:
        # A sandbox bug still answers in the service's shape: status -99, unknown error.
        return error(-99, f"sandbox error: {type(exc).__name__}: {exc}", response_format(request))

    def refused(request: Request, path: str, fmt: codec.WireFormat) -> Response | None:
        """The answer given before any work: wrong token, then an injected 429 or HTTP error."""
        state.count_request(path)
        if request.headers.get("authorization", "") != expected_authorization:
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
        return Response(
            f"<html><body><h1>{code} sandbox fault</h1></body></html>", code, media_type="text/html"
        )

    def pause(path: str) -> None:
        """The ``slow`` fault (runs in a worker thread, never on the event loop)."""
        seconds = state.slowness(path)
        if seconds:
            time.sleep(seconds)

    def faulty(path: str, good: Response, fmt: codec.WireFormat) -> Response:
        """``good`` (the answer of a processed request), or what an answer fault makes of it."""
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

    def campaign(path: str, body: bytes, request: Request) -> Response:
        fmt = response_format(request)
        early = refused(request, path, fmt)
        if early is not None:
            return early
        try:
            result, record = state.campaign(path, codec.decode_request(body, body_format(request, body)))
        except SmsApiError as exc:
            return api_error(exc, fmt)
        response = faulty(path, answer(result, fmt), fmt)
        pause(path)
        if record is not None and state.dlr_enabled:
            _post_delivery_reports(state, record)
        return response

    def add_campaign_route(path: str) -> None:
        async def route(request: Request) -> Response:
            body = await request.body()
            # The work takes the state's lock and may sleep (slow fault): keep it off the event loop.
            return await run_in_threadpool(campaign, path, body, request)

        app.add_api_route(path, route, methods=["POST"], name=path)

    for path in CAMPAIGN_PATHS:
        add_campaign_route(path)

    @app.get("/webhook/{webhook_id}")
    def get_webhook(webhook_id: str, request: Request) -> Response:
        fmt = response_format(request)
        early = refused(request, "/webhook", fmt)
        if early is not None:
            return early
        try:
            webhook = state.webhook(webhook_id)
        except SmsApiError as exc:
            return api_error(exc, fmt)
        response = faulty(
            "/webhook", answer({"status": 1, "message": "OK", "webhook": webhook.model_dump()}, fmt), fmt
        )
        # Faults are taken before the pause, as on sends: a request the client gave up on must not
        # wake up later and consume the faults meant for the next one.
        pause("/webhook")
        return response

    @app.get("/npai")
    def get_npai(
        request: Request, start: int = Query(0, ge=0), length: int | None = Query(None, ge=0)
    ) -> Response:
        # Paging is not shown in the interface; start/length follow the service's other list endpoints,
        # but without them the whole list is returned (the interface shows no paging).
        fmt = response_format(request)
        early = refused(request, "/npai", fmt)
        if early is not None:
            return early
        entries = list(state.npai)
        page = entries[start:] if length is None else entries[start : start + length]
        listing = NpaiList(
            status=1, message="OK", list=page, totalRecords=len(entries), totalDisplayRecords=len(page)
        )
        response = faulty("/npai", answer(listing, fmt), fmt)
        pause("/npai")
        return response

    # ---------------------------------------------------------------- inspection (tests, demos)

    @app.get(f"{INSPECTION_PREFIX}/campaigns")
    def campaigns() -> list[dict[str, Any]]:
        return list(state.campaigns)

    @app.get(f"{INSPECTION_PREFIX}/delivery-reports")
    def delivery_reports() -> dict[str, Any]:
        return {"attempted": state.dlr_attempts, "acknowledged": list(state.dlr_acknowledged)}

    @app.post(f"{INSPECTION_PREFIX}/delivery-reports")
    def set_delivery_reports(payload: dict[str, Any]) -> dict[str, Any]:
        try:
            state.set_delivery_reports(
                bool(payload.get("enabled")), payload.get("statuses"), payload.get("tries")
            )
        except ValueError as exc:
            raise SmsApiError(-7, str(exc)) from None
        return {"enabled": state.dlr_enabled, "statuses": list(state.dlr_statuses), "tries": state.dlr_tries}

    @app.post(f"{INSPECTION_PREFIX}/reset")
    def reset() -> dict[str, str]:
        state.reset()
        return {"status": "reset"}

    @app.get(f"{INSPECTION_PREFIX}/credits")
    def get_credits() -> dict[str, int]:
        return {"credits": state.credits}

    @app.post(f"{INSPECTION_PREFIX}/credits")
    def set_credits(payload: dict[str, int]) -> dict[str, int]:
        try:
            return {"credits": state.set_credits(payload["credits"])}
        except (KeyError, ValueError) as exc:
            raise SmsApiError(-7, f"credits: {exc}") from None

    @app.get(f"{INSPECTION_PREFIX}/faults")
    def get_faults() -> dict[str, Any]:
        return state.faults.model_dump()

    @app.post(f"{INSPECTION_PREFIX}/faults")
    def set_faults(faults: Faults) -> dict[str, Any]:
        state.faults = faults
        return faults.model_dump()

    @app.delete(f"{INSPECTION_PREFIX}/faults")
    def clear_faults() -> dict[str, Any]:
        state.faults = Faults()
        return state.faults.model_dump()

    @app.get(f"{INSPECTION_PREFIX}/requests")
    def requests_received() -> dict[str, int]:
        return dict(state.requests)

    @app.get(f"{INSPECTION_PREFIX}/npai")
    def npai() -> list[dict[str, Any]]:
        return [entry.model_dump() for entry in state.npai]

    @app.post(f"{INSPECTION_PREFIX}/npai")
    def add_npai(
        destination: str = Body(),
        campaign_id: int | None = Body(None),
        date: str | None = Body(None),
    ) -> dict[str, Any]:
        return state.add_npai(destination, campaign_id, date).model_dump()

    @app.post(f"{INSPECTION_PREFIX}/webhooks/{{webhook_id}}")
    def set_webhook(webhook_id: str, payload: dict[str, Any]) -> dict[str, Any]:
        return state.set_webhook(webhook_id, payload).model_dump()

    @app.exception_handler(SmsApiError)
    async def inspection_error(request: Request, exc: SmsApiError) -> Response:
        return api_error(exc, response_format(request))

    return app


def _post_delivery_reports(state: SandboxState, record: dict[str, Any]) -> None:
    """POST one delivery report per number sent to DLR webhook "1", loopback only, as the service does.

    Runs in a thread of its own, so the send's answer does not wait for the receiver. Statuses are
    taken in turn from ``SandboxConfig.dlr_statuses``; a report answered with anything but a 2xx (or
    not answered) is tried again with a doubling backoff, up to ``dlr_tries`` times; every try is
    counted and ``last_http_code`` keeps the code of the latest one (0: no answer).
    """
    try:
        webhook = state.webhook(DLR_WEBHOOK_ID)
    except SmsApiError:
        return
    if urlsplit(webhook.url).hostname not in LOOPBACK_HOSTS:
        return
    config = state.config
    statuses = state.dlr_statuses
    sent_to = set(record["sent_to"])
    recipients = [recipient for recipient in record["recipients"] if recipient["value"] in sent_to]
    reports = [
        DeliveryReport(
            date=pendulum.now(PARIS),
            status=statuses[index % len(statuses)],
            destination=recipient["value"],
            message_id=recipient.get("gsmsmsid"),
            campaign_id=int(record["ticket"]),
            country_code=next(
                (code for prefix, code in COUNTRY_CODES.items() if recipient["value"].startswith(prefix)),
                None,
            ),
        )
        for index, recipient in enumerate(recipients)
    ]
    if not reports:
        return
    headers = {"Content-Type": "application/json", "X-SMSFactor-Signature": webhook.signature or ""}

    def deliver() -> None:
        with httpx.Client(timeout=5) as client:
            for report in reports:
                body = codec.encode_delivery_report(report)
                wait = config.dlr_backoff
                for _ in range(max(1, state.dlr_tries)):
                    try:
                        code = client.post(webhook.url, content=body, headers=headers).status_code
                    except httpx.HTTPError:
                        code = 0
                    state.record_webhook_call(DLR_WEBHOOK_ID, code, report.model_dump(mode="json"))
                    if 200 <= code < 300:
                        break
                    time.sleep(wait)
                    wait = min(wait * 2, 5.0)
                if config.dlr_delay:
                    time.sleep(config.dlr_delay)

    threading.Thread(target=deliver, name="sandbox-dlr", daemon=True).start()
