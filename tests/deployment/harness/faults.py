"""Faults a scenario brings on the deployment: an API server killed or stopped, PostgreSQL down for a
while, and the components that exit meanwhile started again as a supervisor would.

:class:`Faults` is mixed into :class:`~tests.deployment.harness.deployment.Deployment`: it uses the
deployment's processes, its database and ``start_component`` (``airflow``).
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING

from tests.deployment.harness.airflow import COMPONENTS
from tests.deployment.harness.processes import STOP_TIMEOUT
from tests.deployment.harness.waiting import DeploymentError, wait_for

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

# How long Deployment.revive watches components after an outage: they give up within seconds.
REVIVE_WATCH = 20.0


class Faults:
    """Crashes and outages, each undone by the method that follows it."""

    def kill_api_server(self, index: int = 1) -> None:
        """SIGKILL API server ``index`` and everything it started, as a crashed machine would stop."""
        self.processes[self.api_server_name(index)].kill()

    def stop_api_server(self, index: int = 1) -> None:
        """Stop API server ``index`` as an operator would (SIGTERM; killed after STOP_TIMEOUT)."""
        self.processes[self.api_server_name(index)].stop()

    def stop_postgres(self) -> None:
        """Stop PostgreSQL with ``pg_ctl stop -m fast`` (sessions ended, transactions under way rolled
        back, nothing committed lost); return once it has exited. Its port then refuses connections."""
        self.postgres().stop()
        postgres = self.processes["postgres"]
        if postgres.popen is not None:
            postgres.popen.wait(timeout=STOP_TIMEOUT)

    def restart_postgres(self) -> None:
        """Start PostgreSQL again on its data, port and settings (what ``pg_ctl start`` would do, but in the
        foreground as at start-up, so that :meth:`stop` still ends it); return once it accepts connections."""
        postgres = self.processes["postgres"]
        if postgres.running:
            raise DeploymentError("PostgreSQL is already running")
        postgres.start()
        wait_for("postgres to accept connections again", self.postgres().accepting, 60, interval=0.3)

    @contextlib.contextmanager
    def postgres_down(self) -> Iterator[list[str]]:
        """PostgreSQL stopped for the block (:meth:`stop_postgres`), then, whatever happened in it, started
        again (:meth:`restart_postgres`) and the components that exited meanwhile too (:meth:`revive`).

        Yields a list that holds, once the block is over, the names of the components started again.
        """
        revived: list[str] = []
        self.stop_postgres()
        try:
            yield revived
        finally:
            self.restart_postgres()
            revived += self.revive()

    def revive(self, names: Sequence[str] = COMPONENTS, watch: float = REVIVE_WATCH) -> list[str]:
        """Start again those of the components ``names`` that exit within ``watch`` seconds (as a
        supervisor such as systemd or Kubernetes would); return their names, once each is ready.

        A component that lost its database may still be giving up when it is back (the triggerer
        stops its log server first): it is watched for a while, not looked at once.
        """
        revived: list[str] = []
        deadline = time.monotonic() + watch
        while time.monotonic() < deadline:
            for name in names:
                if name in self.processes and not self.processes[name].running:
                    self.start_component(name)
                    revived.append(name)
            time.sleep(0.5)
        return revived
