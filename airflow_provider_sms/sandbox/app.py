"""The sandbox's HTTP interface (FastAPI): the six endpoints of the service and the inspection API."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import httpx
import pendulum
from fastapi import FastAPI, Request, Response
from starlette.types import Receive, Scope, Send

from airflow_provider_sms import codec
from airflow_provider_sms.delay import PARIS
from airflow_provider_sms.exceptions import SmsApiError
from airflow_provider_sms.models import NpaiList
from airflow_provider_sms.sandbox.state import Faults, SandboxState

log = logging.getLogger(__name__)

# HTTP status of each error status (the real service's codes are not documented; these are ours).
HTTP_STATUS = {-1: 401, -2: 400, -3: 402, -4: 400, -5: 404, -6: 400, -7: 400, -8: 200, -99: 500}
MAX_SLOW = 120.0
SEND_PATHS = ("/send", "/send/lists")
CAMPAIGN_PATHS = ("/send", "/send/lists", "/send/simulate", "/send/lists/simulate")


def response_format(request: Request) -> codec.WireFormat:
    # Like the real service: XML unless JSON is asked for.
    return "json" if "json" in request.headers.get("accept", "") else "xml"


def body_format(request: Request, body: bytes) -> codec.WireFormat:
    content_type = request.headers.get("content-type", "")
    if "xml" in content_type:
        return "xml"
    if "json" in content_type:
        return "json"
    return "xml" if body.lstrip().startswith(b"<") else "json"


def answer(
    data: Any, fmt: codec.WireFormat, status_code: int = 200, headers: dict[str, str] | None = None
) -> Response:
    return Response(
        codec.encode_response(data, fmt),
        status_code=status_code,
        media_type=codec.CONTENT_TYPES[fmt],
        headers=headers,
    )


def error(exc: SmsApiError, fmt: codec.WireFormat) -> Response:
    status = exc.status if exc.status is not None else -99
    return answer({"status": status, "message": exc.message}, fmt, HTTP_STATUS.get(status, 400))


class DroppedResponse(Response):
    """Starts an answer and then drops the connection: the client cannot know what happened."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"4096")]})
        await send({"type": "http.response.body", "body": b'{"status":1,', "more_body": True})
        raise ConnectionAbortedError("sandbox fault: connection dropped after the campaign was recorded")


