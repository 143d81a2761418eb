"""The provider's DB manager migrates a fresh PostgreSQL database up to the tables its definitions
declare, and back down to none of them (its own cluster: the deployment is not started)."""

from __future__ import annotations

import subprocess
from typing import TYPE_CHECKING

import pytest
import sqlalchemy
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.pool import NullPool

from airflow_provider_sms.db_manager import TABLE_NAMES, SmsProviderDBManager
from tests.deployment.harness import wait_for
from tests.deployment.harness.postgres import Postgres
from tests.deployment.harness.processes import free_port

if TYPE_CHECKING:
    from collections.abc import Iterator

    from sqlalchemy.engine import Engine


@pytest.fixture
def postgres() -> Iterator[Engine]:
    database = Postgres.create(free_port())
    server = subprocess.Popen(
        database.command(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        wait_for("postgres to accept connections", database.create_database, 60, interval=0.3)
        engine = sqlalchemy.create_engine(database.url, poolclass=NullPool)
        yield engine
        engine.dispose()
    finally:
        # `pg_ctl stop` ends the server (a signal to the process started here would reach runuser only).
        database.stop()
        server.wait(timeout=60)
        database.remove()


def our_tables(engine: Engine) -> set[str]:
    with engine.connect() as connection:
        return set(sqlalchemy.inspect(connection).get_table_names())


def test_the_migration_goes_up_and_down_on_postgresql(postgres: Engine) -> None:
    config = SmsProviderDBManager(session=None).get_alembic_config()
    with postgres.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "heads")
    assert {*TABLE_NAMES, SmsProviderDBManager.version_table_name} == our_tables(postgres)
    with postgres.connect() as connection:
        context = MigrationContext.configure(
            connection,
            opts={"include_object": lambda _o, name, kind, *_: kind != "table" or name in TABLE_NAMES},
        )
        assert compare_metadata(context, SmsProviderDBManager.metadata) == []
    with postgres.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, "base")
    assert our_tables(postgres) == {SmsProviderDBManager.version_table_name}
