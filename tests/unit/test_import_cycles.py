"""No import cycle in the package or the benchmarks.

Every import counts: at the top of a module, inside a function and under ``TYPE_CHECKING`` alike, since
each is a dependency a reader has to hold in mind. A cycle fails this test with its modules in order.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("airflow_provider_sms", "benchmarks")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules_of(package: str) -> dict[str, Path]:
    return {module_name(path): path for path in sorted((ROOT / package).rglob("*.py"))}


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that the module ``name`` (at ``path``) imports anywhere in its body."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            # `from package import module` names the module; `from module import name` the module.
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {module for module in found if module in known and module != name}


def import_graph(package: str) -> dict[str, set[str]]:
    modules = modules_of(package)
    return {name: imported(name, path, set(modules)) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each in a stable order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle(package: str) -> None:
    assert cycles(import_graph(package)) == []


def test_a_cycle_is_found(tmp_path: Path) -> None:
    """The check itself: two modules that import each other, one of them inside a function."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    source = "def later():\n    from airflow_provider_sms.codec import encode\n"
    (tmp_path / "late.py").write_text(source)
    known = {"airflow_provider_sms.codec", "airflow_provider_sms.late"}
    assert imported("airflow_provider_sms.late", tmp_path / "late.py", known) == {
        "airflow_provider_sms.codec"
    }


def test_the_package_graph_is_read() -> None:
    """The graph is not empty: the hook imports the codec, the operators import the hook."""
    graph = import_graph("airflow_provider_sms")
    assert "airflow_provider_sms.codec" in graph["airflow_provider_sms.hooks.sms"]
    assert any("airflow_provider_sms.hooks.sms" in graph[name] for name in graph if ".operators." in name)
