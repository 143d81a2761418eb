"""What both proxies of the harness do with a request: read it, pass it on, write the answer whole."""

from __future__ import annotations

import http.client
import http.server
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping


def read_body(handler: http.server.BaseHTTPRequestHandler) -> bytes:
    """The request's body, as long as its Content-Length says (none without one)."""
    length = int(handler.headers.get("Content-Length") or 0)
    return handler.rfile.read(length) if length else b""


def pass_on(
    port: int, timeout: float, method: str, path: str, body: bytes, headers: Mapping[str, str]
) -> tuple[int, list[tuple[str, str]], bytes]:
    """Send the request to 127.0.0.1:``port``; its answer's status, headers and body, read whole."""
    upstream = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        upstream.request(method, path, body=body or None, headers=dict(headers))
        answer = upstream.getresponse()
        return answer.status, answer.getheaders(), answer.read()
    finally:
        upstream.close()


def write_answer(
    handler: http.server.BaseHTTPRequestHandler,
    status: int,
    payload: bytes,
    headers: list[tuple[str, str]],
    leave_out: Collection[str],
) -> None:
    """Answer ``status`` with ``payload`` and ``headers`` (but those named in ``leave_out``, lower case),
    its Content-Length set again."""
    handler.send_response(status)
    for key, value in headers:
        if key.lower() not in leave_out:
            handler.send_header(key, value)
    handler.send_header("Content-Length", str(len(payload)))
    handler.end_headers()
    handler.wfile.write(payload)
