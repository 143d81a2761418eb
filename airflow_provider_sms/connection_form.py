"""The ``sms`` connection form, defined once: its extra fields, labels and hidden standard fields.

Airflow 3.2 and later build the form from ``get_provider_info()``'s ``conn-fields``
(:func:`conn_fields`); before, from the hook's WTForms widgets (:func:`form_widgets`). Both are made
from :data:`EXTRA_FIELDS`, so the two forms cannot drift apart. The raw ``extra`` field stays shown:
some extras have no field of their own (``verify`` as a CA bundle path, ``dlr_event_max_reports``).
Imports nothing of the provider, and WTForms only when the widgets are asked for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

FieldType = Literal["string", "number", "integer", "boolean"]


@dataclass(frozen=True)
class ExtraField:
    """One field of the connection's extra in the form.

    :param name: the key in the extra.
    :param label: the field's label.
    :param type: its JSON-schema type; the older form holds every non-boolean as text.
    :param description: the help text under the field.
    :param default: the value a new connection starts with.
    :param choices: the only values allowed, when the field has a fixed set.
    """

    name: str
    label: str
    type: FieldType = "string"
    description: str | None = None
    default: str | float | bool | None = None
    choices: tuple[str, ...] = ()


EXTRA_FIELDS: tuple[ExtraField, ...] = (
    ExtraField(
        "format",
        "Wire format",
        description="json (default) or xml: the format of request and response bodies.",
        default="json",
        choices=("json", "xml"),
    ),
    ExtraField("timeout", "Timeout (seconds)", "number", "Read timeout of each request.", default=30),
    ExtraField(
        "default_sender",
        "Default sender",
        description="Sender used when a message sets none (up to 11 letters or digits).",
    ),
    ExtraField("verify", "Verify TLS certificate", "boolean", default=True),
    ExtraField(
        "dlr_webhook_id",
        "DLR webhook id",
        description="The service's DLR webhook whose reports the API server receives "
        "(leave empty to receive none).",
    ),
    ExtraField(
        "dlr_allowed_callers",
        "DLR callers allowed",
        description="Addresses or networks added to the service's own, comma-separated "
        "(e.g. 127.0.0.1); 'any' turns the check off.",
    ),
    ExtraField(
        "dlr_max_body",
        "DLR largest body (bytes)",
        "integer",
        "The largest delivery-report body read (default 16384, at least 512).",
    ),
    ExtraField(
        "dlr_api_url",
        "API server URL (for the delivery-reports sensor)",
        description="As workers and the triggerer reach it; default: [api] base_url.",
    ),
)
# Standard fields the service does not use.
HIDDEN_FIELDS: tuple[str, ...] = ("login", "schema", "port")
RELABELING: dict[str, str] = {"host": "Base URL", "password": "Access token"}
PLACEHOLDERS: dict[str, str] = {
    "host": "https://api.example-sms.com",
    "password": "access token (sent as Authorization: Bearer)",
}


def conn_fields() -> dict[str, dict[str, Any]]:
    """The ``conn-fields`` of ``get_provider_info()`` (the form of Airflow 3.2 and later)."""
    fields: dict[str, dict[str, Any]] = {}
    for extra in EXTRA_FIELDS:
        schema: dict[str, Any] = {"type": [extra.type, "null"]}
        if extra.default is not None:
            schema["default"] = extra.default
        if extra.choices:
            schema["enum"] = list(extra.choices)
        entry: dict[str, Any] = {"label": extra.label}
        if extra.description is not None:
            entry["description"] = extra.description
        fields[extra.name] = {**entry, "schema": schema}
    return fields


def ui_field_behaviour(*, hidden_key: str) -> dict[str, Any]:
    """The standard fields' behaviour: hidden ones, labels, placeholders.

    :param hidden_key: ``hidden-fields`` in ``get_provider_info()``, ``hidden_fields`` for the hook.
    """
    return {
        hidden_key: list(HIDDEN_FIELDS),
        "relabeling": dict(RELABELING),
        "placeholders": dict(PLACEHOLDERS),
    }


def form_widgets() -> dict[str, Any]:
    """The WTForms fields of the form before Airflow 3.2 (FAB installed): text fields hold strings."""
    from flask_appbuilder.fieldwidgets import BS3TextFieldWidget
    from flask_babel import lazy_gettext
    from wtforms import BooleanField, StringField
    from wtforms.validators import AnyOf, Optional

    widgets: dict[str, Any] = {}
    for extra in EXTRA_FIELDS:
        options: dict[str, Any] = {}
        if extra.description is not None:
            options["description"] = extra.description
        if extra.type == "boolean":
            widgets[extra.name] = BooleanField(lazy_gettext(extra.label), default=extra.default, **options)
            continue
        if extra.default is not None:
            options["default"] = str(extra.default)
        validators: list[Any] = [Optional()]
        if extra.choices:
            validators.append(AnyOf(list(extra.choices)))
        widgets[extra.name] = StringField(
            lazy_gettext(extra.label), widget=BS3TextFieldWidget(), validators=validators, **options
        )
    return widgets
