"""What a database error tells the provider's app on the API server: whether its tables are missing,
which waiting does not cure. Not public API.
"""

from __future__ import annotations

MIGRATE_HINT = (
    "the delivery-report tables are missing from Airflow's metadata database: run `airflow db migrate` "
    "with the provider installed (see the Delivery reports page)"
)


def tables_missing(exc: BaseException) -> bool:
    """Whether a database error says a table is not there (PostgreSQL, MySQL, SQLite)."""
    from sqlalchemy.exc import OperationalError, ProgrammingError

    text = str(exc).lower()
    return isinstance(exc, (ProgrammingError, OperationalError)) and (
        "no such table" in text or "does not exist" in text or "doesn't exist" in text
    )
