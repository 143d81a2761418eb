"""A local emulator of the SMS service for demos, tests and users' own DAG tests.

Names are imported on first use: the pytest plugin (:mod:`airflow_provider_sms.sandbox.testing`) is
loaded by every pytest run where the provider is installed, and must not pay for FastAPI and uvicorn
unless a test asks for the sandbox.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_provider_sms.sandbox.server import InspectionClient, SandboxServer
    from airflow_provider_sms.sandbox.state import DEFAULT_SEEDS, Faults, SandboxConfig, SandboxState, Seeds

_EXPORTS = {
    "InspectionClient": "airflow_provider_sms.sandbox.server",
    "SandboxServer": "airflow_provider_sms.sandbox.server",
    "DEFAULT_SEEDS": "airflow_provider_sms.sandbox.state",
    "Faults": "airflow_provider_sms.sandbox.state",
    "SandboxConfig": "airflow_provider_sms.sandbox.state",
    "SandboxState": "airflow_provider_sms.sandbox.state",
    "Seeds": "airflow_provider_sms.sandbox.state",
}

__all__ = [
    "DEFAULT_SEEDS",
    "Faults",
    "InspectionClient",
    "SandboxConfig",
    "SandboxServer",
    "SandboxState",
    "Seeds",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
