"""The deployment's long-running processes: each in its own process group, its output in a file.

Also what a test reads of processes it did not start (a worker's task processes) and free ports.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tests.deployment.harness.waiting import wait_for

if TYPE_CHECKING:
    from collections.abc import Mapping

REPO = Path(__file__).resolve().parents[3]
STOP_TIMEOUT = 15.0


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_open(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:``port``."""
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class Process:
    """One long-running process of the deployment, in its own process group, its output in a file."""

    name: str
    command: list[str]
    env: Mapping[str, str]
    log_path: Path
    popen: subprocess.Popen[bytes] | None = None
    stop_signal: int = signal.SIGTERM
    # Where this start's output begins in the log (a restarted component appends to it).
    log_offset: int = 0
    # The process groups of its tree when it was asked to stop (its children may outlive it).
    _groups: set[int] = field(default_factory=set)

    def start(self) -> Process:
        """Start the process in a new session (its own process group)."""
        self.log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with self.log_path.open("ab") as log:
            self.popen = subprocess.Popen(
                self.command,
                env=dict(self.env),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=REPO,
                start_new_session=True,
            )
        return self

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def log(self) -> str:
        """The output of this start of the process so far."""
        if not self.log_path.exists():
            return ""
        with self.log_path.open("rb") as log:
            log.seek(self.log_offset)
            return log.read().decode(errors="replace")

    def groups(self) -> set[int]:
        """The process groups of the process and of everything it started.

        Airflow's task supervisor puts each task process in a group of its own (to signal its whole
        tree), so a worker's group alone does not hold its running tasks.
        """
        if self.popen is None:
            return set()
        groups = {_process_group(pid) for pid in descendants(self.popen.pid)}
        return {self.popen.pid} | {group for group in groups if group is not None}

    def signal_groups(self, groups: set[int], signum: int) -> None:
        """Send ``signum`` to every group in ``groups``."""
        for group in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signum)

    def kill(self) -> None:
        """``kill -9`` the process and everything it started at once, as a crashed machine would stop.

        Returns once every one of them is dead (SIGKILL is delivered asynchronously).
        """
        if self.popen is None:
            return
        tree = [self.popen.pid, *descendants(self.popen.pid)]
        self.signal_groups(self.groups(), signal.SIGKILL)
        self.popen.wait(timeout=STOP_TIMEOUT)
        wait_for(
            f"the processes of {self.name} to die",
            lambda: all(process_state(pid) in (None, "Z") for pid in tree),
            STOP_TIMEOUT,
            interval=0.05,
        )

    def request_stop(self) -> None:
        """Send the stop signal to the process's group without waiting (remembering its tree first)."""
        if self.popen is not None and self.popen.poll() is None:
            self._groups = self.groups()
            self.signal_groups({self.popen.pid}, self.stop_signal)

    def stop(self) -> None:
        """Ask the process to stop; kill what is left of its tree after STOP_TIMEOUT seconds."""
        if self.popen is None:
            return
        groups = self._groups | self.groups()
        if self.popen.poll() is None:
            self.signal_groups({self.popen.pid}, self.stop_signal)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=STOP_TIMEOUT)
        # Children left behind (by a process that died first, or in groups of their own) are killed.
        self.signal_groups(groups, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=STOP_TIMEOUT)

    def alive(self) -> bool:
        """Whether the process or anything in its own group is still there."""
        if self.popen is None:
            return False
        try:
            os.killpg(self.popen.pid, 0)
        except ProcessLookupError:
            return False
        return True


def descendants(root: int) -> list[int]:
    """Every live descendant of process ``root`` (read from /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            # The command name (in parentheses) may hold spaces: the fields follow its closing parenthesis.
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, pending = [], [root]
    while pending:
        for child in children.get(pending.pop(), []):
            found.append(child)
            pending.append(child)
    return found


def process_state(pid: int) -> str | None:
    """The state letter of process ``pid`` (``Z``: dead, not yet reaped), or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    # The command name (in parentheses) may hold spaces: the state follows its closing parenthesis.
    return stat.rsplit(")", 1)[1].split()[0]


def _process_group(pid: int) -> int | None:
    """The process group of ``pid``, or None when it has ended meanwhile."""
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None
