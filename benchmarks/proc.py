"""What a benchmark's child process reads of itself in ``/proc`` (Linux): RSS, its peak, sockets."""

from __future__ import annotations

import os


def status_bytes(field: str) -> int:
    """A ``VmRSS`` or ``VmHWM`` figure of ``/proc/self/status``, in bytes."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith(field + ":"))


def reset_peak_rss() -> None:
    """Reset the kernel's high-water mark of this process's RSS (``VmHWM``; Linux 4.0+).

    Where that is refused the mark keeps the imports' peak, and a growth measured from it is higher.
    """
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
    except OSError:
        pass


def open_sockets() -> int:
    """Sockets this process holds open."""
    count = 0
    for entry in os.scandir("/proc/self/fd"):
        try:
            count += os.readlink(entry.path).startswith("socket:")
        except OSError:
            continue  # closed while listed
    return count
