"""A round-robin load balancer in front of several API servers: a 502 where a backend is down."""

from __future__ import annotations

import http.client
import http.server
import socket
import threading
from dataclasses import dataclass, field, replace
from typing import Any

from tests.deployment.harness.relay import pass_on, read_body, write_answer
from tests.deployment.harness.waiting import DeploymentError

# A client connection idle this long is closed; an API server that takes this long to answer is a 502.
CLIENT_IDLE_TIMEOUT = 30.0
BACKEND_TIMEOUT = 30.0
# Headers that concern one hop only: never passed on (Content-Length is set again by the proxy).
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
    }
)


@dataclass
class BackendTally:
    """What a :class:`RoundRobinProxy` did with the requests it sent to one backend."""

    port: int
    forwarded: int = 0
    answers: dict[int, int] = field(default_factory=dict)
    # Requests answered 502 by the proxy: nothing listened, or the backend died before answering.
    failed: int = 0


class RoundRobinProxy:
    """A load balancer on 127.0.0.1: each request goes to the next backend in turn.

    Per request, not per connection (a client keeping its connection alive still reaches every
    backend). It never retries: a backend that is down, or dies before answering, makes the proxy
    answer 502 (as a real load balancer with no health check yet does), so that the client's own
    retries are what recovers, and a POST is never sent twice by the proxy. Bounded: idle client
    connections close after :data:`CLIENT_IDLE_TIMEOUT`, a backend's answer is awaited at most
    :data:`BACKEND_TIMEOUT`; its threads are daemons, and :meth:`stop` ends it.

    :param backend_ports: the ports on 127.0.0.1 it spreads the requests over.
    :param name: what it stands in front of, for its thread's name.
    """

    def __init__(self, backend_ports: list[int], name: str) -> None:
        if not backend_ports:
            raise DeploymentError("a round-robin proxy needs at least one backend")
        self.backends = [BackendTally(port) for port in backend_ports]
        self._turn = 0
        self._lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            # HTTP/1.1: the client's connection is kept alive across requests (each still balanced).
            protocol_version = "HTTP/1.1"
            timeout = CLIENT_IDLE_TIMEOUT

            def setup(self) -> None:
                super().setup()
                # The head and the body of an answer are two writes: without this, Nagle's algorithm
                # and the client's delayed ACK hold the body back on every kept-alive request.
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def _forward(self) -> None:
                if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                    self._answer(411, b"the load balancer needs a Content-Length", [])
                    return
                body = read_body(self)
                backend = proxy._next_backend()
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP | {"host"}}
                try:
                    status, answer_headers, payload = pass_on(
                        backend.port, BACKEND_TIMEOUT, self.command, self.path, body, headers
                    )
                except (OSError, http.client.HTTPException):
                    proxy._count(backend, None)
                    self._answer(502, b"the API server did not answer", [])
                    return
                proxy._count(backend, status)
                self._answer(status, payload, answer_headers)

            def _answer(self, status: int, payload: bytes, headers: list[tuple[str, str]]) -> None:
                write_answer(self, status, payload, headers, leave_out=HOP_BY_HOP)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward

            def log_message(self, format: str, *args: Any) -> None:
                pass  # counted per backend instead

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, name=f"lb-{name}", daemon=True)

    def _next_backend(self) -> BackendTally:
        with self._lock:
            backend = self.backends[self._turn % len(self.backends)]
            self._turn += 1
            backend.forwarded += 1
            return backend

    def _count(self, backend: BackendTally, status: int | None) -> None:
        with self._lock:
            if status is None:
                backend.failed += 1
            else:
                backend.answers[status] = backend.answers.get(status, 0) + 1

    def tallies(self) -> list[BackendTally]:
        """A copy of what each backend got so far, in the order of the backends."""
        with self._lock:
            return [replace(backend, answers=dict(backend.answers)) for backend in self.backends]

    def start(self) -> RoundRobinProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
