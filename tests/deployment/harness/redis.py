"""The Celery broker: Debian's Redis on 127.0.0.1, without persistence."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path


def redis_command(port: int, directory: Path) -> list[str]:
    """Redis's command line: listening on 127.0.0.1:``port``, writing nothing to disk (``directory``:
    its working directory)."""
    return [
        "redis-server",
        "--bind",
        "127.0.0.1",
        "--port",
        str(port),
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(directory),
    ]


def broker_url(port: int) -> str:
    """The Celery broker URL of the Redis on ``port``."""
    return f"redis://127.0.0.1:{port}/0"
