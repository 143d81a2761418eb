"""Errors raised by the SMS provider.

Every error says what to fix: the field, the value and the rule, or what happened on the wire and
whether it is safe to try again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping


class SmsError(Exception):
    """Base class of every error raised by this provider."""


class SmsValidationError(SmsError, ValueError):
    """Bad input, raised before any request is made.

    :param errors: one ``(field, message)`` pair per problem found.
    """

    def __init__(self, message: str, errors: list[tuple[str, str]] | None = None) -> None:
        super().__init__(message)
        self.errors = errors or []

    @classmethod
    def for_field(cls, field: str, message: str) -> SmsValidationError:
        """The error for one field: ``message`` says the value and the rule, ``field`` names what to fix."""
        return cls(message, [(field, message)])

    @classmethod
    def for_value(cls, field: str, value: object, rule: str) -> SmsValidationError:
        """The error for a field's bad value: ``field=value: rule`` (the value as ``repr``)."""
        return cls.for_field(field, f"{field}={value!r}: {rule}")


class SmsApiError(SmsError):
    """The service answered, with a ``status`` other than 1 (or with a body that is not an answer).

    :param status: the body's ``status`` (``None`` when the body had none).
    :param message: the body's ``message`` (or a description of the unreadable body).
    :param body: the raw body, as received (bounded), for diagnosis.
    :param http_status: the HTTP status code of the response.
    :param details: the body's ``details``, when the service gave any.
    :param source: who answered, as the message names it: the service, or the Airflow API server (the
        provider's delivery-report receiver).
    """

    def __init__(
        self,
        status: int | None,
        message: str,
        *,
        body: bytes | str | None = None,
        http_status: int | None = None,
        details: Any = None,
        endpoint: str | None = None,
        source: str = "the service",
    ) -> None:
        self.status = status
        self.source = source
        # What the service said is taken as it came, less the access token: a proxy or a debugging
        # server may echo the request, Authorization header included, into its answer.
        self.message = _redact(message)
        self.body = _redact(body)
        self.http_status = http_status
        self.details = _redact(details)
        self.endpoint = endpoint
        # The Airflow connection whose call the service answered, once the hook names it.
        self.connection: str | None = None
        super().__init__(self._describe())

    def name_connection(self, conn_id: str) -> None:
        """Name the Airflow connection whose call this error answers (the hook calls it).

        :param conn_id: the connection id.
        """
        self.connection = conn_id
        self.args = (self._describe(),)

    def _meaning(self) -> str | None:
        """What the status means, from the service's documentation (:data:`STATUS_MEANINGS`)."""
        return STATUS_MEANINGS.get(self.status) if self.status is not None else None

    def _describe(self) -> str:
        where = f"{self.endpoint}: " if self.endpoint else ""
        codes = [f"status {self.status}" if self.status is not None else "no status"]
        if self.status is None and self.source != "the service":
            codes = []  # the API server's answers carry no service status
        if self.http_status is not None:
            codes.append(f"HTTP {self.http_status}")
        meaning = self._meaning()
        hint = f" ({meaning})" if meaning and meaning.lower() != self.message.lower() else ""
        details = f"; details: {self.details}" if self.details else ""
        return f"{where}{self.source} answered {', '.join(codes)}: {self.message}{hint}{details}"


def _redact(value: Any) -> Any:
    """``value`` with the secrets known to Airflow's secrets masker (the access token) replaced by ``***``.

    The hook and the triggers register the token with the masker when they read the connection.
    """
    if value is None:
        return None
    try:
        from airflow.providers.common.compat.sdk import redact
    except ImportError:  # pragma: no cover - compat always ships it
        return value
    if isinstance(value, bytes):
        text = value.decode(errors="replace")
        clean = str(redact(text))
        return value if clean == text else clean.encode()
    return redact(value)


class SmsMaybeSentError(SmsError):
    """A send whose outcome is unknown: the campaign may have been created.

    Never retry this automatically: check the service (or the sandbox's inspection API) first.
    """


