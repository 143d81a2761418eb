"""The connections the receiver serves, as it knows them: read from Airflow's secrets backends at most
every :data:`CONNECTION_TTL` seconds, with the DLR webhook's signature kept :data:`SIGNATURE_TTL`.

A name that receives no reports (no such connection, not an ``sms`` one, bad settings, no
``dlr_webhook_id``, longer than a connection id can be) is answered with one 404 text,
:data:`NOT_RECEIVING`, whatever the reason: an unauthenticated caller learns nothing about which
connections exist. The API server's log says which reason when a call for the name arrives, once per
name per :data:`CONNECTION_TTL`; the flusher's lookups on its timer (:meth:`Connections.settings`)
log nothing, so a send-only connection no call ever names stays quiet.
(The readers' endpoints, summary and batches, answer every call without the right key one 401 instead,
whatever the name: see the receiver's ``check_reader``.) Not public API.
"""

from __future__ import annotations

import hmac
import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from airflow.models.base import ID_LEN

from airflow_provider_sms.api_server.refusal import Refusal, try_later
from airflow_provider_sms.delivery_reports.settings import ReceiverSettings, receiver_settings
from airflow_provider_sms.exceptions import SmsValidationError
from airflow_provider_sms.hooks.sms import SmsHook, connection_extra, connection_settings

if TYPE_CHECKING:
    from collections.abc import Callable

log = logging.getLogger(__name__)

# How long a connection and a webhook's signature are trusted before they are read again.
CONNECTION_TTL = 30.0
SIGNATURE_TTL = 300.0
# A wrong signature makes the receiver read the webhook again (the signature may have been renewed),
# at most this often per connection, so that a flood of forged calls does not flood the service.
SIGNATURE_RECHECK_INTERVAL = 30.0
# The names found not to receive reports that are kept (each CONNECTION_TTL): made-up names cost a
# secrets-backend lookup once per TTL each, and no more memory than this many.
REFUSED_NAMES_KEPT = 4096
# The answer for every name that receives no reports, whatever the reason.
NOT_RECEIVING = "no delivery reports are received under this name (the API server's log says why)"


def lookup_connection(conn_id: str) -> Any:
    """The connection ``conn_id`` as the API server reads it: from Airflow's secrets backends, under its
    team when it has one.

    In multi-team mode (Airflow 3.2 and later) Airflow finds a team's connection only when asked with
    that team, and a connection id names one connection whatever its team: the team is read from the
    metadata database first.

    :raises AirflowNotFoundException: there is no such connection.
    :raises Refusal: 503 when the database cannot be read.
    """
    # SmsHook's own lookup is the Task SDK's: through a task's supervisor, which the API server has none of.
    from airflow.models.connection import Connection

    team = _team_of(conn_id)
    if team is None:
        return Connection.get_connection_from_secrets(conn_id)
    return Connection.get_connection_from_secrets(conn_id, team_name=team)


def _team_of(conn_id: str) -> str | None:
    """The team of the connection ``conn_id`` in the metadata database; None outside multi-team mode,
    for a global connection, or one the database does not hold (an ``AIRFLOW_CONN_*`` variable).

    :raises Refusal: 503 when the database cannot be read.
    """
    from airflow.configuration import conf
    from airflow.models.connection import Connection
    from sqlalchemy.exc import SQLAlchemyError

    if not hasattr(Connection, "get_team_name") or not conf.getboolean("core", "multi_team", fallback=False):
        return None
    try:
        team: str | None = Connection.get_team_name(conn_id)
    except SQLAlchemyError as exc:
        log.error("Delivery reports: connections cannot be read (the metadata database): %s", exc)
        raise connections_unreadable() from None
    return team


def _stored_in_database(conn_id: str) -> bool:
    """Whether Airflow's metadata database holds a connection ``conn_id``.

    :raises Refusal: 503 when the database cannot be read (Airflow's lookup then says "not found": it
        logs a backend's error and tries the next one).
    """
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session
    from sqlalchemy import select
    from sqlalchemy.exc import SQLAlchemyError

    try:
        with create_session(scoped=False) as session:
            return session.scalar(select(Connection.id).where(Connection.conn_id == conn_id)) is not None
    except SQLAlchemyError as exc:
        log.error("Delivery reports: connections cannot be read (the metadata database): %s", exc)
        raise connections_unreadable() from None


