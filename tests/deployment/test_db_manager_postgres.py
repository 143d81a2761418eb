"""The provider's DB manager migrates a fresh PostgreSQL database up to the tables its definitions
declare, and back down to none of them (its own cluster: the deployment is not started)."""

from __future__ import annotations

import subprocess
from typing import TYPE_CHECKING

import pytest
import sqlalchemy
from sqlalchemy.pool import NullPool

from tests.db_migration import check_up_and_down
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


def test_the_migration_goes_up_and_down_on_postgresql(postgres: Engine) -> None:
    check_up_and_down(postgres)
