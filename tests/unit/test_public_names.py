"""The manual's list of public names (docs/index.md) says what the package exports, no more, no less.

Checked both ways: every name the page lists exists where it says; every module and class that
``get_provider_info()`` names, every hook, operator, sensor, trigger and notifier class of those modules,
every ``__all__`` of a public module, the connection type and the ``[sms]`` options are on the page.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import airflow_provider_sms
from airflow_provider_sms import DEFAULT_CONN_ID, get_provider_info

if TYPE_CHECKING:
    from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "airflow_provider_sms"
PAGE = REPO / "docs" / "index.md"
# What makes a class a component that DAG authors use (the base classes of the Task SDK and Airflow).
AIRFLOW_BASES = {"BaseHook", "BaseOperator", "BaseTrigger", "BaseNotifier"}
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def listed_names() -> dict[str, set[str]]:
    """The page's table: each module and the names in backticks in its row."""
    text = PAGE.read_text(encoding="utf-8")
    section = text[text.index("## The public names") :]
    table: dict[str, set[str]] = {}
    for row in re.findall(r"^\| `(airflow_provider_sms[\w.]*)` \|(.*)\|$", section, re.MULTILINE):
        module, cell = row
        names = set(re.findall(r"`([^`]+)`", cell))
        assert all(NAME.match(name) for name in names), f"{module}: only names go in backticks: {names}"
        assert module not in table, f"{module} has two rows"
        table[module] = names
    assert table, "no table of public names found in docs/index.md"
    return table


def provider_info_modules(info: dict[str, Any]) -> set[str]:
    """The modules of hooks, operators, sensors and triggers that ``get_provider_info()`` declares."""
    return {
        module
        for kind in ("hooks", "operators", "sensors", "triggers")
        for entry in info[kind]
        for module in entry["python-modules"]
    }


def provider_info_classes(info: dict[str, Any]) -> set[str]:
    """Every class that ``get_provider_info()`` names by its dotted path."""
    return {
        *info["notifications"],
        *info["extra-links"],
        *(plugin["plugin-class"] for plugin in info["plugins"]),
        *info["db-managers"],
        *(connection["hook-class-name"] for connection in info["connection-types"]),
    }


def components(module: ModuleType) -> set[str]:
    """The hook, operator, sensor, trigger and notifier classes defined in ``module`` that DAGs use.

    Bases that the module's own classes extend (e.g. the sensors' common base) are left out.
    """
    defined = [
        cls
        for name, cls in vars(module).items()
        if inspect.isclass(cls)
        and cls.__module__ == module.__name__
        and not name.startswith("_")
        and AIRFLOW_BASES & {base.__name__ for base in cls.__mro__}
    ]
    extended = {base for cls in defined for base in cls.__mro__[1:]}
    return {cls.__name__ for cls in defined if cls not in extended}


def public_modules_with_all() -> set[str]:
    """The modules outside private ones (``_name``) that declare ``__all__``, read without importing."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(REPO).with_suffix("").parts
        if any(part.startswith("_") and part != "__init__" for part in parts):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(
            isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign)
            and "__all__" in {getattr(target, "id", None) for target in _targets(node)}
            for node in tree.body
        ):
            found.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def _targets(node: ast.Assign | ast.AnnAssign | ast.AugAssign) -> list[ast.expr]:
    return node.targets if isinstance(node, ast.Assign) else [node.target]


def test_every_listed_name_exists_where_the_page_says() -> None:
    for module_name, names in listed_names().items():
        module = importlib.import_module(module_name)
        missing = {name for name in names if not hasattr(module, name)}
        assert not missing, f"docs/index.md lists {sorted(missing)} in {module_name}, which has none"


def test_what_get_provider_info_names_is_listed() -> None:
    info = get_provider_info()
    table = listed_names()
    for module_name in sorted(provider_info_modules(info)):
        assert module_name in table, f"docs/index.md does not list {module_name} (in get_provider_info())"
    for path in sorted(provider_info_classes(info)):
        module_name, _, name = path.rpartition(".")
        assert name in table.get(module_name, set()), f"docs/index.md does not list {path}"


@pytest.mark.parametrize(
    "module_name",
    sorted(
        {
            *provider_info_modules(get_provider_info()),
            *(path.rpartition(".")[0] for path in get_provider_info()["notifications"]),
        }
    ),
)
def test_every_component_class_is_listed(module_name: str) -> None:
    module = importlib.import_module(module_name)
    found = components(module)
    assert found, f"{module_name} defines no hook, operator, sensor, trigger or notifier"
    unlisted = found - listed_names().get(module_name, set())
    assert not unlisted, f"docs/index.md does not list {sorted(unlisted)} of {module_name}"


def test_every_public_all_is_listed_exactly() -> None:
    table = listed_names()
    modules = public_modules_with_all()
    assert "airflow_provider_sms.delivery_reports" in modules  # the scan finds packages' __init__
    for module_name in sorted(modules):
        exported = set(importlib.import_module(module_name).__all__)
        listed = table.get(module_name, set())
        assert listed == exported, (
            f"{module_name}.__all__: {sorted(exported)}; docs/index.md: {sorted(listed)}"
        )


def test_every_exception_is_listed() -> None:
    module = importlib.import_module("airflow_provider_sms.exceptions")
    defined = {
        name
        for name, cls in vars(module).items()
        if inspect.isclass(cls) and issubclass(cls, BaseException) and cls.__module__ == module.__name__
    }
    listed = listed_names()["airflow_provider_sms.exceptions"]
    assert defined == listed, f"exceptions.py defines {sorted(defined)}; docs/index.md lists {sorted(listed)}"


def test_the_connection_type_and_the_configuration_are_listed() -> None:
    info = get_provider_info()
    text = PAGE.read_text(encoding="utf-8")
    section = text[text.index("## The public names") :]
    connection = re.search(r"Connection type `(\w+)`, default connection id `(\w+)`", section)
    assert connection, "docs/index.md names no connection type"
    assert [connection[1]] == [entry["connection-type"] for entry in info["connection-types"]]
    assert connection[2] == DEFAULT_CONN_ID == airflow_provider_sms.DEFAULT_CONN_ID
    configuration = re.search(r"configuration section `\[(\w+)\]`, options ([^(]*)", section)
    assert configuration, "docs/index.md names no configuration section"
    options = set(re.findall(r"`(\w+)`", configuration[2]))
    assert {configuration[1]: options} == {
        section_name: set(content["options"]) for section_name, content in info["config"].items()
    }
