"""The metadata database: Debian's PostgreSQL, a throwaway cluster run in the foreground on 127.0.0.1.

``initdb`` and ``postgres`` refuse to run as root: when we are root they run as the ``postgres`` user
(Debian's package creates it), on a data directory it owns.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.deployment.harness.packages import postgres_bin
from tests.deployment.harness.waiting import DeploymentError

# Durability off (a throwaway cluster); room for every component's connection pool.
SETTINGS = ("fsync=off", "synchronous_commit=off", "full_page_writes=off", "max_connections=200")


def as_postgres(command: list[str]) -> list[str]:
    """``command`` run as the ``postgres`` user when we are root, else as it is."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


@dataclass
class Postgres:
    """A PostgreSQL cluster in ``data`` served on 127.0.0.1:``port``, with a superuser and a database
    named ``airflow`` (trust authentication).

    :param bin: Debian's ``/usr/lib/postgresql/<version>/bin``.
    """

    port: int
    data: Path
    bin: Path

    @classmethod
    def create(cls, port: int) -> Postgres:
        """``initdb`` a new cluster under /tmp, to be served on ``port``."""
        pg_bin = postgres_bin()
        if pg_bin is None:
            raise DeploymentError("PostgreSQL is not installed")
        # Under /tmp, not the pytest temp dir: that one is private to root, and postgres must own its data.
        data = Path(tempfile.mkdtemp(prefix="sms-deployment-pg-"))
        if os.geteuid() == 0:
            shutil.chown(data, "postgres", "postgres")
        database = cls(port, data, pg_bin)
        result = database.tool(
            "initdb", "-D", str(data), "-U", "airflow", "--auth=trust", "-E", "UTF8", "--no-sync"
        )
        if result.returncode != 0:
            raise DeploymentError(f"initdb failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
        return database

    @property
    def url(self) -> str:
        """The SQLAlchemy URL of the ``airflow`` database."""
        return f"postgresql+psycopg2://airflow@127.0.0.1:{self.port}/airflow"

    def command(self) -> list[str]:
        """The server's command line, in the foreground (SIGINT is its "fast" shutdown)."""
        listen = ["listen_addresses=127.0.0.1", f"unix_socket_directories={self.data}", *SETTINGS]
        options = [part for setting in listen for part in ("-c", setting)]
        return as_postgres([str(self.bin / "postgres"), "-D", str(self.data), "-p", str(self.port), *options])

    def tool(self, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
        """Run one of PostgreSQL's programs (``pg_ctl``, ``pg_isready``...) on this cluster's machine."""
        command = as_postgres([str(self.bin / tool), *args])
        return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)

    def create_database(self) -> bool:
        """Create the ``airflow`` database; False while the server does not accept connections yet."""
        createdb = [
            str(self.bin / "createdb"),
            "-h",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-U",
            "airflow",
            "airflow",
        ]
        return subprocess.run(createdb, capture_output=True, timeout=30, check=False).returncode == 0

    def accepting(self) -> bool:
        """Whether the server accepts connections."""
        ready = ("-h", "127.0.0.1", "-p", str(self.port), "-U", "airflow")
        return self.tool("pg_isready", *ready).returncode == 0

    def stop(self) -> None:
        """``pg_ctl stop -m fast``: sessions ended, transactions under way rolled back, nothing committed
        lost; returns once the server has exited."""
        result = self.tool("pg_ctl", "stop", "-D", str(self.data), "-m", "fast", "-w", "-t", "60")
        if result.returncode != 0:
            raise DeploymentError(f"pg_ctl stop failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")

    def query(self, sql: str, **params: Any) -> list[tuple[Any, ...]]:
        """The rows of one SQL statement, on a connection of its own, committed (none for a statement
        that returns no rows, e.g. ``ALTER TABLE``).

        :param sql: the statement, with ``:name`` placeholders for ``params``.
        """
        import sqlalchemy
        from sqlalchemy.pool import NullPool

        engine = sqlalchemy.create_engine(self.url, poolclass=NullPool)
        try:
            with engine.begin() as connection:
                result = connection.execute(sqlalchemy.text(sql), params)
                return [tuple(row) for row in result] if result.returns_rows else []
        finally:
            engine.dispose()

    def remove(self) -> None:
        """Delete the cluster's files (once the server has stopped)."""
        shutil.rmtree(self.data, ignore_errors=True)
