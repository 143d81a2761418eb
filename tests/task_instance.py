"""A stand-in for the task instance an operator gets in its context, for tests that call execute()."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class FakeTaskInstance:
    """What the operators use of a task instance: its identity (the send guard's key) and xcom_push."""

    dag_id: str = "campaigns"
    task_id: str = "send"
    run_id: str = "manual__2030"
    map_index: int = -1
    # The task instance's id (Airflow's human-in-the-loop request is keyed by it).
    id: str = "01960000-0000-7000-8000-000000000001"
    xcoms: dict[str, Any] = field(default_factory=dict)

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcoms[key] = value
