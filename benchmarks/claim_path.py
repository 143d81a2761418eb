"""Where a benchmark child's sends claim their numbers: in process, or through the API server.

``in-process``: a SQLite database of the child's own, as under ``airflow dags test``.
``api-server``: the provider's routes on the Airflow API server that ``[api] base_url`` names (its
PostgreSQL), as a worker's task claims: the child blocks its own ORM the way the Task SDK blocks it in a
task process, so the send cannot take the in-process path.

Either way the send guard keeps its records in an in-memory Variable store (no task runtime in a child:
the stand-in the operator tests use).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

IN_PROCESS = "in-process"
API_SERVER = "api-server"
PATHS = (IN_PROCESS, API_SERVER)


def claim_through(where: str, patch: pytest.MonkeyPatch) -> None:
    """Set the child up to claim ``where`` (one of :data:`PATHS`)."""
    from tests.conftest import MemoryVariables, use_memory_variables

    if where == IN_PROCESS:
        use_memory_variables(patch)
        return
    if where != API_SERVER:
        raise ValueError(f"claims go {IN_PROCESS!r} or {API_SERVER!r}, not {where!r}")
    from airflow.sdk.execution_time.supervisor import block_orm_access

    from airflow_provider_sms.operators import _send_guard

    patch.setattr(MemoryVariables, "store", {})
    patch.setattr(_send_guard, "Variable", MemoryVariables)
    block_orm_access()
