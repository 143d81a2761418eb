"""A local emulator of the SMS service for demos, tests and users' own DAG tests."""

from airflow_provider_sms.sandbox.server import InspectionClient, SandboxServer
from airflow_provider_sms.sandbox.state import SandboxConfig, SandboxState, Seeds

__all__ = ["InspectionClient", "SandboxConfig", "SandboxServer", "SandboxState", "Seeds"]
