"""The sandbox's answers: the service's envelope in JSON or XML, and the broken answers of its faults."""

from __future__ import annotations

import socket
import struct
from typing import TYPE_CHECKING, Any

from fastapi import Request, Response

from airflow_provider_sms import codec
from airflow_provider_sms.sandbox.wire import encode_response

if TYPE_CHECKING:
    from starlette.types import Receive, Scope, Send

    from airflow_provider_sms.exceptions import SmsApiError

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


def response_format(request: Request) -> codec.WireFormat:
    """The answer's format: JSON if ``Accept`` asks for it, else XML (like the real service).

    :param request: the request answered; the inspection API always answers JSON.
    """
    if request.url.path.startswith(INSPECTION_PREFIX):
        return "json"
    return "json" if "json" in request.headers.get("accept", "") else "xml"


def body_format(request: Request, body: bytes) -> codec.WireFormat:
    """The request body's format: from ``Content-Type``, else sniffed from its first character.

    :param request: the request whose ``Content-Type`` is read.
    :param body: the request's body.
    """
    content_type = request.headers.get("content-type", "")
    if "xml" in content_type:
        return "xml"
    if "json" in content_type:
        return "json"
    return "xml" if body.lstrip().startswith(b"<") else "json"


def answer(
    data: Any, fmt: codec.WireFormat, status_code: int = 200, headers: dict[str, str] | None = None
) -> Response:
    """Encode ``data`` as the service would (:mod:`.wire`), in ``fmt``.

    :param data: a model or a mapping, as :func:`.wire.encode_response` takes them.
    :param fmt: the answer's format.
    :param status_code: the HTTP status.
    :param headers: extra headers (``Retry-After``).
    """
    return Response(
        encode_response(data, fmt),
        status_code=status_code,
        media_type=codec.CONTENT_TYPES[fmt],
        headers=headers,
    )


def error(status: int, message: str, fmt: codec.WireFormat) -> Response:
    """The error envelope ``{status, message}`` (XML root ``response``) with its HTTP code.

    :param status: the service's status (negative), which gives the HTTP code.
    :param message: the envelope's message.
    :param fmt: the answer's format.
    """
    return answer({"status": status, "message": message}, fmt, HTTP_STATUS.get(status, 400))


def api_error(exc: SmsApiError, fmt: codec.WireFormat) -> Response:
    """The error envelope of ``exc`` (status -99 when it has none).

    :param exc: the refusal to answer.
    :param fmt: the answer's format.
    """
    return error(exc.status if exc.status is not None else -99, exc.message, fmt)


class DroppedConnection(ConnectionAbortedError):
    """Raised mid-answer to make the server cut the connection (``drop_after_record``, ``truncated``)."""


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
