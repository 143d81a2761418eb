"""What every test DAG file shares: its DAG's arguments, and the alert message its sends carry.

The test DAG files (tests/dags/*_dags, tests/deployment/dags) import it where Airflow parses them: the
repository's root is on their ``sys.path`` (``PYTHONPATH`` of the Airflow subprocesses the tests start).
"""

from __future__ import annotations

from typing import Any

import pendulum


def dag_arguments(*tags: str, tz: str = "UTC", **overrides: Any) -> dict[str, Any]:
    """A test DAG's arguments: run only when a test asks, from 2026-01-01, tagged ``test`` after ``tags``.

    :param tz: the time zone of the start date (and so of a schedule's times).
    :param overrides: arguments to add or replace (``schedule``, ``params``, ``doc_md``...).
    """
    return {
        "schedule": None,
        "start_date": pendulum.datetime(2026, 1, 1, tz=tz),
        "catchup": False,
        "tags": [*tags, "test"],
        **overrides,
    }


def alert(text: str) -> dict[str, str]:
    """The message of a send: ``text``, pushtype ``alert``."""
    return {"text": text, "pushtype": "alert"}