def create_app(state: SandboxState, token: str) -> FastAPI:
    """Build the sandbox application around ``state``, accepting ``Authorization: Bearer <token>``."""
    app = FastAPI(title="SMS service sandbox", docs_url=None, redoc_url=None, openapi_url=None)

    def authorized(request: Request) -> bool:
        return request.headers.get("authorization", "") == f"Bearer {token}"

    def fault_response(path: str, fmt: codec.WireFormat, sends: bool) -> Response | None:
        fault = state.take_fault(path, sends)
        if fault is None:
            return None
        kind, value = fault
        if kind == "rate_limit":
            return answer(
                {"status": -99, "message": "Too many requests"}, fmt, 429, {"Retry-After": f"{value:g}"}
            )
        if kind == "http_error":
            return Response(
                f"<html><body><h1>{value} sandbox fault</h1></body></html>", value, media_type="text/html"
            )
        return None

    def pause() -> None:
        if state.faults.slow:
            time.sleep(min(state.faults.slow, MAX_SLOW))

    def campaign(path: str):  # one handler per campaign endpoint
        def handler(request_body: bytes, request: Request) -> Response:
            fmt = response_format(request)
            sends = path in SEND_PATHS
            if not authorized(request):
                return error(SmsApiError(-1, "invalid or missing access token"), fmt)
            faulty = fault_response(path, fmt, sends=False)
            if faulty is not None:
                return faulty
            try:
                campaign_request = codec.decode_request(request_body, body_format(request, request_body))
                result, record = state.campaign(path, campaign_request)
            except SmsApiError as exc:
                return error(exc, fmt)
            fault = state.take_fault(path, sends) if sends else None
            pause()
            if record is not None and state.config.dlr:
                _post_delivery_reports(state, record)
            if fault and fault[0] == "maybe_sent":
                return answer({"status": -8, "message": "Campaign held for moderation"}, fmt)
            if fault and fault[0] == "drop_after_record":
                return DroppedResponse()
            return answer(result, fmt)

        return handler

    for path in CAMPAIGN_PATHS:
        endpoint = campaign(path)

        async def route(request: Request, _endpoint: Any = endpoint) -> Response:
            body = await request.body()
            # The handler may sleep (slow fault): keep it off the event loop.
            from starlette.concurrency import run_in_threadpool

            return await run_in_threadpool(_endpoint, body, request)

        app.add_api_route(path, route, methods=["POST"], name=path)

    @app.get("/webhook/{webhook_id}")
    def get_webhook(webhook_id: str, request: Request) -> Response:
        fmt = response_format(request)
        if not authorized(request):
            return error(SmsApiError(-1, "invalid or missing access token"), fmt)
        faulty = fault_response("/webhook", fmt, sends=False)
        if faulty is not None:
            return faulty
        pause()
        try:
            webhook = state.webhook(webhook_id)
        except SmsApiError as exc:
            return error(exc, fmt)
        return answer({"status": 1, "message": "OK", "webhook": webhook.model_dump()}, fmt)

    @app.get("/npai")
    def get_npai(request: Request, start: int = 0, length: int | None = None) -> Response:
        fmt = response_format(request)
        if not authorized(request):
            return error(SmsApiError(-1, "invalid or missing access token"), fmt)
        faulty = fault_response("/npai", fmt, sends=False)
        if faulty is not None:
            return faulty
        pause()
        entries = list(state.npai)
        page = entries[max(start, 0) :][: length if length is not None and length >= 0 else None]
        listing = NpaiList(
            status=1, message="OK", list=page, totalRecords=len(entries), totalDisplayRecords=len(page)
        )
        return answer(listing, fmt)

    # ---------------------------------------------------------------- inspection (tests, demos)

    @app.get("/_sandbox/campaigns")
    def campaigns() -> list[dict[str, Any]]:
        return list(state.campaigns)

    @app.post("/_sandbox/reset")
    def reset() -> dict[str, str]:
        state.reset()
        return {"status": "reset"}

    @app.get("/_sandbox/credits")
    def get_credits() -> dict[str, int]:
        return {"credits": state.credits}

    @app.post("/_sandbox/credits")
    def set_credits(payload: dict[str, int]) -> dict[str, int]:
        state.credits = int(payload["credits"])
        return {"credits": state.credits}

    @app.post("/_sandbox/faults")
    def set_faults(payload: dict[str, Any]) -> dict[str, Any]:
        state.faults = Faults(**payload)
        return payload

    @app.delete("/_sandbox/faults")
    def clear_faults() -> dict[str, str]:
        state.faults = Faults()
        return {"status": "cleared"}

    @app.get("/_sandbox/npai")
    def npai() -> list[dict[str, Any]]:
        return [entry.model_dump() for entry in state.npai]

    @app.post("/_sandbox/npai")
    def add_npai(payload: dict[str, Any]) -> dict[str, Any]:
        return state.add_npai(**payload).model_dump()

    @app.post("/_sandbox/webhooks/{webhook_id}")
    def set_webhook(webhook_id: str, payload: dict[str, Any]) -> dict[str, Any]:
        return state.set_webhook(webhook_id, payload).model_dump()

    return app


def _post_delivery_reports(state: SandboxState, record: dict[str, Any]) -> None:
    """POST one delivery report per recipient with a gsmsmsid to DLR webhook "1" (loopback only)."""
    webhook = state.webhooks.get("1")
    if not webhook or urlsplit(webhook["url"]).hostname not in ("127.0.0.1", "localhost"):
        return
    reports = [
        {
            "date": pendulum.now(PARIS).isoformat(),
            "status": 3,
            "destination": recipient["value"],
            "message_id": recipient["gsmsmsid"],
            "campaign_id": int(record["ticket"]),
            "country_code": "FR" if recipient["value"].startswith("33") else None,
        }
        for recipient in record["recipients"]
        if recipient.get("gsmsmsid") and recipient["value"] in record["sent_to"]
    ]

    def deliver() -> None:
        for report in reports:
            try:
                code = httpx.post(
                    webhook["url"],
                    json=report,
                    headers={"X-SMSFactor-Signature": webhook["signature"]},
                    timeout=5,
                ).status_code
            except httpx.HTTPError:
                code = 0
            webhook["last_http_code"] = code

    threading.Thread(target=deliver, name="sandbox-dlr", daemon=True).start()
