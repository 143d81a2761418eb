"""Start-up cases, each run in fresh interpreters: the import cost of the provider and DAG file parsing."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import os
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.harness import NO_BASELINE, REPORT, Record, Target, last_json, record, run_child, skipped

if TYPE_CHECKING:
    import subprocess

ROOT = Path(__file__).resolve().parent.parent
OPERATORS = "airflow_provider_sms.operators.sms"
HOOK = "airflow_provider_sms.hooks.sms"
BASELINE_MODULE = "airflow.sdk"
# The difference of two fresh interpreters' imports moves with the machine's load more than the
# provider weighs: reported, and the target is on the provider's own modules (OWN_IMPORT_MS).
IMPORT_OVERHEAD_MS = 50.0
OWN_IMPORT_MS = 15.0
PROVIDER = "airflow_provider_sms"
EXAMPLE_DAG = ROOT / "dags_examples" / "sms_weekly_campaign.py"
# The parse cases' baselines.
STAND_INS = (
    "the same file, the provider's classes replaced by EmptyOperator stand-ins holding the same templated "
    "values (same DAGs)"
)
LITERAL_TWIN = "a generated twin: the same DAG and task ids, every task an EmptyOperator, no params"
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

# What Airflow's DAG processor does for one file: its manager has loaded the processor and frozen the
# collector's heap (gc.freeze; Airflow 3.0's manager does not, and its children's full collections are
# left out here) before it starts parsing; it pre-imports the airflow.* modules the file names, then a
# forked child runs the processor's own `_parse_file`: the file's execution (importing this provider's
# modules is part of it) and the serialization of its DAGs. Only that call is timed.
# With a JSON map of stand-ins as second argument ({module: {name: [kind, payload]}}: an "operator"
# with its templated fields, a "notifier", or a constant "value" the file uses as it is) and the
# templated values of the provider's tasks as third ({dag_id: {task_id: {field: value}}}, as their
# serialization wrote them), the provider's modules are replaced, before timing, by modules whose
# classes are Airflow's EmptyOperator (or a no-op notifier) taking the same arguments and holding the
# same templated values: the same file then builds the same DAG out of Airflow's own classes, Airflow
# serializes the same templated fields on both sides (it reads its configuration for each, whoever's
# operator it is), and the difference is what the provider costs.
_PARSE_CHILD = """
import gc, importlib, json, sys, time, types
from pathlib import Path
import structlog
import airflow.dag_processing.manager
from airflow.dag_processing.processor import DagFileParseRequest, _parse_file
from airflow.utils.file import iter_airflow_imports
# Both sides load the stand-ins' classes before timing, so that neither gets a head start.
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import BaseNotifier
path = sys.argv[1]
gc.freeze()
for name in iter_airflow_imports(path):
    importlib.import_module(name)
if len(sys.argv) > 2:

    templated = json.loads(sys.argv[3])

    class StandInOperator(EmptyOperator):
        def __init__(self, *, task_id, **kwargs):
            super().__init__(task_id=task_id)
            # What the provider's task holds in its templated fields: what the file gives (XComArgs
            # included, so the dependencies they make are the same), else what its serialization wrote.
            held = templated.get(self.dag_id, {}).get(self.task_id, {})
            for field in self.template_fields:
                if field in kwargs or field in held:
                    setattr(self, field, kwargs.get(field, held.get(field)))

    class StandInNotifier(BaseNotifier):
        def __init__(self, *args, **kwargs):
            super().__init__()

        def notify(self, context):
            pass

    kinds = {"operator": StandInOperator, "notifier": StandInNotifier}
    # The real top-level package (light): Airflow 3.0 loads the providers' entry points
    # (airflow_provider_sms:get_provider_info) while a DAG file is parsed.
    import airflow_provider_sms
    for module_name, names in json.loads(sys.argv[2]).items():
        parts = module_name.split(".")
        for depth in range(1, len(parts)):
            sys.modules.setdefault(".".join(parts[:depth]), types.ModuleType(".".join(parts[:depth])))
        module = types.ModuleType(module_name)
        for name, (kind, payload) in names.items():
            if kind == "value":
                setattr(module, name, payload)
            elif payload:
                setattr(module, name, type(name, (kinds[kind],), {"template_fields": tuple(payload)}))
            else:
                setattr(module, name, kinds[kind])
        sys.modules[module_name] = module
# The request's fields differ between Airflow 3 releases (3.0 has a requests_fd, later ones a bundle_name).
fields = {"file": path, "bundle_path": Path(path).parent, "bundle_name": "bench", "requests_fd": 0}
request = DagFileParseRequest(
    **{key: value for key, value in fields.items() if key in DagFileParseRequest.model_fields}
)
log = structlog.get_logger()
start = time.perf_counter()
result = _parse_file(request, log)
elapsed = time.perf_counter() - start
if result.import_errors:
    sys.exit(f"{path} does not parse: {result.import_errors}")
