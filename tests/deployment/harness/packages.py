"""Debian's PostgreSQL and Redis, installed with apt once when missing (the tests fail, never skip)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path

from tests.deployment.harness.waiting import DeploymentError

DEBIAN_PACKAGES = ("postgresql", "redis-server")


def postgres_bin() -> Path | None:
    """The newest ``/usr/lib/postgresql/<version>/bin`` (Debian keeps initdb and postgres there)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(p.split("/")[4]))
    return Path(found[-1]).parent if found else None


def ensure_debian_packages() -> None:
    """Install postgresql and redis-server with apt when missing; raise when that is impossible."""
    if postgres_bin() is not None and shutil.which("redis-server"):
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise DeploymentError(
            f"tests/deployment needs Debian's {' and '.join(DEBIAN_PACKAGES)}: install them "
            "(apt-get install -y postgresql redis-server) or run as root on Debian so that they are installed"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *DEBIAN_PACKAGES]):
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900, check=False)
        if result.returncode != 0:
            raise DeploymentError(
                f"{' '.join(command)} failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
            )
    if postgres_bin() is None or not shutil.which("redis-server"):
        raise DeploymentError(
            f"apt-get installed {DEBIAN_PACKAGES} but initdb or redis-server is still missing"
        )
