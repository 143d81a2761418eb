"""Creates and migrates every table of the provider (the delivery reports', the campaigns page's and the
claim store's, with SmsNotifier's alert folds) as part of ``airflow db migrate``. Not public API but for
its dotted path, which Airflow's configuration may name.

Airflow 3.2 and later find this manager through ``db-managers`` in the provider's info; Airflow 3.0
and 3.1 run it only when ``[database] external_db_managers`` names it (see the "Delivery reports" page):
:func:`registration_hint` says what to set when it does not.
"""

from __future__ import annotations

from pathlib import Path

from airflow.utils.db_manager import BaseDBManager

from airflow_provider_sms.api_server import claims as claim_tables
from airflow_provider_sms.campaigns import tables as campaign_tables
from airflow_provider_sms.delivery_reports import tables as delivery_report_tables

MIGRATIONS = Path(__file__).parent / "migrations"
# Both modules declare their tables on one MetaData: one migration chain for all of them.
metadata = delivery_report_tables.metadata
# Every table of the provider (Airflow's own are never touched).
TABLE_NAMES = tuple(
    table.name for table in (*delivery_report_tables.TABLES, *campaign_tables.TABLES, *claim_tables.TABLES)
)
# The manager's dotted path, and the one it had when it held the delivery reports' tables only (which
# Airflow's configuration may still name: both name this manager).
DB_MANAGER_PATH = "airflow_provider_sms.db_manager.SmsProviderDBManager"
DB_MANAGER_PATHS = (DB_MANAGER_PATH, "airflow_provider_sms.delivery_reports.db.SmsDeliveryReportsDBManager")
# The first Airflow that runs the managers of the providers' info.
READS_PROVIDER_DB_MANAGERS = (3, 2)


class SmsProviderDBManager(BaseDBManager):
    """Airflow's external DB manager for every table of the provider (:data:`TABLE_NAMES`)."""

    metadata = metadata
    # Named when it held the delivery reports' tables only; the name stays, so that a database made by
    # an earlier build keeps one version table (which `airflow db reset` clears with the tables).
    version_table_name = "alembic_version_sms_delivery_reports"
    migration_dir = MIGRATIONS.as_posix()
    alembic_file = (MIGRATIONS / "alembic.ini").as_posix()
    # Each provider version and the revision its tables stand at.
    revision_heads_map = {"0.1.0": "71acd0083919"}
    # `airflow db reset` drops the tables with Airflow's own.
    supports_table_dropping = True


def registration_hint() -> str:
    """What to set so that ``airflow db migrate`` runs this manager, as the end of a sentence; "" when
    Airflow runs it (3.2 and later, or ``[database] external_db_managers`` names it)."""
    from airflow import __version__ as airflow_version
    from airflow.configuration import conf
    from packaging.version import Version

    if Version(airflow_version).release[:2] >= READS_PROVIDER_DB_MANAGERS:
        return ""
    named = conf.get("database", "external_db_managers", fallback="") or ""
    if {name.strip() for name in named.split(",")} & set(DB_MANAGER_PATHS):
        return ""
    return (
        f"; Airflow {airflow_version} migrates them only when [database] external_db_managers names "
        f"{DB_MANAGER_PATH}: add it there (AIRFLOW__DATABASE__EXTERNAL_DB_MANAGERS) for every Airflow "
        "component, then run `airflow db migrate`"
    )
