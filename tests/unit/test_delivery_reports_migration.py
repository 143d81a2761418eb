"""The delivery-report table's Alembic migration makes exactly what the ORM definition declares.

``airflow db migrate`` creates the table from the ORM on a new database and runs the migrations on one
that has them: both must give the same table, or an upgraded deployment would differ from a new one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect

from airflow_provider_sms.delivery_reports.db import SmsDeliveryReportsDBManager
from airflow_provider_sms.delivery_reports.store import TABLE_NAME, metadata

if TYPE_CHECKING:
    from pathlib import Path


def test_the_migration_makes_the_table_the_orm_declares(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'metadata.db'}")
    config = SmsDeliveryReportsDBManager(session=None).get_alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "heads")
    with engine.connect() as connection:
        tables = set(inspect(connection).get_table_names())
        assert {TABLE_NAME, SmsDeliveryReportsDBManager.version_table_name} <= tables
        # Our table only (the version table is Alembic's own).
        context = MigrationContext.configure(
            connection,
            opts={"include_object": lambda _o, name, kind, *_: kind != "table" or name == TABLE_NAME},
        )
        assert compare_metadata(context, metadata) == []
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, "base")
    with engine.connect() as connection:
        assert TABLE_NAME not in inspect(connection).get_table_names()
