"""The provider's one migration, run up and down on a database: the check the SQLite unit test and
the PostgreSQL deployment test share."""

from __future__ import annotations

from typing import TYPE_CHECKING

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

from airflow_provider_sms.db_manager import TABLE_NAMES, SmsProviderDBManager

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine


def table_names(engine: Engine) -> set[str]:
    with engine.connect() as connection:
        return set(inspect(connection).get_table_names())


def check_up_and_down(engine: Engine) -> None:
    """Upgrade ``engine``'s empty database to the head: exactly the tables the definitions declare;
    then downgrade to the base: none of them left (only Alembic's version table)."""
    version_table = SmsProviderDBManager.version_table_name
    config = SmsProviderDBManager(session=None).get_alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "heads")
    assert {*TABLE_NAMES, version_table} == table_names(engine)
    with engine.connect() as connection:
        # Our tables only (the version table is Alembic's own).
        context = MigrationContext.configure(
            connection,
            opts={"include_object": lambda _o, name, kind, *_: kind != "table" or name in TABLE_NAMES},
        )
        assert compare_metadata(context, SmsProviderDBManager.metadata) == []
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, "base")
    assert table_names(engine) == {version_table}
