"""Where a send failed, before the first byte of the request left or after: SmsHook's "nothing was sent".

A send is never repeated, so "nothing was sent" (SmsTransportError, which Airflow retries) must be
certain. The exception's class cannot tell: requests raises ``SSLError`` for a failed TLS handshake and
for a TLS record broken while the answer is read, after the whole POST was written (even after a
``200 OK`` status line); a ``ConnectionError`` may be a refused connection or a reset one. So the hook
asks where it happened: its session's :class:`ProgressAdapter` serves requests through connections
that note, in the :class:`SendProgress` of the send under way (:func:`tracking`), that they connected
and that the request's first byte is about to be written; :func:`nothing_sent` reads the note.

When the request did not go through those connections (requests-mock in the unit tests, an adapter a
user mounted, a SOCKS proxy, whose pools have connections of their own), there is no note, and the
class decides, failing closed: only the classes that cannot come after a written byte say "nothing
was sent" (:func:`nothing_sent_by_class`).

requests and urllib3 are imported here: the hook imports this module where it builds its session.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import requests
from requests.adapters import DEFAULT_POOLBLOCK, HTTPAdapter
from urllib3 import HTTPConnectionPool, HTTPSConnectionPool, PoolManager, poolmanager
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.exceptions import NewConnectionError

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["ProgressAdapter", "SendProgress", "nothing_sent", "nothing_sent_by_class", "tracking"]


@dataclass
class SendProgress:
    """How far one send went, as noted by the connections of :class:`ProgressAdapter`.

    :param tracked: one of those connections connected or wrote for it, so the note below can be trusted.
    :param request_started: a byte of the request was about to be written (once set, it stays set:
        a redirect's second request cannot undo the first).
    """

    tracked: bool = False
    request_started: bool = False


# The send under way in this thread (requests runs the call in the caller's thread and context).
# Reads and simulations set none: their connections note nothing.
_progress: ContextVar[SendProgress | None] = ContextVar("sms_send_progress", default=None)


@contextmanager
def tracking() -> Iterator[SendProgress]:
    """Note into the :class:`SendProgress` yielded how far the requests made in this block went."""
    progress = SendProgress()
    token = _progress.set(progress)
    try:
        yield progress
    finally:
        _progress.reset(token)


def nothing_sent(exc: requests.RequestException, progress: SendProgress) -> bool:
    """True when the request of a send certainly never left: it failed before its first byte was written.

    Decided by where it failed when the send was tracked (a refused connection, DNS, a connect timeout,
    a TLS handshake or a proxy's CONNECT failing all come before), else by :func:`nothing_sent_by_class`.
    """
    if progress.tracked:
        return not progress.request_started
    return nothing_sent_by_class(exc)


def nothing_sent_by_class(exc: requests.RequestException) -> bool:
    """The fallback when the send was not tracked: the classes raised only before a request is written.

    ``SSLError`` is not one of them: it is also raised for a TLS record broken while the answer is read.
    """
    if isinstance(
        exc,
        (
            requests.ConnectTimeout,
            requests.exceptions.InvalidURL,
            requests.exceptions.MissingSchema,
            requests.exceptions.InvalidSchema,
        ),
    ):
        return True
    if isinstance(exc, requests.ConnectionError):
        reason = getattr(exc.args[0], "reason", None) if exc.args else None
        return isinstance(reason, NewConnectionError)
    return False


# ------------------------------------------------------------------------------------ connections

if TYPE_CHECKING:
    _Connection = HTTPConnection
else:
    _Connection = object


class _TrackingConnection(_Connection):
    """A mixin of urllib3's connections that notes, in the send under way, how far its request went.

    Every byte of a request goes through ``send()``: urllib3's ``request()`` writes the head with
    http.client's ``endheaders()`` and the body itself, both with ``self.send``. ``connect()`` calls
    ``send()`` too, for a proxy tunnel's CONNECT, which is not the request: hence ``_connecting``.
    """

    _connecting = False

    def connect(self) -> None:
        progress = _progress.get()
        if progress is not None:
            progress.tracked = True
        self._connecting = True
        try:
            super().connect()
        finally:
            self._connecting = False

    def send(self, data: Any) -> None:  # Any: whatever http.client's send() takes
        progress = _progress.get()
        if progress is not None and not self._connecting:
            if self.sock is None and self.auto_open:
                # Plain HTTP connects lazily, inside http.client's send(): connect first, or a refused
                # connection would be taken for a request already started.
                self.connect()
            progress.tracked = True
            progress.request_started = True
        super().send(data)


class _TrackingHTTPConnection(_TrackingConnection, HTTPConnection):
    pass


class _TrackingHTTPSConnection(_TrackingConnection, HTTPSConnection):
    pass


class _TrackingHTTPConnectionPool(HTTPConnectionPool):
    ConnectionCls = _TrackingHTTPConnection


class _TrackingHTTPSConnectionPool(HTTPSConnectionPool):
    ConnectionCls = _TrackingHTTPSConnection


_TRACKING_POOLS: dict[str, type[HTTPConnectionPool]] = {
    "http": _TrackingHTTPConnectionPool,
    "https": _TrackingHTTPSConnectionPool,
}


class ProgressAdapter(HTTPAdapter):
    """requests' HTTP adapter, with connections that note how far a send went (see :func:`tracking`).

    Direct and proxied (HTTP and HTTPS proxies) requests go through them; a SOCKS proxy's pools keep
    their own connections, untracked, so such a send is judged by :func:`nothing_sent_by_class`.
    """

    def init_poolmanager(
        self, connections: int, maxsize: int, block: bool = DEFAULT_POOLBLOCK, **pool_kwargs: Any
    ) -> None:
        super().init_poolmanager(connections, maxsize, block, **pool_kwargs)
        _use_tracking_pools(self.poolmanager)

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        return _use_tracking_pools(super().proxy_manager_for(proxy, **proxy_kwargs))


def _use_tracking_pools(manager: PoolManager) -> PoolManager:
    # Only urllib3's own pool classes are replaced: a manager with others (SOCKS) keeps them.
    if manager.pool_classes_by_scheme is poolmanager.pool_classes_by_scheme:
        manager.pool_classes_by_scheme = _TRACKING_POOLS
    return manager
