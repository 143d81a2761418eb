"""Start-up cases, each run in fresh interpreters: the import cost of the provider and DAG file parsing."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.harness import REPORT, Record, Target, record, skipped

ROOT = Path(__file__).resolve().parent.parent
OPERATORS = "airflow_provider_sms.operators.sms"
HOOK = "airflow_provider_sms.hooks.sms"
BASELINE_MODULE = "airflow.sdk"
IMPORT_OVERHEAD_MS = 50.0
STANDIN_DAG = Path(__file__).resolve().parent / "standin_dag.py"
STANDIN_NEEDS = (OPERATORS, "airflow_provider_sms.sensors.sms")
EXAMPLE_DAG = ROOT / "dags_examples" / "sms_weekly_campaign.py"
# Children compile each module once and reuse the bytecode, as an installed deployment does (.pyc
# files), even where PYTHONDONTWRITEBYTECODE is set; the cache lives outside the source tree.
PYCACHE = Path(tempfile.gettempdir()) / "airflow-provider-sms-bench-pycache"
# Longest one child may take: a stuck child fails the case instead of hanging the run.
CHILD_TIMEOUT = 120

_IMPORT_CHILD = """
import sys, time
start = time.perf_counter()
import {module}
print(time.perf_counter() - start)
"""

# What Airflow's DAG processor does for one file: pre-import the airflow.* modules the file names
# (in the manager, before it forks the parsing process), then execute the file. Only the execution
# is timed; importing this provider's own modules is part of it, as it is in the processor.
_PARSE_CHILD = """
import importlib, importlib.util, json, sys, time
from airflow.sdk import DAG
from airflow.sdk.definitions._internal.contextmanager import DagContext
from airflow.utils.file import iter_airflow_imports
path = sys.argv[1]
for name in iter_airflow_imports(path):
    importlib.import_module(name)
