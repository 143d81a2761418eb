"""Waiting in the harness: its error, a condition polled until a deadline, a DAG's schedule kept clear."""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING

import pendulum
import requests

if TYPE_CHECKING:
    from collections.abc import Callable

# A scenario that unpauses a scheduled DAG starts no closer than this to the DAG's next slot (seconds)
# (clear_of_paris_slot), and waits this long past it: the DAG processor parses every file at least every
# 30 s and sets the DAG's next run then (the slot's, no longer the day before's).
SLOT_MARGIN = 300.0
SLOT_SETTLE = 60.0


class DeploymentError(RuntimeError):
    """The deployment could not be started (a package, a process or a port is missing)."""


def wait_for(what: str, check: Callable[[], bool], timeout: float, interval: float = 0.2) -> None:
    """Call ``check`` until it returns True; raise :class:`DeploymentError` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, requests.RequestException):
            if check():
                return
        time.sleep(interval)
    raise DeploymentError(f"timed out after {timeout:.0f} s waiting for {what}")


def clear_of_paris_slot(hour: int, weekday: int | None = None, margin: float = SLOT_MARGIN) -> None:
    """Return at once, or after the next ``hour``:00 Europe/Paris (on ``weekday`` only, if given, Monday
    0) when it is less than ``margin`` seconds away: then wait until it has passed by :data:`SLOT_SETTLE`.

    For a scenario that unpauses a DAG with that cron schedule: a slot passing during it would start a
    second scheduled run, whose campaign the scenario does not expect (or which the campaign register
    refuses as the same campaign as the scenario's own).
    """
    now = pendulum.now("Europe/Paris")
    slot = now.at(hour)
    if slot <= now:
        slot = slot.add(days=1)
    if weekday is not None and slot.day_of_week != weekday:
        return
    left = (slot - now).total_seconds()
    if left < margin:
        time.sleep(left + SLOT_SETTLE)