def connections_unreadable() -> Refusal:
    """The 503 for a call whose connection cannot be read now: the same for every name (it tells nothing
    about which connections exist), and not kept: the next call looks again."""
    return try_later(
        "the receiver cannot read its connections now (the metadata database is unreachable); try again later"
    )


@dataclass
class ReceivingConnection:
    """One connection as the receiver knows it, for :data:`CONNECTION_TTL` seconds.

    :param hook: the hook on the connection, which reads the webhook.
    :param settings: its receiver settings; None when its extra has no ``dlr_webhook_id`` or they are not
        valid.
    :param refused_because: why calls for it are refused, when ``settings`` is None (for the log).
    :param signature: the webhook's signature, once read.
    :param signature_read_at: when it was read (the :class:`Connections`' clock).
    """

    hook: SmsHook
    settings: ReceiverSettings | None
    refused_because: str | None = None
    signature: str | None = None
    signature_read_at: float = 0.0

    def same_webhook(self, other: ReceivingConnection) -> bool:
        """Whether ``other`` (the same connection, read again) names the same webhook at the same service
        with the same token, so that the signature read for one is the other's."""
        if self.settings is None or other.settings is None:
            return False
        mine, theirs = self.hook.settings, other.hook.settings
        return (
            self.settings.webhook_id == other.settings.webhook_id
            and mine.base_url == theirs.base_url
            and hmac.compare_digest(mine.token.encode(), theirs.token.encode())
        )


@dataclass(frozen=True)
class NotReceiving:
    """A name that names no ``sms`` connection (or none a connection id can be), and why, for the log.

    :param why: the reason, in words (the caller is never told).
    """

    why: str


# What one lookup of a name found.
Lookup: TypeAlias = ReceivingConnection | NotReceiving


def not_receiving() -> Refusal:
    """The one 404 for a name that receives no reports; a new one each time (one kept and raised again
    would grow its traceback each time)."""
    return Refusal(404, NOT_RECEIVING)


