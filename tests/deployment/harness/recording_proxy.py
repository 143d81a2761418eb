"""A loopback proxy that records the requests it forwards, and holds back the ones a test chooses."""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from tests.deployment.harness.relay import pass_on, read_body, write_answer
from tests.deployment.harness.waiting import DeploymentError

# Longest time a held request waits to be dropped (a test that forgot it must not hang a worker).
HOLD_LIMIT = 300.0
# Longest wait for the server's answer to a forwarded request.
UPSTREAM_TIMEOUT = 60.0
# Headers of an answer not passed on (Content-Length is set again by the proxy).
LEFT_OUT = frozenset({"transfer-encoding", "connection", "content-length"})
# (method, path, body) of a request; says whether a hold wants it.
RequestMatch = Callable[[str, str, bytes], bool]


class HeldRequest:
    """Requests a :class:`RecordingProxy` holds back instead of forwarding them, until :meth:`drop`.

    Every request the hold matches waits (the client's resends after its timeout too), so none of
    them reaches the server while the test acts: a process killed meanwhile dies at a point the test
    chose instead of one it tried to catch. Dropped, they are answered 503, never forwarded.
    """

    def __init__(self, match: RequestMatch) -> None:
        self.match = match
        self.arrived = threading.Event()
        self.dropped = threading.Event()
        self.request: tuple[str, str] | None = None
        self.count = 0

    def wait(self, timeout: float) -> tuple[str, str]:
        """Wait until a request is held; return the first one's method and path."""
        if not self.arrived.wait(timeout):
            raise DeploymentError(f"no request matching the hold came within {timeout} s")
        assert self.request is not None
        return self.request

    def drop(self) -> None:
        """Answer the held request 503 without forwarding it (and stop waiting for one)."""
        self.dropped.set()


class RecordingProxy:
    """A loopback HTTP proxy that records the method and path of every request it forwards.

    It can also hold back chosen requests (:meth:`hold`), or slow every one down (:attr:`delay`).

    :param target_port: the port on 127.0.0.1 it forwards to.
    :param name: what it stands in front of, for its thread's name.
    """

    def __init__(self, target_port: int, name: str) -> None:
        self.requests: list[tuple[str, str]] = []
        # Seconds each request waits before it is forwarded: a slow route to the server.
        self.delay = 0.0
        self._hold: HeldRequest | None = None
        self._lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _forward(self) -> None:
                body = read_body(self)
                held = proxy._take_hold(self.command, self.path, body)
                if held is not None:
                    held.dropped.wait(HOLD_LIMIT)
                    with contextlib.suppress(OSError):  # its client is usually dead by now
                        self.send_error(503, "held back by the test and dropped")
                    return
                proxy.requests.append((self.command, self.path))
                if proxy.delay:
                    time.sleep(proxy.delay)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                status, answer_headers, payload = pass_on(
                    target_port, UPSTREAM_TIMEOUT, self.command, self.path, body, headers
                )
                write_answer(self, status, payload, answer_headers, leave_out=LEFT_OUT)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the requests are recorded above; nothing to print

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name=f"proxy-{name}", daemon=True)

    def hold(self, match: RequestMatch) -> HeldRequest:
        """Hold back the requests that ``match`` accepts from now on (the others pass) until released."""
        with self._lock:
            if self._hold is not None:
                raise DeploymentError("the proxy already holds back a request")
            self._hold = HeldRequest(match)
            return self._hold

    def release_hold(self) -> None:
        """Forget the hold (and drop the requests it holds): every request passes again."""
        with self._lock:
            held, self._hold = self._hold, None
        if held is not None:
            held.drop()

    def _take_hold(self, method: str, path: str, body: bytes) -> HeldRequest | None:
        with self._lock:
            held = self._hold
            if held is None or held.dropped.is_set() or not held.match(method, path, body):
                return None
            held.count += 1
            if held.request is None:
                held.request = (method, path)
                held.arrived.set()
            return held

    def start(self) -> RecordingProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.release_hold()
        self._server.shutdown()
        self._server.server_close()


def guard_write(dag_id: str, index: int, state: str) -> RequestMatch:
    """Matches a send task of ``dag_id`` writing its send guard with batch ``index`` (0-based) as
    ``state``: through the execution API, ``PUT .../variables/<key>``, the guard's JSON in ``val``."""

    def match(method: str, path: str, body: bytes) -> bool:
        if method != "PUT" or "/variables/" not in path:
            return False
        try:
            document = json.loads(json.loads(body)["val"])
        except (ValueError, KeyError, TypeError):
            return False  # another Variable
        if not isinstance(document, dict) or document.get("dag_id") != dag_id:
            return False
        batch = (document.get("batches") or {}).get(str(index))
        return isinstance(batch, dict) and batch.get("state") == state

    return match
