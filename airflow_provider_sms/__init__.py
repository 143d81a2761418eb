"""Apache Airflow provider for an SMS campaign service."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

# The default Airflow connection id of every hook, operator, sensor and notifier.
DEFAULT_CONN_ID = "sms_default"

__all__ = ["DEFAULT_CONN_ID", "__version__", "get_provider_info"]


def get_provider_info() -> dict[str, Any]:
    """Describe the provider to Airflow (entry point ``apache_airflow_provider``)."""
    from airflow_provider_sms.connection_form import conn_fields, ui_field_behaviour

    integration = "SMS campaign service"
    return {
        "package-name": "airflow-provider-sms",
        "name": "SMS campaign service",
        "description": "Send cost-gated SMS campaigns and watch delivery-report webhooks and the NPAI list.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": integration,
                "external-doc-url": "https://github.com/airflow-provider-sms/airflow-provider-sms",
                "tags": ["service"],
            }
        ],
        "hooks": [{"integration-name": integration, "python-modules": ["airflow_provider_sms.hooks.sms"]}],
        "operators": [
            {"integration-name": integration, "python-modules": ["airflow_provider_sms.operators.sms"]}
        ],
        "sensors": [
            {"integration-name": integration, "python-modules": ["airflow_provider_sms.sensors.sms"]}
        ],
        "triggers": [
            {"integration-name": integration, "python-modules": ["airflow_provider_sms.triggers.sms"]}
        ],
        "notifications": ["airflow_provider_sms.notifications.sms.SmsNotifier"],
        # The send operators' "SMS campaign" link (declared on them too: operator_extra_links).
        "extra-links": ["airflow_provider_sms.campaigns.link.SmsCampaignLink"],
        # Loaded through the airflow.plugins entry point; listed here so that Airflow describes it.
        "plugins": [
            {
                "name": "sms_delivery_reports",
                "plugin-class": "airflow_provider_sms.api_server.plugin.SmsApiServerPlugin",
            }
        ],
        # The provider's tables, made by `airflow db migrate` (Airflow 3.2 and later read this key;
        # before, [database] external_db_managers names the manager).
        "db-managers": ["airflow_provider_sms.db_manager.SmsProviderDBManager"],
        # Read by the send operators (their claims), `python -m airflow_provider_sms prune`, and the
        # delivery-report receiver on the API server.
        "config": {
            "sms": {
                "description": "Never twice across runs: the claims' window and the lifetime of records; "
                "how the API server stores delivery reports.",
                "options": {
                    "duplicate_window_minutes": {
                        "description": "Two sends of the same message on the same connection are for the "
                        "same slot when their delivery times (the delay, or the send time) are closer than "
                        "this: a number the first sent to is left out of the second (a send to the same "
                        "lists is refused) unless on_duplicate says.",
                        "version_added": "0.1.0",
                        "type": "float",
                        "example": "120",
                        "default": "60",
                    },
                    "record_retention_days": {
                        "description": "How long after its task instance ended `python -m "
                        "airflow_provider_sms prune` keeps a send guard (claims go once past the window).",
                        "version_added": "0.1.0",
                        "type": "float",
                        "example": "90",
                        "default": "30",
                    },
                    "delivery_report_group_commit": {
                        "description": "The most delivery reports the API server's receiver stores in one "
                        "commit: reports arriving while a commit is under way share the next one (each "
                        "call answered after it). 1 commits each report alone.",
                        "version_added": "0.1.0",
                        "type": "integer",
                        "example": "1",
                        "default": "500",
                    },
                    "delivery_report_retention_days": {
                        "description": "How long after a campaign's last report arrived `python -m "
                        "airflow_provider_sms prune-delivery-reports` keeps its reports and counts.",
                        "version_added": "0.1.0",
                        "type": "float",
                        "example": "365",
                        "default": "90",
                    },
                },
            }
        },
        "connection-types": [
            {
                "hook-class-name": "airflow_provider_sms.hooks.sms.SmsHook",
                "hook-name": "SMS campaign service",
                "connection-type": "sms",
                "conn-fields": conn_fields(),
                "ui-field-behaviour": ui_field_behaviour(hidden_key="hidden-fields"),
            }
        ],
    }
