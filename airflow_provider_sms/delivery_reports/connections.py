"""The connections the receiver serves, as it knows them: read from Airflow's secrets backends at most
every :data:`CONNECTION_TTL` seconds, with the DLR webhook's signature kept :data:`SIGNATURE_TTL`.
Not public API.
"""

from __future__ import annotations

import hmac
import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_sms.delivery_reports.settings import ReceiverSettings, receiver_settings
from airflow_provider_sms.exceptions import SmsValidationError
from airflow_provider_sms.hooks._transport import connection_extra
from airflow_provider_sms.hooks.sms import SmsHook

if TYPE_CHECKING:
    from collections.abc import Callable

log = logging.getLogger(__name__)

# How long a connection and a webhook's signature are trusted before they are read again.
CONNECTION_TTL = 30.0
SIGNATURE_TTL = 300.0
# A wrong signature makes the receiver read the webhook again (the signature may have been renewed),
# at most this often per connection, so that a flood of forged calls does not flood the service.
SIGNATURE_RECHECK_INTERVAL = 30.0


class Refusal(Exception):
    """A call the receiver answers with ``status`` and ``detail``, having stored nothing."""

    def __init__(self, status: int, detail: str, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.headers = headers

    def again(self) -> Refusal:
        """A new refusal like this one: a kept one raised again would grow its traceback each time."""
        return Refusal(self.status, self.detail, headers=self.headers)


class _ServerSideSmsHook(SmsHook):
    """SmsHook reading its connection as the API server does: from Airflow's secrets backends."""

    @classmethod
    def get_connection(cls, conn_id: str) -> Any:
        # The Task SDK's lookup goes through a task's supervisor, which the API server has none of.
        from airflow.models.connection import Connection

        return Connection.get_connection_from_secrets(conn_id)


@dataclass
class ReceivingConnection:
    """One connection as the receiver knows it, for :data:`CONNECTION_TTL` seconds."""

    hook: SmsHook
    settings: ReceiverSettings | None
    signature: str | None = None
    signature_read_at: float = 0.0


class Connections:
    """The connections calls name, read at most every :data:`CONNECTION_TTL` seconds each."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._known: dict[str, ReceivingConnection | Refusal] = {}
        self._expiry: dict[str, float] = {}
        self._lock = threading.Lock()

    def fresh(self, conn_id: str) -> ReceivingConnection | None:
        """The connection as last read, if that was less than :data:`CONNECTION_TTL` ago (no I/O)."""
        known = self._known.get(conn_id)
        if known is None or self._expiry.get(conn_id, 0.0) <= self._clock():
            return None
        if isinstance(known, Refusal):
            raise known.again()
        return known

    def get(self, conn_id: str) -> ReceivingConnection:
        """The connection ``conn_id``; raises :class:`Refusal` (404) for one that receives no reports."""
        now = self._clock()
        with self._lock:
            known = self._known.get(conn_id)
            if known is None or self._expiry[conn_id] <= now:
                known = self._read(conn_id)
                if len(self._known) > 256:  # names a caller made up must not grow this without end
                    self._known.clear()
                    self._expiry.clear()
                self._known[conn_id] = known
                self._expiry[conn_id] = now + CONNECTION_TTL
        if isinstance(known, Refusal):
            raise known.again()
        return known

    def _read(self, conn_id: str) -> ReceivingConnection | Refusal:
        from airflow.providers.common.compat.sdk import AirflowNotFoundException

        # One try: the service retries a report answered 503, so the API server need not wait here.
        hook = _ServerSideSmsHook(sms_conn_id=conn_id, max_tries=1)
        try:
            conn = hook.get_connection(conn_id)
        except AirflowNotFoundException:
            return Refusal(404, f"no connection {conn_id!r}")
        if conn.conn_type != "sms":
            return Refusal(404, f"connection {conn_id!r} is not an sms connection")
        try:
            settings = receiver_settings(connection_extra(conn, conn_id=conn_id), conn_id=conn_id)
            hook.settings  # noqa: B018  (read and checked now: a connection without a token is refused)
        except SmsValidationError as exc:
            log.error("Delivery reports for %s are refused: %s", conn_id, exc)
            return Refusal(404, f"connection {conn_id!r} does not receive delivery reports (see the logs)")
        return ReceivingConnection(hook=hook, settings=settings)

    def known_signature(self, receiving: ReceivingConnection) -> str | None:
        """The signature as last read, if that was less than :data:`SIGNATURE_TTL` ago (no I/O)."""
        if receiving.signature is None or self._clock() - receiving.signature_read_at >= SIGNATURE_TTL:
            return None
        return receiving.signature

    def signature(self, receiving: ReceivingConnection, *, recheck: bool = False) -> str:
        """The DLR webhook's signature, read from the service with GET /webhook/:id and kept a while.

        :param recheck: read it again (a call did not match), unless it was read moments ago.
        """
        if receiving.settings is None:
            raise RuntimeError(f"connection {receiving.hook.sms_conn_id!r} has no receiver settings")
        now = self._clock()
        age = now - receiving.signature_read_at
        kept = receiving.signature
        if kept is not None and age < SIGNATURE_TTL and not (recheck and age >= SIGNATURE_RECHECK_INTERVAL):
            return kept
        webhook = receiving.hook.get_webhook(receiving.settings.webhook_id)
        if webhook.type.upper() != "DLR" or not webhook.signature:
            raise Refusal(
                404,
                f"the service's webhook {receiving.settings.webhook_id} is not a DLR webhook with a "
                "signature",
            )
        receiving.signature, receiving.signature_read_at = webhook.signature, now
        return webhook.signature


def require_settings(receiving: ReceivingConnection, conn_id: str) -> ReceiverSettings:
    """The connection's receiver settings; raises :class:`Refusal` (404) when its extra names no webhook.

    :param receiving: the connection as the receiver knows it.
    :param conn_id: its id, for the refusal's text.
    """
    if receiving.settings is None:
        raise Refusal(
            404,
            f"connection {conn_id!r} does not receive delivery reports (its extra has no dlr_webhook_id)",
        )
    return receiving.settings


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