shape = []
for serialized in sorted(result.serialized_dags, key=lambda dag: dag.dag_id):
    dag = serialized.data["dag"]
    tasks = [task["__var"] for task in dag["tasks"]]
    templated = {
        task["task_id"]: {field: task[field] for field in task.get("template_fields", ()) if field in task}
        for task in tasks
    }
    timetable = dag["timetable"].get("__var") or {}
    upstream = {task["task_id"]: [] for task in tasks}
    for task in tasks:
        for downstream in task.get("downstream_task_ids") or ():
            upstream[downstream].append(task["task_id"])
    shape.append(
        {
            "dag_id": serialized.dag_id,
            "schedule": timetable.get("expression"),
            "tasks": [
                {"task_id": task["task_id"], "upstream": sorted(upstream[task["task_id"]])} for task in tasks
            ],
            "templated": templated,
        }
    )
print(json.dumps({"seconds": elapsed, "dags": shape}))
"""


def _child(
    code: str, *args: str, flags: tuple[str, ...] = (), airflow_home: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    if airflow_home:
        env["AIRFLOW_HOME"] = airflow_home
    return run_child([*flags, "-c", code, *args], env, CHILD_TIMEOUT)


def _import_seconds(module: str) -> float:
    return float(_child(_IMPORT_CHILD.format(module=module)).stdout.strip().splitlines()[-1])


def import_case(reps: int) -> Record:
    """``import <our operators module>`` vs ``import airflow.sdk``, each in a fresh interpreter."""
    module = OPERATORS if importlib.util.find_spec(OPERATORS) else HOOK
    name = f"import cost ({module})"
    _import_seconds(module)  # warm-up: fills the bytecode cache
    ours = baseline = float("inf")
    for _ in range(reps):
        ours = min(ours, _import_seconds(module) * 1000)
        baseline = min(baseline, _import_seconds(BASELINE_MODULE) * 1000)
    note = (
        f"fresh interpreter each time, min of {reps}: `import {module}` (which imports airflow.sdk "
        f"itself) vs `import {BASELINE_MODULE}` alone; reported: the difference of two totals moves "
        f"with the machine's load (the target is on the provider's own modules, next case)"
    )
    if module != OPERATORS:
        note += f"; {OPERATORS} does not exist yet, so the hook module is measured"
    overhead = ours - baseline
    note += f"; overhead {overhead:.0f} ms"
    if overhead > IMPORT_OVERHEAD_MS:
        note += "; heaviest imports added (self time): " + ", ".join(
            f"{package} {ms:.0f} ms" for package, ms in added_imports(module)[:6]
        )
    return record(
        name, 1, ours, baseline, REPORT, baseline_name=f"import {BASELINE_MODULE} alone", unit="ms", note=note
    )


def own_import_case(reps: int) -> Record:
    """Self time of the provider's own modules in ``python -X importtime -c 'import <operators>'``.

    Each module's self time excludes the modules it imports, so the sum is what the provider's code
    costs to load, whatever Airflow and the machine add around it: the min of ``reps`` interpreters.
    """
    module = OPERATORS
    _importtime(f"import {module}")  # warm-up: fills the bytecode cache
    best = float("inf")
    modules: list[tuple[str, int]] = []
    for _ in range(reps):
        own = [(name, self_us) for name, self_us in _importtime(f"import {module}") if _is_ours(name)]
        total = sum(self_us for _, self_us in own) / 1000
        if total < best:
            best, modules = total, own
    heaviest = ", ".join(
        f"{name} {self_us / 1000:.1f}" for name, self_us in sorted(modules, key=lambda m: -m[1])
    )
    return record(
        f"import self time of the provider's modules ({module})",
        len(modules),
        best,
        None,
        Target(OWN_IMPORT_MS, kind="bound"),
        baseline_name=NO_BASELINE,
        unit="ms",
        note=f"sum of the self time (`python -X importtime`) of the {len(modules)} {PROVIDER} modules that "
        f"`import {module}` loads, fresh interpreter each time, min of {reps}; by module (ms): {heaviest}",
    )


def _is_ours(name: str) -> bool:
    return name == PROVIDER or name.startswith(PROVIDER + ".")


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


# What stands in for the provider's names, by module: each name's kind and its payload (see _PARSE_CHILD).
StandInMap = dict[str, dict[str, tuple[str, Any]]]
# The map and the templated values the stand-ins hold ({dag_id: {task_id: {field: value}}}).
StandIns = tuple[StandInMap, dict[str, Any]]


def stand_ins(path: Path) -> StandInMap:
    """What the DAG file imports from this provider, by module: each name an operator (with the class's
    templated fields: a stand-in for it holds the same), a notifier, or a constant used as it is.

    Read from the file's ``from airflow_provider_sms... import`` statements; any other name (e.g.
    ``SmsHook`` used in a ``@task``) cannot be stood in for, and is refused: the comparison would not
    be of the same DAG.
    """
    from airflow.providers.common.compat.sdk import BaseNotifier, BaseOperator

    found: StandInMap = defaultdict(dict)
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith("airflow_provider_sms"):
            continue
        module = importlib.import_module(node.module or "")
        for alias in node.names:
            value = getattr(module, alias.name)
            name = alias.asname or alias.name
            if isinstance(value, type) and issubclass(value, BaseOperator):
                found[module.__name__][name] = ("operator", list(value.template_fields))
            elif isinstance(value, type) and issubclass(value, BaseNotifier):
                found[module.__name__][name] = ("notifier", [])
            elif isinstance(value, (str, int, float, bool)):
                found[module.__name__][name] = ("value", value)
            else:
                what = f"{node.module}.{alias.name}"
                raise ValueError(f"{path}: cannot stand in for {what} (not a task class or a constant)")
    return dict(found)


def _parse(path: Path, airflow_home: str, stand_in: StandIns | None = None) -> dict[str, Any]:
    """One parse in a fresh child; ``stand_in``: the stand-ins' map and the templated values they hold."""
    args = (str(path), *map(json.dumps, stand_in)) if stand_in is not None else (str(path),)
    return last_json(_child(_PARSE_CHILD, *args, airflow_home=airflow_home).stdout)


