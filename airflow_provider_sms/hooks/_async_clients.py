"""Internal: one httpx client per event loop and connection, shared by the async hooks, and shared reads.

A triggerer runs all its triggers (up to a thousand by default) in one event loop. Each trigger has its
own :class:`~airflow_provider_sms.hooks.sms.SmsAsyncHook`; were each hook to open its own
``httpx.AsyncClient``, every trigger would build a TLS context (tens of milliseconds of CPU on the loop,
about a megabyte) and hold its own sockets. Here the hooks of one event loop and one connection (equal
:class:`SmsConnectionSettings`: base URL, token, format, timeout, TLS) share one :class:`Pool`:

- one client, whose pool keeps at most :data:`MAX_CONNECTIONS` connections;
- as many slots: a request takes one before it is built, so that a thousand polls falling due at once
  wait as a thousand cheap waiters, woken one by one as slots free up, instead of building a thousand
  requests in one turn of the loop and queueing them in httpx's pool.

:func:`acquire` hands the pool out and counts its users (the first one builds the client in a worker
thread: loading the TLS trust store takes tens of milliseconds); :func:`release` closes the client when
the last user lets go. Clients still open when their loop ends (a hook never closed) are closed by a
task of that loop that waits for the end (``asyncio.run``, as the triggerer, cancels what is left);
that task stops as soon as the loop has no shared client or read left.

:func:`shared_read` makes reads of the same resource that overlap on one loop one request: the NPAI
list that a hundred NPAI sensors poll at the same moment is read and decoded once, and a connection
that a thousand triggers starting together look up is looked up once.

Not public API: use the hooks.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Hashable

    import httpx

    from airflow_provider_sms.hooks._transport import SmsConnectionSettings

# Connections one shared client keeps to the service, and requests in flight at once; more wait for a
# slot. A poll is a short read: ten at once serve a thousand triggers polling every minute many times over.
MAX_CONNECTIONS = 10

T = TypeVar("T")


@dataclass(frozen=True)
class Pool:
    """An HTTP client and the slots of its requests.

    :param client: the client.
    :param slots: taken around each request (``async with pool.slots``); ``None`` for a client that
        is not shared.
    """

    client: httpx.AsyncClient
    slots: asyncio.Semaphore | None = None


@dataclass
class _Shared:
    client: asyncio.Future[httpx.AsyncClient]
    slots: asyncio.Semaphore
    users: int = 0


@dataclass
class _Read:
    task: asyncio.Future[Any]
    waiters: int = 0


class _LoopClients:
    """The shared clients and reads of one event loop, and the task closing the clients when it ends."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.clients: dict[SmsConnectionSettings, _Shared] = {}
        self.reads: dict[Hashable, _Read] = {}
        self.closer = loop.create_task(self._close_at_end(loop), name="airflow_provider_sms: close clients")

    async def _close_at_end(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            await loop.create_future()  # never done: this task ends when it is cancelled
        finally:
            self._forget(loop)
            # The reads are cancelled with the loop's other tasks: let them end before their client.
            reads = [read.task for read in self.reads.values()]
            if reads:
                await asyncio.wait(reads)
            clients, self.clients = self.clients, {}
            for shared in clients.values():
                await _close(shared)

    def stop_if_idle(self) -> None:
        """Stop the closer once no client is shared and no read is running: nothing is left to close."""
        if not self.clients and not self.reads:
            # Forgotten now, not when the cancelled task next runs: a hook acquiring in between
            # must get a new entry, not one about to close what it holds.
            self._forget(asyncio.get_running_loop())
            self.closer.cancel()

    def _forget(self, loop: asyncio.AbstractEventLoop) -> None:
        if _by_loop.get(loop) is self:
            del _by_loop[loop]


# Keyed by the loop itself: each loop runs in one thread, and a loop's entry goes with its closer task.
_by_loop: dict[asyncio.AbstractEventLoop, _LoopClients] = {}


def _this_loop() -> _LoopClients:
    loop = asyncio.get_running_loop()
    entry = _by_loop.get(loop)
    if entry is None:
        entry = _by_loop[loop] = _LoopClients(loop)
    return entry


async def acquire(
    settings: SmsConnectionSettings, build: Callable[[SmsConnectionSettings], httpx.AsyncClient]
) -> Pool:
    """The running loop's pool for ``settings``, its client built with ``build`` if none; one more user.

    Give it back with :func:`release` once it is returned; an acquire that raises (the client could
    not be built, or the caller was cancelled while it was) counts no user.
    """
    entry = _this_loop()
    shared = entry.clients.get(settings)
    if shared is None:
        built = asyncio.ensure_future(asyncio.to_thread(build, settings))
        shared = entry.clients[settings] = _Shared(built, asyncio.Semaphore(MAX_CONNECTIONS))
    shared.users += 1
    try:
        client = await asyncio.shield(shared.client)
    except BaseException:
        await release(settings)
        raise
    return Pool(client, shared.slots)


async def release(settings: SmsConnectionSettings) -> None:
    """One user fewer for the running loop's pool for ``settings``; the last one closes its client."""
    entry = _by_loop.get(asyncio.get_running_loop())
    shared = entry.clients.get(settings) if entry is not None else None
    if entry is None or shared is None:
        return  # already closed at the loop's end
    shared.users -= 1
    if shared.users > 0:
        return
    del entry.clients[settings]
    entry.stop_if_idle()
    await _close(shared)


async def _close(shared: _Shared) -> None:
    try:
        client = await shared.client
    except BaseException:
        return  # never built: nothing to close (its error went to the users)
    await client.aclose()


async def shared_read(key: Hashable, read: Callable[[], Awaitable[T]]) -> T:
    """The result of ``read()``, or of the one already running on this loop under ``key``.

    The read runs in a task of its own, so that a caller cancelled while waiting (its trigger
    stopped) leaves it to the others; the last caller to stop waiting cancels it, and waits for its
    end. Its error, if any, is raised to every caller.

    :param key: what is read, e.g. the connection settings and the path.
    :param read: makes the read when none is running.
    """
    entry = _this_loop()
    shared = entry.reads.get(key)
    if shared is None:
        shared = entry.reads[key] = _Read(asyncio.ensure_future(read()))

        def forget(done: asyncio.Future[Any]) -> None:
            if entry.reads.get(key) is shared:
                del entry.reads[key]
            if not done.cancelled():
                done.exception()  # retrieved here too: no "never retrieved" warning when no one waits
            entry.stop_if_idle()

        shared.task.add_done_callback(forget)
    shared.waiters += 1
    try:
        result: T = await asyncio.shield(shared.task)
    finally:
        shared.waiters -= 1
        if not shared.waiters and not shared.task.done():
            shared.task.cancel()
            await asyncio.wait([shared.task])
    return result
