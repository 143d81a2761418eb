"""The two connection forms agree: ``conn-fields`` (Airflow 3.2+) and the WTForms widgets (before 3.2).

Both are read through what Airflow calls (``get_provider_info()`` and the hook's class methods). The
widgets are built with WTForms when it is installed (Airflow before 3.2 with the FAB provider), and
with stand-ins that record the same arguments everywhere else.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

import airflow_provider_sms
from airflow_provider_sms.hooks.sms import SmsHook


class _Unbound:
    """What a WTForms field class returns outside a form: its class and arguments, unbound."""

    def __init__(self, field_class: type, *args: Any, **kwargs: Any) -> None:
        self.field_class, self.args, self.kwargs = field_class, args, kwargs


class _Field:
    def __new__(cls, *args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
        return _Unbound(cls, *args, **kwargs)


class BooleanField(_Field):
    pass


class StringField(_Field):
    pass


class AnyOf:
    def __init__(self, values: list[str]) -> None:
        self.values = values


def _stand_ins() -> dict[str, types.ModuleType]:
    modules = {
        "wtforms": {"BooleanField": BooleanField, "StringField": StringField},
        "wtforms.validators": {"AnyOf": AnyOf, "Optional": lambda: "optional"},
        "flask_appbuilder": {},
        "flask_appbuilder.fieldwidgets": {"BS3TextFieldWidget": lambda: "text"},
        "flask_babel": {"lazy_gettext": str},
    }
    made = {}
    for name, attributes in modules.items():
        module = types.ModuleType(name)
        module.__dict__.update(attributes)
        made[name] = module
    return made


@pytest.fixture(params=["wtforms", "stand-ins"])
def widgets(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The hook's widgets, built with WTForms (skipped where it is missing) or with stand-ins."""
    if request.param == "wtforms":
        pytest.importorskip("flask_appbuilder")
        pytest.importorskip("wtforms")
    else:
        for name, module in _stand_ins().items():
            monkeypatch.setitem(sys.modules, name, module)
    return SmsHook.get_connection_form_widgets()


def _connection_type() -> dict[str, Any]:
    (conn_type,) = airflow_provider_sms.get_provider_info()["connection-types"]
    return conn_type


def _as_conn_field(widget: Any) -> dict[str, Any]:
    """A widget read back in the shape of a ``conn-fields`` entry (text fields hold their default as text)."""
    boolean = widget.field_class.__name__ == "BooleanField"
    entry: dict[str, Any] = {"label": str(widget.args[0])}
    if "description" in widget.kwargs:
        entry["description"] = widget.kwargs["description"]
    choices = [v.values for v in widget.kwargs.get("validators", []) if type(v).__name__ == "AnyOf"]
    entry["boolean"] = boolean
    entry["default"] = widget.kwargs.get("default")
    entry["enum"] = list(choices[0]) if choices else None
    return entry


def _expected(field: dict[str, Any]) -> dict[str, Any]:
    schema = field["schema"]
    boolean = schema["type"][0] == "boolean"
    default = schema.get("default")
    entry = {key: field[key] for key in ("label", "description") if key in field}
    entry["boolean"] = boolean
    entry["default"] = default if boolean or default is None else str(default)
    entry["enum"] = schema.get("enum")
    return entry


def test_the_widgets_and_the_conn_fields_have_the_same_fields_labels_defaults_and_choices(widgets):
    conn_fields = _connection_type()["conn-fields"]

    assert list(widgets) == list(conn_fields)
    assert {name: _as_conn_field(w) for name, w in widgets.items()} == {
        name: _expected(field) for name, field in conn_fields.items()
    }


def test_both_forms_hide_relabel_and_fill_the_same_standard_fields():
    declared = _connection_type()["ui-field-behaviour"]
    behaviour = SmsHook.get_ui_field_behaviour()

    assert behaviour["hidden_fields"] == declared["hidden-fields"] == ["login", "schema", "port"]
    assert behaviour["relabeling"] == declared["relabeling"]
    assert behaviour["placeholders"] == declared["placeholders"]


def test_the_raw_extra_stays_shown_for_the_extras_without_a_field():
    """``verify`` as a CA bundle path and the delivery-report batch options have no field of their own."""
    assert "extra" not in _connection_type()["ui-field-behaviour"]["hidden-fields"]
    assert "extra" not in SmsHook.get_ui_field_behaviour()["hidden_fields"]
