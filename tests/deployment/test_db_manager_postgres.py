"""The provider's DB manager migrates a fresh PostgreSQL database up to the tables its definitions
declare, and back down to none of them (its own cluster, the ``postgres`` fixture: the deployment is
not started)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests.db_migration import check_up_and_down

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine


def test_the_migration_goes_up_and_down_on_postgresql(postgres: Engine) -> None:
    check_up_and_down(postgres)