def twin_source(dags: list[dict[str, Any]]) -> str:
    """A DAG file with the same DAG ids, task ids and dependencies, every task an EmptyOperator.

    :param dags: the shape read from the parsed file.
    """
    lines = [
        "from __future__ import annotations",
        "",
        "import pendulum",
        "from airflow.providers.standard.operators.empty import EmptyOperator",
        "from airflow.sdk import DAG",
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
            lines.append(f"    {ids[item['task_id']]} = EmptyOperator(task_id={item['task_id']!r})")
        for item in dag["tasks"]:
            for upstream in item["upstream"]:
                lines.append(f"    {ids[upstream]} >> {ids[item['task_id']]}")
        lines.append("")
    return "\n".join(lines)


def dag_parse_cases(path: Path, reps: int) -> list[Record]:
    """Parse ``path`` vs its baselines, each in a fresh interpreter, as the DAG processor does.

    Timed: the processor's own parse of one file (the file's execution and the serialization of its
    DAGs) in a process prepared as the processor's manager prepares it. Target: the same file with
    this provider's classes replaced by Airflow's EmptyOperator holding the same templated values (same
    DAG, same params, same ``@task`` functions, the same templated fields for Airflow to serialize): the
    difference is the provider's imports, task construction and serialization. Report
    only: a generated file with the same DAG ids, task ids and dependencies, every task an
    EmptyOperator and no params (the literal baseline, which also charges us the file's own DAG-level
    features).
    """
    target = Target(1.10)
    name = f"DAG file parse ({path.name})"
    literal_name = f"DAG file parse ({path.name}) vs generated all-EmptyOperator twin"
    with tempfile.TemporaryDirectory() as folder:
        # A throwaway AIRFLOW_HOME: the processor reads its configuration, never the user's.
        home = str(Path(folder) / "airflow")
        first = _parse(path, home)
        tasks = sum(len(dag["tasks"]) for dag in first["dags"])
        if not tasks:
            reason = f"{path} defines no DAG"
            return [
                skipped(name, 0, target, reason, baseline_name=STAND_INS),
                skipped(literal_name, 0, REPORT, reason, baseline_name=LITERAL_TWIN),
            ]
        replaced = stand_ins(path)
        stand_in = (replaced, {dag["dag_id"]: dag["templated"] for dag in first["dags"]})
        if _parse(path, home, stand_in)["dags"] != first["dags"]:
            raise RuntimeError(f"{path}: the stand-in parse does not build the same DAGs")
        twin = Path(folder) / f"{path.stem}_twin.py"
        twin.write_text(twin_source(first["dags"]))
        _parse(twin, home)  # fills the bytecode cache (the first parse of ``path`` did it for ours)
        ours = baseline = literal = float("inf")
        for _ in range(reps):
            ours = min(ours, _parse(path, home)["seconds"])
            baseline = min(baseline, _parse(path, home, stand_in)["seconds"])
            literal = min(literal, _parse(twin, home)["seconds"])
    classes = ", ".join(
        sorted(name for names in replaced.values() for name, (kind, _) in names.items() if kind != "value")
    )
    how = (
        f"fresh interpreter each time, min of {reps}, prepared as the DAG processor's manager prepares one "
        "(processor loaded, collector's heap frozen, the airflow.* imports the file names pre-imported), "
        "then the processor's own parse of the file timed: its execution (importing our modules is part "
        "of it) and the serialization of its DAGs"
    )
    return [
        record(
            name,
            tasks,
            ours,
            baseline,
            target,
            baseline_name=STAND_INS,
            note=f"{path}, {tasks} tasks, vs the same file with {classes} replaced by EmptyOperator "
            f"stand-ins taking the same arguments and holding the same templated values (checked to build "
            f"the same DAGs, templated values included); {how}",
        ),
        record(
            literal_name,
            tasks,
            ours,
            literal,
            REPORT,
            baseline_name=LITERAL_TWIN,
            note="the same, against a generated file with the same DAG ids, task ids and dependencies "
            "where every task (@task ones included) is an EmptyOperator and the DAG has no params",
        ),
    ]
