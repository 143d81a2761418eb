"""Reading the records the send operators keep in Airflow Variables, strictly. Internal.

The send guard (:mod:`._send_guard`) is JSON that a person on call may edit by hand. A record that does
not have the expected shape is never guessed at: it raises ValueError naming where it is wrong, and the
send fails closed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Protocol, TypeVar

# The states of a batch of the guard: "sending" (the POST may have been made: maybe sent) and "sent" (its
# ticket is known).
RecordState = Literal["sending", "sent"]
RECORD_STATES: tuple[str, ...] = ("sending", "sent")


class StatefulRecord(Protocol):
    """A record with a ``state`` among a few known ones."""

    @property
    def state(self) -> str:
        """The record's state."""


RecordT = TypeVar("RecordT", bound=StatefulRecord)


def record_from(record_type: type[RecordT], raw: object, where: str, states: tuple[str, ...]) -> RecordT:
    """``raw`` (decoded JSON) as a ``record_type`` dataclass whose ``state`` is one of ``states``.

    :param where: what the record is, for the error (e.g. ``batch '0'``).
    :raises ValueError: not an object, missing or unknown fields, or another state.
    """
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where} is not an object")
    fields: dict[str, Any] = dict(raw)
    try:
        record = record_type(**fields)
    except TypeError as exc:
        raise ValueError(f"{where}: {exc}") from None
    if record.state not in states:
        raise ValueError(f"{where}: state {record.state!r} is not one of {', '.join(map(repr, states))}")
    return record