# As the processor's importer: DAGs made in a `with DAG(...)` block without a name are auto-registered.
DagContext.current_autoregister_module_name = "bench_parsed_dag"
start = time.perf_counter()
spec = importlib.util.spec_from_file_location("bench_parsed_dag", path)
module = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = module
spec.loader.exec_module(module)
elapsed = time.perf_counter() - start
found = {id(value): value for value in vars(module).values() if isinstance(value, DAG)}
found.update((id(dag), dag) for dag, _ in DagContext.autoregistered_dags)
dags = sorted(found.values(), key=lambda dag: dag.dag_id)
shape = [
    {
        "dag_id": dag.dag_id,
        "schedule": dag.schedule if isinstance(dag.schedule, str) else None,
        "tasks": [
            {
                "task_id": task.task_id,
                "upstream": sorted(task.upstream_task_ids),
                "python_task": getattr(task, "custom_operator_name", None) == "@task",
            }
            for task in dag.tasks
        ],
    }
    for dag in dags
]
print(json.dumps({"seconds": elapsed, "dags": shape}))
"""


def _child(code: str, *args: str, flags: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    env = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    return subprocess.run(
        [sys.executable, *flags, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT,
        cwd=ROOT,
        env=env,
        check=True,
    )


def _import_seconds(module: str) -> float:
    return float(_child(_IMPORT_CHILD.format(module=module)).stdout.strip().splitlines()[-1])


def import_case(reps: int) -> Record:
    """``import <our operators module>`` vs ``import airflow.sdk``, each in a fresh interpreter."""
    module = OPERATORS if importlib.util.find_spec(OPERATORS) else HOOK
    name = f"import cost ({module})"
    target = Target(IMPORT_OVERHEAD_MS, kind="overhead")
    _import_seconds(module)  # warm-up: fills the bytecode cache
    ours = baseline = float("inf")
    for _ in range(reps):
        ours = min(ours, _import_seconds(module) * 1000)
        baseline = min(baseline, _import_seconds(BASELINE_MODULE) * 1000)
    note = (
        f"fresh interpreter each time, min of {reps}: `import {module}` (which imports airflow.sdk "
        f"itself) vs `import {BASELINE_MODULE}` alone; target on the difference"
    )
    if module != OPERATORS:
        note += f"; {OPERATORS} does not exist yet, so the hook module is measured"
    overhead = ours - baseline
    note += f"; overhead {overhead:.0f} ms"
    if overhead > IMPORT_OVERHEAD_MS:
        note += "; heaviest imports added (self time): " + ", ".join(
            f"{package} {ms:.0f} ms" for package, ms in added_imports(module)[:6]
        )
    return record(name, 1, ours, baseline, target, unit="ms", note=note)


def added_imports(module: str) -> list[tuple[str, float]]:
    """Top-level packages that ``import module`` loads beyond airflow.sdk, by import self time (ms).

    Read from ``python -X importtime``; this is what to make lazy when the overhead is too high.
    """
    already = {name for name, _ in _importtime(f"import {BASELINE_MODULE}")}
    totals: dict[str, float] = defaultdict(float)
    for name, self_us in _importtime(f"import {BASELINE_MODULE}; import {module}"):
        if name not in already:
            totals[name.split(".")[0]] += self_us / 1000
    return sorted(totals.items(), key=lambda item: item[1], reverse=True)


def _importtime(code: str) -> list[tuple[str, int]]:
    rows = []
    for line in _child(code, flags=("-X", "importtime")).stderr.splitlines():
        if not line.startswith("import time:") or "imported package" in line:
            continue
        self_us, _, name = (part.strip() for part in line.removeprefix("import time:").split("|"))
        rows.append((name, int(self_us)))
    return rows


def default_dag() -> Path:
    """The example DAG once it exists, else the stand-in of the same shape kept with the benchmarks."""
    return EXAMPLE_DAG if EXAMPLE_DAG.exists() else STANDIN_DAG


def _parse(path: Path) -> dict[str, Any]:
    return json.loads(_child(_PARSE_CHILD, str(path)).stdout.strip().splitlines()[-1])


def twin_source(dags: list[dict[str, Any]], *, keep_python_tasks: bool = True) -> str:
    """A DAG file with the same DAGs, task ids and dependencies, built from EmptyOperator.

    :param dags: the shape read from the parsed file.
    :param keep_python_tasks: keep ``@task`` functions as (empty) ``@task`` functions, so that the
        cost of Airflow's own decorator is on both sides; every other task becomes an EmptyOperator.
    """
    python_tasks = any(item.get("python_task") for dag in dags for item in dag["tasks"])
    lines = [
        "from __future__ import annotations",
        "",
        "import pendulum",
        "from airflow.providers.standard.operators.empty import EmptyOperator",
        # Only a twin with @task functions names `task`: importing it loads Airflow's decorators.
        "from airflow.sdk import DAG, task"
        if keep_python_tasks and python_tasks
        else "from airflow.sdk import DAG",
        "",
    ]
    for index, dag in enumerate(dags):
        lines.append(
            f"with DAG(dag_id={dag['dag_id'] + '_twin'!r}, schedule={dag['schedule']!r}, "
            "start_date=pendulum.datetime(2025, 1, 1, tz='Europe/Paris'), catchup=False) "
            f"as dag_{index}:"
        )
        ids = {item["task_id"]: f"t{index}_{number}" for number, item in enumerate(dag["tasks"])}
        for item in dag["tasks"]:
            variable, task_id = ids[item["task_id"]], item["task_id"]
            if keep_python_tasks and item.get("python_task"):
                lines += [
                    f"    @task(task_id={task_id!r})",
                    f"    def {variable}_function() -> None:",
                    "        pass",
                    f"    {variable} = {variable}_function()",
                ]
            else:
                lines.append(f"    {variable} = EmptyOperator(task_id={task_id!r})")
        for item in dag["tasks"]:
            for upstream in item["upstream"]:
                lines.append(f"    {ids[upstream]} >> {ids[item['task_id']]}")
        lines.append("")
    return "\n".join(lines)


def dag_parse_cases(path: Path, reps: int) -> list[Record]:
    """Parse ``path`` vs its twins, each in a fresh interpreter, as the DAG processor does.

    Two twins: the target's keeps ``@task`` functions as ``@task`` (the work Airflow's decorator does
    is not the provider's), the report-only one makes every task an EmptyOperator.
    """
    target = Target(1.10)
    name = f"DAG file parse ({path.name})"
    strict_name = f"DAG file parse ({path.name}) vs all-EmptyOperator twin"
    missing = [module for module in STANDIN_NEEDS if importlib.util.find_spec(module) is None]
    if path == STANDIN_DAG and missing:
        reason = f"{', '.join(missing)} not written yet; the stand-in DAG needs them"
        return [skipped(name, 0, target, reason), skipped(strict_name, 0, REPORT, reason)]
    first = _parse(path)
    tasks = sum(len(dag["tasks"]) for dag in first["dags"])
    if not tasks:
        reason = f"{path} defines no DAG"
        return [skipped(name, 0, target, reason), skipped(strict_name, 0, REPORT, reason)]
    with tempfile.TemporaryDirectory() as folder:
        twin = Path(folder) / f"{path.stem}_twin.py"
        twin.write_text(twin_source(first["dags"]))
        strict = Path(folder) / f"{path.stem}_empty_twin.py"
        strict.write_text(twin_source(first["dags"], keep_python_tasks=False))
        for warm in (twin, strict):
            _parse(warm)  # fills the bytecode cache (the first parse of ``path`` did it for ours)
        ours = baseline = strict_baseline = float("inf")
        for _ in range(reps):
            ours = min(ours, _parse(path)["seconds"])
            baseline = min(baseline, _parse(twin)["seconds"])
            strict_baseline = min(strict_baseline, _parse(strict)["seconds"])
    where = "stand-in DAG of the same shape (benchmarks/standin_dag.py)" if path == STANDIN_DAG else str(path)
    python_tasks = sum(bool(item.get("python_task")) for dag in first["dags"] for item in dag["tasks"])
    how = (
        f"fresh interpreter each time, min of {reps}, airflow.* imports the file names pre-imported as the "
        "DAG processor does, then the file's own execution timed (importing our modules is part of it)"
    )
    return [
        record(
            name,
            tasks,
            ours,
            baseline,
            target,
            note=f"{where}, {tasks} tasks, vs a twin with the same DAG ids, task ids and dependencies: "
            f"every provider task an EmptyOperator, the {python_tasks} @task function(s) kept as empty "
            f"@task functions; {how}",
        ),
        record(
            strict_name,
            tasks,
            ours,
            strict_baseline,
            REPORT,
            note="the same, against a twin where every task, @task ones included, is an EmptyOperator "
            "(the issue's literal baseline: it also charges us the import of Airflow's @task decorator)",
        ),
    ]
