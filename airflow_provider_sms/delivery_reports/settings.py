"""What an ``sms`` connection's extra says about delivery reports, read the same way on both sides.

The API server's receiver reads ``dlr_webhook_id``, ``dlr_allowed_callers`` and ``dlr_max_body``, and
its flusher ``dlr_event_max_reports`` and ``dlr_event_interval``;
the workers and the triggerer read ``dlr_api_url`` to reach the receiver's summary. Both derive the
summary's key from the access token, so no second secret has to be shared. Not public API.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from airflow_provider_sms.exceptions import SmsValidationError
from airflow_provider_sms.token_keys import READ_KEY, derived_key

if TYPE_CHECKING:
    from collections.abc import Mapping

# Where the plugin mounts its app on the API server, and its two endpoints under that prefix.
URL_PREFIX = "/sms"
RECEIVER_PATH = "/delivery-reports/{conn_id}"
SUMMARY_PATH = "/delivery-reports/{conn_id}/summary"
HEALTH_PATH = "/delivery-reports/_health"
BATCH_PATH = "/delivery-reports/{conn_id}/batches/{batch}"
# The header the service puts the webhook's signature in.
SIGNATURE_HEADER = "X-SMSFactor-Signature"
# The addresses the service documents for its webhook calls.
SERVICE_CALLERS = ("51.159.7.123", "51.159.21.54")
# Far above any one report's size, and still small enough to refuse a flood early.
DEFAULT_MAX_BODY = 16 * 1024
# An asset event names at most this many reports, and none waits longer than this for its event.
DEFAULT_EVENT_MAX_REPORTS = 1000
DEFAULT_EVENT_INTERVAL = 5.0
EVENT_MAX_REPORTS_RANGE = (1, 10_000)
EVENT_INTERVAL_RANGE = (0.1, 3600.0)

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class ReceiverSettings:
    """How the receiver treats one connection's reports.

    :param webhook_id: the DLR webhook's id at the service, whose signature the calls must carry.
    :param allowed_callers: the networks a call may come from; None lets any address in.
    :param max_body: the largest body read, in bytes.
    :param event_max_reports: the most reports one asset event names.
    :param event_interval: the longest a stored report waits for its asset event, in seconds.
    """

    webhook_id: str
    allowed_callers: tuple[Network, ...] | None
    max_body: int
    event_max_reports: int = DEFAULT_EVENT_MAX_REPORTS
    event_interval: float = DEFAULT_EVENT_INTERVAL

    def allows(self, address: str | None) -> bool:
        """Whether a call from ``address`` (the client address the API server saw) may go on."""
        if self.allowed_callers is None:
            return True
        try:
            caller = ipaddress.ip_address(address or "")
        except ValueError:
            return False
        # A dual-stack socket (e.g. `airflow api-server --host ::`) reports IPv4 callers as ::ffff:a.b.c.d:
        # such a caller is also the IPv4 address it is.
        callers = [caller]
        if isinstance(caller, ipaddress.IPv6Address) and caller.ipv4_mapped is not None:
            callers.append(caller.ipv4_mapped)
        return any(one in network for one in callers for network in self.allowed_callers)


def receiver_settings(extra: Mapping[str, Any], *, conn_id: str) -> ReceiverSettings | None:
    """Read the receiver's settings from a connection's extra; None when it receives no reports.

    :param extra: the connection's extra as a dict.
    :param conn_id: the connection id, named in errors.
    """
    webhook_id = extra.get("dlr_webhook_id")
    if webhook_id in (None, ""):
        return None
    where = f"connection {conn_id!r}: extra"
    if not isinstance(webhook_id, (str, int)) or isinstance(webhook_id, bool):
        raise SmsValidationError.for_field(
            "dlr_webhook_id", f"{where} dlr_webhook_id must be the webhook's id, got {webhook_id!r}"
        )
    return ReceiverSettings(
        webhook_id=str(webhook_id),
        allowed_callers=_allowed_callers(extra.get("dlr_allowed_callers"), where),
        max_body=_max_body(extra.get("dlr_max_body"), where),
        event_max_reports=int(
            _number(extra, "dlr_event_max_reports", DEFAULT_EVENT_MAX_REPORTS, EVENT_MAX_REPORTS_RANGE, where)
        ),
        event_interval=_number(
            extra, "dlr_event_interval", DEFAULT_EVENT_INTERVAL, EVENT_INTERVAL_RANGE, where
        ),
    )


def _number(
    extra: Mapping[str, Any], field: str, default: float, bounds: tuple[float, float], where: str
) -> float:
    """``extra[field]`` as a number within ``bounds`` (whole when they are); ``default`` when unset."""
    value = extra.get(field)
    if value in (None, ""):
        return default
    whole = all(isinstance(bound, int) for bound in bounds)
    try:
        number = float(str(value))
    except ValueError:
        number = float("nan")
    low, high = bounds
    if not low <= number <= high or (whole and not number.is_integer()):
        kind = "a whole number" if whole else "a number"
        raise SmsValidationError.for_field(
            field, f"{where} {field} must be {kind} from {low} to {high}; got {value!r}"
        )
    return number


def _allowed_callers(value: object, where: str) -> tuple[Network, ...] | None:
    if isinstance(value, str) and value.strip().lower() == "any":
        return None
    if value in (None, ""):
        value = []
    if isinstance(value, str):
        value = [part for part in value.replace(",", " ").split() if part]
    if not isinstance(value, list):
        raise SmsValidationError.for_field(
            "dlr_allowed_callers",
            f"{where} dlr_allowed_callers must be a list of addresses or networks, or 'any'; got {value!r}",
        )
    networks = []
    for entry in [*SERVICE_CALLERS, *value]:
        try:
            networks.append(ipaddress.ip_network(str(entry).strip(), strict=False))
        except ValueError:
            raise SmsValidationError.for_field(
                "dlr_allowed_callers",
                f"{where} dlr_allowed_callers: {entry!r} is not an IP address or network "
                "(e.g. '127.0.0.1' or '10.0.0.0/8')",
            ) from None
    return tuple(networks)


def _max_body(value: object, where: str) -> int:
    if value in (None, ""):
        return DEFAULT_MAX_BODY
    try:
        size = int(str(value))
    except ValueError:
        size = 0
    if size < 512:
        raise SmsValidationError.for_field(
            "dlr_max_body", f"{where} dlr_max_body must be a number of bytes, at least 512; got {value!r}"
        )
    return size


def read_key(token: str) -> str:
    """The key of the receiver's summary endpoint, derived from the connection's access token."""
    return derived_key(token, READ_KEY)


def receiver_url(
    extra: Mapping[str, Any], *, conn_id: str, default_api_url: str, path: str, **fields: Any
) -> str:
    """Where one of the receiver's endpoints for ``conn_id`` is (``path`` filled with ``fields``).

    :param extra: the connection's extra; its ``dlr_api_url`` (the API server's base URL as the
        workers reach it) wins over ``default_api_url``.
    :param default_api_url: Airflow's ``[api] base_url``.
    """
    base = str(extra.get("dlr_api_url") or default_api_url or "").strip().rstrip("/")
    if "://" not in base:
        raise SmsValidationError.for_field(
            "dlr_api_url",
            f"connection {conn_id!r}: the API server's URL is unknown or has no scheme ({base!r}); set "
            "the connection's extra dlr_api_url (e.g. 'http://airflow-api:8080') or [api] base_url",
        )
    return base + URL_PREFIX + path.format(conn_id=quote(conn_id, safe=""), **fields)


def asset_name(conn_id: str) -> str:
    """The name (and URI) of the asset that receives an event per delivery report of ``conn_id``."""
    return f"sms_delivery_reports/{conn_id}"