class Connections:
    """The connections calls name, read at most every :data:`CONNECTION_TTL` seconds each.

    Lookups of different names run side by side; concurrent calls for one name share one lookup. Why a
    name receives no reports is logged by the first call that meets each lookup's answer, not by the
    lookup: the flusher's timer looks names up too, and must not fill the log.

    :param clock: the time in seconds (monotonic), injectable for tests.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        # Connections that exist (with their expiry): as many as the administrators made.
        self._known: dict[str, tuple[ReceivingConnection, float]] = {}
        # Names that receive no reports, with their expiry, oldest lookup first: the first to expire is
        # also the first dropped when more than REFUSED_NAMES_KEPT are kept.
        self._refused: OrderedDict[str, tuple[NotReceiving, float]] = OrderedDict()
        # The names whose kept answer a call has logged why it refuses (a new lookup's answer is not).
        self._logged: set[str] = set()
        # The lookups under way, by name; their waiters look again once the event is set.
        self._lookups: dict[str, threading.Event] = {}
        # Guards the four collections above only; never held during a lookup.
        self._guard = threading.Lock()

    def fresh(self, conn_id: str) -> ReceivingConnection | None:
        """For a call: the connection as last read, if that was less than :data:`CONNECTION_TTL` ago
        (no I/O).

        :raises Refusal: 404 for a name found, less than :data:`CONNECTION_TTL` ago, to receive no reports.
        """
        key = self._key(conn_id)
        with self._guard:
            found = self._kept(key, self._clock())
        return None if found is None else self._for_call(key, found)

    def get(self, conn_id: str) -> ReceivingConnection:
        """For a call: the connection ``conn_id``; raises :class:`Refusal` (404) for one that receives no
        reports."""
        key = self._key(conn_id)
        return self._for_call(key, self._find(key))

    def settings(self, conn_id: str) -> ReceiverSettings | None:
        """For the flusher's timer: the receiver settings of ``conn_id``, None when it receives no reports.

        Logs nothing: why a name receives no reports is for the calls that name it to say.

        :raises Refusal: 503 while the connections cannot be read.
        """
        found = self._find(self._key(conn_id))
        return found.settings if isinstance(found, ReceivingConnection) else None

    def holding_token(self, conn_id: str) -> ReceivingConnection | None:
        """For a caller that needs the connection's token only (a key derived from it): the ``sms``
        connection ``conn_id``, None when there is none. Blocking; logs nothing (a connection that
        receives no reports serves this caller all the same).

        :raises Refusal: 503 while the connections cannot be read.
        """
        found = self._find(self._key(conn_id))
        return found if isinstance(found, ReceivingConnection) else None

    def _find(self, key: str) -> Lookup:
        """What the last lookup of ``key`` found, looked up again when older than :data:`CONNECTION_TTL`."""
        while True:
            with self._guard:
                found = self._kept(key, self._clock())
                if found is not None:
                    return found
                lookup = self._lookups.get(key)
                if lookup is None:
                    lookup = self._lookups[key] = threading.Event()
                    break
            # Another call is looking this name up: its answer is kept when it is done (or, should its
            # lookup fail, this call tries).
            lookup.wait()
        try:
            read = self._read(key)
            with self._guard:
                self._keep(key, read)
        finally:
            with self._guard:
                del self._lookups[key]
            lookup.set()
        return read

    def _for_call(self, key: str, found: Lookup) -> ReceivingConnection:
        """What a call for ``key`` gets: the connection, or the 404 of a name that receives no reports.

        Why it receives none is logged once per lookup, by the first call that meets it.
        """
        why = found.why if isinstance(found, NotReceiving) else found.refused_because
        if why is not None:
            with self._guard:
                first = key not in self._logged
                self._logged.add(key)
            if first:
                name = repr(key) if len(key) <= ID_LEN else f"{key[:40]!r}..."
                log.warning("Delivery reports: calls for %s are refused: %s", name, why)
        if isinstance(found, NotReceiving):
            raise not_receiving()
        return found

    @staticmethod
    def _key(conn_id: str) -> str:
        # A name longer than a connection id can be is cut (still too long, so refused unread): a caller
        # cannot make the names kept take more memory than that.
        return conn_id[: ID_LEN + 1]

    def _kept(self, key: str, now: float) -> Lookup | None:
        """What the lookup kept under ``key`` found, if not expired (under the guard)."""
        known = self._known.get(key)
        if known is not None and known[1] > now:
            return known[0]
        refused = self._refused.get(key)
        if refused is not None and refused[1] > now:
            return refused[0]
        return None

    def _keep(self, key: str, read: Lookup) -> None:
        """Keep what a lookup found for :data:`CONNECTION_TTL`, not logged yet (under the guard)."""
        expiry = self._clock() + CONNECTION_TTL
        before = self._known.pop(key, None)
        self._refused.pop(key, None)
        self._logged.discard(key)
        if isinstance(read, NotReceiving):
            self._refused[key] = (read, expiry)
            while len(self._refused) > REFUSED_NAMES_KEPT:
                self._logged.discard(self._refused.popitem(last=False)[0])
            return
        if before is not None and before[0].same_webhook(read):
            # The signature lives SIGNATURE_TTL from its reading, not until the connection is read again.
            read.signature, read.signature_read_at = before[0].signature, before[0].signature_read_at
        self._known[key] = (read, expiry)

    def _read(self, conn_id: str) -> Lookup:
        """The connection from Airflow's secrets backends, or why it receives no reports (not logged
        here: see :meth:`_for_call`). An ``sms`` connection with a token but without ``dlr_webhook_id``,
        or with receiver settings that are not valid, is returned without settings:
        :func:`require_settings` refuses it.
        """
        from airflow.providers.common.compat.sdk import AirflowNotFoundException

        if len(conn_id) > ID_LEN:
            return NotReceiving(f"the name is longer than a connection id can be ({ID_LEN} characters)")
        try:
            conn = lookup_connection(conn_id)
        except AirflowNotFoundException:
            # Not found, or a backend that could not be read: only the database's own word is a 404 (a
            # report refused for an outage would not be posted again).
            if _stored_in_database(conn_id):
                log.error(
                    "Delivery reports: connection %r is in the metadata database but could not be read "
                    "(see the error above); calls are answered 503 until it can",
                    conn_id,
                )
                raise connections_unreadable() from None
            return NotReceiving("there is no such connection")
        if conn.conn_type != "sms":
            return NotReceiving(f"it is a {conn.conn_type!r} connection, not an sms one")
        # One try: the service retries a report answered 503, so the API server need not wait here.
        hook = SmsHook(sms_conn_id=conn_id, max_tries=1)
        try:
            # Checked now (a connection without a token is refused), from the connection just read: the
            # hook does not look it up again.
            hook.settings = connection_settings(conn, conn_id=conn_id)
        except SmsValidationError as exc:
            return NotReceiving(str(exc))
        # Settings that are not valid are none: the connection is kept with its token all the same, so that
        # a reader with its key is told it receives nothing, as for one without dlr_webhook_id.
        try:
            settings = receiver_settings(connection_extra(conn, conn_id=conn_id), conn_id=conn_id)
        except SmsValidationError as exc:
            return ReceivingConnection(hook=hook, settings=None, refused_because=str(exc))
        why = None if settings is not None else "its extra has no dlr_webhook_id"
        return ReceivingConnection(hook=hook, settings=settings, refused_because=why)

    def known_signature(self, receiving: ReceivingConnection) -> str | None:
        """The signature as last read, if that was less than :data:`SIGNATURE_TTL` ago (no I/O)."""
        if receiving.signature is None or self._clock() - receiving.signature_read_at >= SIGNATURE_TTL:
            return None
        return receiving.signature

    def signature(self, receiving: ReceivingConnection, *, recheck: bool = False) -> str:
        """The DLR webhook's signature, read from the service with GET /webhook/:id and kept a while.

        :param recheck: read it again (a call did not match), unless it was read moments ago.
        """
        settings = require_settings(receiving, receiving.hook.sms_conn_id)
        now = self._clock()
        age = now - receiving.signature_read_at
        kept = receiving.signature
        if kept is not None and age < SIGNATURE_TTL and not (recheck and age >= SIGNATURE_RECHECK_INTERVAL):
            return kept
        webhook = receiving.hook.get_webhook(settings.webhook_id)
        if webhook.type.upper() != "DLR" or not webhook.signature:
            raise Refusal(
                404,
                f"the service's webhook {settings.webhook_id} is not a DLR webhook with a signature",
            )
        receiving.signature, receiving.signature_read_at = webhook.signature, now
        return webhook.signature


def require_settings(receiving: ReceivingConnection, conn_id: str) -> ReceiverSettings:
    """The connection's receiver settings; raises :class:`Refusal`, the one 404 of names that receive no
    reports, when its extra names no webhook (the call's :meth:`Connections.get` or ``fresh`` logged why).

    :param receiving: the connection as the receiver knows it.
    :param conn_id: its id (the refusal does not name it: the 404 is the same for every name).
    """
    if receiving.settings is None:
        raise not_receiving()
    return receiving.settings


def key_matches(receiving: ReceivingConnection | None, given: str, derive: Callable[[str], str]) -> bool:
    """Whether ``given`` is the key ``derive`` makes of ``receiving``'s token (compared in constant time).

    A name with no connection (``receiving`` None) is compared too, with the empty token's key, which
    opens nothing: neither the answer nor its cost tells which connections exist.
    """
    token = receiving.hook.settings.token if receiving is not None else ""
    matches = hmac.compare_digest(given.encode(), derive(token).encode())
    return receiving is not None and matches


def signature_matches(connections: Connections, receiving: ReceivingConnection, given: str) -> bool:
    """Whether ``given`` is the webhook's signature (compared in constant time); may read the service.

    A mismatch reads the webhook again (the signature may have been renewed) before it is believed.

    :param connections: where the signature is read and kept.
    :param receiving: the connection the call names.
    :param given: the signature the call carries.
    """
    if hmac.compare_digest(given.encode(), connections.signature(receiving).encode()):
        return True
    return hmac.compare_digest(given.encode(), connections.signature(receiving, recheck=True).encode())
