"""Timing, memory and reporting helpers shared by every benchmark case.

Each case runs our code and the baseline a user would otherwise pick, in the same process and the
same run, interleaved (ours, baseline, ours, baseline, ...) so that noise from other work on the
machine falls on both sides alike, and keeps the minimum of each side. The garbage collector stays
enabled, as it is in a worker: its cost is part of what a user pays.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import time
import tracemalloc
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Target:
    """What a case must achieve.

    :param limit: the bound; ``None`` for a case that is only reported.
    :param kind: ``ratio`` (ours / baseline <= limit), ``overhead`` (ours - baseline <= limit,
        in the case's unit) or ``bound`` (ours <= limit, in the case's unit: a figure with no
        baseline, e.g. a loop lag or a memory growth measured in the run).
    """

    limit: float | None = None
    kind: str = "ratio"

    def describe(self, unit: str) -> str:
        """The target as the table shows it."""
        if self.limit is None:
            return "report"
        if self.kind == "overhead":
            return f"overhead <= {self.limit:g} {unit}"
        if self.kind == "bound":
            return f"<= {_figure(self.limit, unit)}"
        return f"<= {self.limit:g}"

    def met(self, ours: float | None, baseline: float | None) -> bool | None:
        """Whether the figures meet the target (``None`` when reported only or not measured)."""
        if self.limit is None or ours is None:
            return None
        if self.kind == "bound":
            return ours <= self.limit
        if baseline is None:
            return None
        if self.kind == "overhead":
            return ours - baseline <= self.limit
        return ours / baseline <= self.limit


REPORT = Target()
# The baseline_name of a row with no baseline: a bound, or a figure reported alone.
NO_BASELINE = "none (a bound, or a figure reported alone)"


@dataclass
class Record:
    """One row of the table and one record of ``results.json``.

    :param name: the case.
    :param size: how many items (numbers, entries, calls, recipients) the case handles.
    :param unit: unit of ``ours`` and ``baseline``: ``s``, ``ms``, ``bytes`` or ``count``.
    :param ours: our figure (best of the repetitions).
    :param baseline: the baseline's figure, or ``None`` for a case without one.
    :param baseline_name: what the baseline is (measured in the same run), or :data:`NO_BASELINE`.
    :param ratio: ours / baseline (lower is better).
    :param peak_memory: our side's peak memory in bytes (tracemalloc, or RSS where said), if measured.
    :param target: the target as text (``<= 1.3``, ``overhead <= 50 ms``, ``report``).
    :param met: True/False against the target; ``None`` for report-only or skipped cases.
    :param note: what is compared, or why the case was skipped.
    """

    name: str
    size: int
    unit: str
    ours: float | None
    baseline: float | None
    baseline_name: str
    ratio: float | None
    peak_memory: int | None
    target: str
    met: bool | None
    note: str = ""

    def as_json(self) -> dict[str, Any]:
        """The record as ``results.json`` holds it."""
        return asdict(self)


def record(
    name: str,
    size: int,
    ours: float | None,
    baseline: float | None,
    target: Target,
    *,
    baseline_name: str,
    unit: str = "s",
    peak_memory: int | None = None,
    note: str = "",
) -> Record:
    """Build a :class:`Record`, computing the ratio and whether the target is met.

    ``baseline_name`` says what ``baseline`` is (:data:`NO_BASELINE` when there is none).
    """
    ratio = ours / baseline if ours is not None and baseline else None
    return Record(
        name=name,
        size=size,
        unit=unit,
        ours=ours,
        baseline=baseline,
        baseline_name=baseline_name,
        ratio=ratio,
        peak_memory=peak_memory,
        target=target.describe(unit),
        met=target.met(ours, baseline),
        note=note,
    )


def skipped(
    name: str, size: int, target: Target, reason: str, *, baseline_name: str, unit: str = "s"
) -> Record:
    """A case that could not run here, with the reason in its note and the baseline it would have had."""
    return record(
        name, size, None, None, target, baseline_name=baseline_name, unit=unit, note=f"skipped: {reason}"
    )


def best_of(*sides: Callable[[], object], reps: int) -> list[float]:
    """Run each side ``reps`` times, interleaved; return the minimum wall time of each, in seconds.

    A full collection before each run makes every run start from the same heap.
    """
    best = [float("inf")] * len(sides)
    for _ in range(reps):
        for index, side in enumerate(sides):
            gc.collect()
            best[index] = min(best[index], _timed(side))
    return best


def _timed(func: Callable[[], object]) -> float:
    start = time.perf_counter()
    result = func()
    elapsed = time.perf_counter() - start
    del result  # freed outside the timed region: releasing it is not part of the work compared
    return elapsed


def traced_peak(func: Callable[[], object]) -> int:
    """Peak bytes allocated by ``func`` while it runs, measured by tracemalloc.

    Its result is held until the peak is read, so what it returns counts.
    """
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        result = func()
        _, peak = tracemalloc.get_traced_memory()
        del result
    finally:
        tracemalloc.stop()
    return peak


def format_table(records: list[Record]) -> str:
    """The results as a Markdown table (printed, and pasted into docs/performance.md)."""
    lines = [
        "| case | size | ours | baseline | ratio | peak memory | target | met |",
        "|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for row in records:
        met = {True: "yes", False: "**no**", None: "—"}[row.met]
        lines.append(
            f"| {row.name} | {row.size:,} | {_figure(row.ours, row.unit)} "
            f"| {_figure(row.baseline, row.unit)} | {_ratio(row.ratio)} | {_bytes(row.peak_memory)} "
            f"| {row.target} | {met} |"
        )
    return "\n".join(lines)


def format_notes(records: list[Record]) -> str:
    """One line per case that has a note: what it compares, or why it was skipped."""
    return "\n".join(f"- **{row.name}**: {row.note}" for row in records if row.note)


def _figure(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit == "bytes":
        return _bytes(int(value))
    if unit == "count":
        return f"{value:,.0f}"
    if unit == "s" and value < 1:
        return f"{value * 1000:.1f} ms"
    return f"{value:.2f} {unit}" if unit == "s" else f"{value:.1f} {unit}"


def _ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _bytes(value: int | None) -> str:
    if value is None:
        return "—"
    if value >= 1024 * 1024:
        return f"{value / (1024 * 1024):.1f} MiB"
    return f"{value / 1024:.0f} KiB"


def run_child(command: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Run ``python *command`` in a fresh interpreter, from the project's root.

    A child that fails raises RuntimeError with the end of its standard error.
    """
    done = subprocess.run(
        [sys.executable, *command],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        shown = " ".join("<code>" if "\n" in part else part for part in command)
        raise RuntimeError(f"python {shown[:200]} failed: {done.stderr[-3000:]}")
    return done


def last_json(output: str) -> dict[str, Any]:
    """The figures a child prints last: its output's last line, a JSON object."""
    figures: dict[str, Any] = json.loads(output.strip().splitlines()[-1])
    return figures


def child_figures(module: str, args: list[str], env: dict[str, str], timeout: float) -> dict[str, Any]:
    """Run ``python -m module *args`` in a fresh interpreter; the figures it prints last (a JSON line)."""
    return last_json(run_child(["-m", module, *args], env, timeout).stdout)
