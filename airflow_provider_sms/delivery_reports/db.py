"""Creates and migrates the provider's tables (the delivery reports' and the campaigns page's) as part
of ``airflow db migrate``. Not public API.

Airflow 3.2 and later find this manager through ``db-managers`` in the provider's info; Airflow 3.0
and 3.1 run it only when ``[database] external_db_managers`` names it (see the "Delivery reports" page).
"""

from __future__ import annotations

from pathlib import Path

from airflow.utils.db_manager import BaseDBManager

# The campaigns page's tables are on the same MetaData: importing them is what declares them.
from airflow_provider_sms.campaigns import tables as _campaign_tables  # noqa: F401
from airflow_provider_sms.delivery_reports.tables import metadata

HERE = Path(__file__).parent
# Every table of the provider (Airflow's own are never touched).
TABLE_NAMES = tuple(metadata.tables)


class SmsDeliveryReportsDBManager(BaseDBManager):
    """Airflow's external DB manager for :data:`~airflow_provider_sms.delivery_reports.tables.metadata`."""

    metadata = metadata
    version_table_name = "alembic_version_sms_delivery_reports"
    migration_dir = (HERE / "migrations").as_posix()
    alembic_file = (HERE / "alembic.ini").as_posix()
    # `airflow db reset` drops the table with Airflow's own.
    supports_table_dropping = True
