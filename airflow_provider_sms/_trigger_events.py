"""What the SMS triggers send the sensors: one event per wait, of one of these shapes. Not public API.

A trigger yields exactly one event, a plain dict (it travels through the Airflow database), read by
its sensor's ``execute_complete``. Success events carry what the sensor returns (or, for the
delivery reports, what it needs to read the rest); :class:`WaitFailed` says why the wait ended
without success, :class:`WaitTimedOut` that the sensor's timeout passed first. The sensors import
this module when a task runs (its types for type checking only), so DAG files do not load it.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

from airflow.providers.common.compat.sdk import AirflowNotFoundException

from airflow_provider_sms.exceptions import SmsApiError, SmsAuthError, SmsNotFoundError, SmsValidationError

ErrorKind = Literal["not_found", "auth", "validation", "connection", "api"]

# Kinds of error event that waiting cannot cure: the sensor fails at once, without retries.
FATAL_ERRORS: frozenset[str] = frozenset({"not_found", "auth", "validation", "connection"})


class NpaiMatches(TypedDict):
    """What the NPAI sensor returns (XCom): the matching entries, their count and their numbers."""

    count: int
    destinations: list[str]
    entries: list[dict[str, Any]]


class Polled(TypedDict, total=False):
    """What every event of a trigger carries: how many polls it made (the sensor counts them when it
    resumes; an event of an earlier version of the provider has no count)."""

    polls: int


class WebhookReady(Polled):
    """The webhook shows the expected status: its record (GET /webhook/:id, as JSON values)."""

    status: Literal["success"]
    webhook: dict[str, Any]


class NpaiFound(Polled):
    """Enough NPAI entries match the filters."""

    status: Literal["success"]
    npai: NpaiMatches


class DeliveryReportsCounted(Polled):
    """The share of final statuses is reached (``complete``) or the deadline has passed.

    The failed numbers are not carried (they may be many): the sensor reads them when it resumes.
    """

    status: Literal["success"]
    summary: dict[str, Any]
    complete: bool


class WaitFailed(Polled):
    """The wait ended without success: the kind of failure, the service's status and the message."""

    status: Literal["error"]
    error: ErrorKind
    api_status: int | None
    message: str


class WaitTimedOut(Polled):
    """The sensor's timeout passed before the wait was over: the sensor fails, or skips with ``soft_fail``.

    ``timeout_at`` is the instant (ISO 8601 with offset) the timeout fell at; ``message`` says what was
    still awaited.
    """

    status: Literal["timeout"]
    timeout_at: str
    message: str


def error_kind(exc: Exception) -> ErrorKind:
    """Name a failure for an error event: not_found, auth, validation, connection or api."""
    if isinstance(exc, AirflowNotFoundException):
        return "connection"
    if isinstance(exc, SmsNotFoundError):
        return "not_found"
    if isinstance(exc, SmsAuthError):
        return "auth"
    if isinstance(exc, SmsValidationError):
        return "validation"
    return "api"


def wait_failed(exc: Exception) -> WaitFailed:
    """The error event for ``exc``: its kind (for the sensor to decide) and a message naming what to fix."""
    status = exc.status if isinstance(exc, SmsApiError) else None
    return {"status": "error", "error": error_kind(exc), "api_status": status, "message": str(exc)}
