"""The provider's app on the API server: one plugin, under the name and paths users know, serving both
routers and the health probe, with one refusal type."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from airflow_provider_sms.api_server.app import build_app, warn_if_not_migrated
from airflow_provider_sms.api_server.plugin import SmsApiServerPlugin
from airflow_provider_sms.api_server.refusal import Refusal
from airflow_provider_sms.db_manager import DB_MANAGER_PATH
from airflow_provider_sms.delivery_reports.connections import Connections

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_the_plugin_keeps_its_registered_name_and_its_first_dotted_path() -> None:
    from airflow_provider_sms.delivery_reports.plugin import SmsDeliveryReportsPlugin

    assert SmsDeliveryReportsPlugin is SmsApiServerPlugin
    assert SmsApiServerPlugin.name == "sms_delivery_reports"
    # The airflow.plugins entry point: the same name, the class where it is defined.
    entry_point = 'sms_delivery_reports = "airflow_provider_sms.api_server.plugin:SmsApiServerPlugin"'
    assert entry_point in PYPROJECT.read_text().splitlines()


def test_the_app_serves_the_receiver_the_campaigns_and_the_health_probe_and_answers_refusals() -> None:
    app = build_app(Connections(), group_commit=1)
    paths = {getattr(route, "path", None) for route in app.routes}

    assert {
        "/delivery-reports/_health",
        "/delivery-reports/{conn_id}",
        "/delivery-reports/{conn_id}/summary",
        "/delivery-reports/{conn_id}/batches/{batch}",
        "/campaigns/api/v1/campaigns",
        "/campaigns/api/v1/campaigns/{campaign}",
        "/campaigns/ui/",
    } <= paths
    assert Refusal in app.exception_handlers


@pytest.mark.parametrize(("airflow_version", "warned"), [("3.1.3", True), ("3.2.0", False)])
def test_the_api_server_warns_at_start_when_airflow_would_not_make_the_tables(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, airflow_version: str, warned: bool
) -> None:
    import airflow

    monkeypatch.setattr(airflow, "__version__", airflow_version)
    monkeypatch.setenv("AIRFLOW__DATABASE__EXTERNAL_DB_MANAGERS", "")
    with caplog.at_level(logging.WARNING, logger="airflow_provider_sms.api_server.app"):
        warn_if_not_migrated()
    lines = [record.getMessage() for record in caplog.records]
    expected = (
        f"SMS provider: its tables are made by its own DB manager; Airflow {airflow_version} migrates "
        f"them only when [database] external_db_managers names {DB_MANAGER_PATH}"
    )
    assert [line.startswith(expected) for line in lines] == ([True] if warned else [])
