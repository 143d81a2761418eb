"""Alembic environment of the provider's tables, run by ``SmsProviderDBManager``."""

from __future__ import annotations

import contextlib
from typing import Any

from airflow import settings
from alembic import context

from airflow_provider_sms.db_manager import TABLE_NAMES, SmsProviderDBManager

config = context.config
target_metadata = SmsProviderDBManager.metadata


def include_object(_object: Any, name: str | None, type_: str, *_args: Any) -> bool:
    # Airflow's tables live in the same database: this environment must never touch them.
    return type_ != "table" or name in TABLE_NAMES


# What both modes configure the same way: our tables only, under our own version table.
OPTIONS: dict[str, Any] = {
    "target_metadata": target_metadata,
    "render_as_batch": True,
    "version_table": SmsProviderDBManager.version_table_name,
    "include_object": include_object,
}


def run_migrations_offline() -> None:
    context.configure(url=settings.SQL_ALCHEMY_CONN, literal_binds=True, **OPTIONS)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    with contextlib.ExitStack() as stack:
        # Airflow may hand over its own connection, as it does for its migrations.
        if (connection := config.attributes.get("connection")) is None:
            if settings.engine is None:
                raise RuntimeError("Airflow's database engine is not configured")
            connection = stack.enter_context(settings.engine.connect())
        context.configure(connection=connection, transaction_per_migration=True, **OPTIONS)
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