class SmsTransportError(SmsError):
    """Nothing reached the service (or a read-only call failed); safe to retry.

    :param retry_after: seconds the service asked to wait (its ``Retry-After``), when it said.
    """

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class SmsNothingSentError(SmsError):
    """A send the service took (status 1) that reached no number: its filters removed every one.

    The outcome is known, not in doubt: the campaign exists (its ticket), nothing went out, and sending
    it again would meet the same filters. The message names each filter's count, what it means and
    what to do (:data:`FILTER_MEANINGS`).

    :param figures: the send's figures: ``sent``, ``total``, the count of each filter and ``ticket``
        (or ``tickets``), as in a ``CampaignResult`` or the send operators' result.
    :param what: what reached nobody, as the message's subject, e.g. ``"The SMS notification"``.
    :param advice: what else the user can do, after each filter's own fix.
    """

    def __init__(self, figures: Mapping[str, Any], what: str, advice: str = "") -> None:
        self.figures = dict(figures)
        reasons = [name for name in FILTER_MEANINGS if figures.get(name)]
        why = "; ".join(f"{name}: {FILTER_MEANINGS[name]}" for name in reasons) or (
            "the service filtered none of them: check the recipients or lists given"
        )
        super().__init__(
            f"{what} reached nobody: {nothing_sent(figures)}. {why}." + (f" {advice}" if advice else "")
        )


def nothing_sent(figures: Mapping[str, Any]) -> str:
    """A send that reached nobody in figures, e.g. ``0 of 2 numbers sent, 2 filtered (flood 2), ticket 7``.

    :param figures: as :class:`SmsNothingSentError` takes them.
    """
    reasons = [name for name in FILTER_MEANINGS if figures.get(name)]
    counts = ", ".join(f"{name} {figures[name]}" for name in reasons)
    filtered = f"{sum(figures[name] for name in reasons)} filtered" + (f" ({counts})" if counts else "")
    return f"0 of {figures.get('total', 0)} numbers sent, {filtered}{_tickets(figures)}"


def _tickets(figures: Mapping[str, Any]) -> str:
    """``", ticket 101"`` (``", tickets 101, 102"``) from a result's ``tickets`` or ``ticket``, or ``""``."""
    tickets = figures.get("tickets") or ([figures["ticket"]] if figures.get("ticket") else [])
    if not tickets:
        return ""
    return f", ticket{'s' if len(tickets) > 1 else ''} {', '.join(map(str, tickets))}"


class SmsAuthError(SmsApiError):
    """The service rejected the access token (status -1)."""

    def _meaning(self) -> str | None:
        if self.connection is None:
            return super()._meaning()
        return (
            "authentication error: check the access token, the password of the Airflow connection "
            f"{self.connection!r}"
        )


class SmsNotFoundError(SmsApiError):
    """The service does not know the resource (status -5: unknown list or webhook)."""


class ResponseTooLargeError(SmsApiError):
    """An answer larger than the most its endpoint may send, refused without reading the rest."""


# Meanings of the body's status, from the real service's documentation (docs/service-facts.md).
STATUS_MEANINGS: dict[int, str] = {
    1: "OK",
    -1: "authentication error: check the connection's access token",
    -2: "XML error: the request body was not valid XML",
    -3: "not enough credits",
    -4: "incorrect delay date",
    -5: "resource not found",
    -6: "JSON error: the request body was not valid JSON",
    -7: "data error: a field has an invalid value",
    -8: "campaign held for moderation: it may still be sent; never retry automatically",
    -99: "unknown error",
}

# What each filter of the service means and what a user can do about it (docs/service-facts.md,
# "Filtering"), in the order of the result's fields; named when a send reached nobody.
FILTER_MEANINGS: dict[str, str] = {
    "blacklisted": "numbers on the account's blacklist (e.g. they answered STOP): take them off it in the "
    "service, or send to other numbers",
    "duplicated": "numbers given more than once (each is sent once)",
    "npai": "numbers on the NPAI list, known to be unreachable: check them with their owners",
    "invalid": "numbers the service does not take as valid: check their country code and length",
    "not_allowed": "numbers in countries the account may not send to: ask the service to allow the country",
    "flood": "messages held back by the service's anti-flood, to numbers sent too many messages recently "
    "(the service does not publish its limit; the sandbox allows 5 per number per hour unless started "
    "with --flood-limit): send fewer messages to the same number, or wait",
    "country_limit": "messages over the monthly limit of their country: ask the service to raise it, or "
    "wait for the next month",
}
