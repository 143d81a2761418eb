"""Provider registration, the connection form declarations and the connection itself."""

from __future__ import annotations

import importlib
import json

import pytest

import airflow_provider_sms
from airflow_provider_sms.exceptions import SmsValidationError
from airflow_provider_sms.hooks.sms import SmsHook
from tests.compat import FORM_FROM_CONN_FIELDS

from .conftest import BASE_URL, TOKEN


def test_provider_info_has_the_keys_airflow_expects():
    info = airflow_provider_sms.get_provider_info()

    assert info["package-name"] == "airflow-provider-sms"
    assert {"name", "description", "versions", "integrations", "connection-types"} <= info.keys()
    (conn_type,) = info["connection-types"]
    assert conn_type["connection-type"] == "sms"
    module, _, cls = conn_type["hook-class-name"].rpartition(".")
    assert getattr(importlib.import_module(module), cls) is SmsHook
    assert set(conn_type["conn-fields"]) == {
        "format",
        "timeout",
        "default_sender",
        "verify",
        "dlr_webhook_id",
        "dlr_allowed_callers",
        "dlr_max_body",
        "dlr_api_url",
    }
    assert conn_type["conn-fields"]["format"]["schema"]["enum"] == ["json", "xml"]
    behaviour = conn_type["ui-field-behaviour"]
    assert behaviour["relabeling"] == {"host": "Base URL", "password": "Access token"}
    assert {"login", "schema", "port"} <= set(behaviour["hidden-fields"])


def test_every_module_named_in_provider_info_imports():
    info = airflow_provider_sms.get_provider_info()
    modules = [
        m
        for kind in ("hooks", "operators", "sensors", "triggers")
        for e in info[kind]
        for m in e["python-modules"]
    ]
    for module in modules:
        importlib.import_module(module)
    for path in [
        *info["notifications"],
        *info["db-managers"],
        *(plugin["plugin-class"] for plugin in info["plugins"]),
    ]:
        module, _, name = path.rpartition(".")
        assert hasattr(importlib.import_module(module), name)


def test_airflow_providers_manager_knows_the_provider_and_connection_type():
    from airflow.providers_manager import ProvidersManager

    assert "airflow-provider-sms" in ProvidersManager().providers
    try:  # Airflow >= 3.2 resolves hooks in the Task SDK's runtime manager
        from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime as HookManager
    except ImportError:  # pragma: no cover - Airflow 3.0/3.1
        HookManager = ProvidersManager
    hook_info = HookManager().hooks["sms"]
    assert hook_info is not None
    assert hook_info.hook_class_name == "airflow_provider_sms.hooks.sms.SmsHook"
    assert hook_info.connection_type == "sms"


def test_hook_ui_field_behaviour_matches_provider_info():
    behaviour = SmsHook.get_ui_field_behaviour()
    declared = airflow_provider_sms.get_provider_info()["connection-types"][0]["ui-field-behaviour"]
    assert behaviour["relabeling"] == declared["relabeling"]
    assert set(behaviour["hidden_fields"]) <= set(declared["hidden-fields"])
    assert behaviour["placeholders"] == declared["placeholders"]


def test_connection_from_json_env_var(monkeypatch):
    extra = {"format": "xml", "timeout": "12.5", "default_sender": "Shop", "verify": "false"}
    monkeypatch.setenv(
        "AIRFLOW_CONN_SMS_DEFAULT",
        json.dumps({"conn_type": "sms", "host": BASE_URL + "/", "password": TOKEN, "extra": extra}),
    )

    settings = SmsHook().settings

    assert settings.base_url == BASE_URL
    assert (settings.format, settings.timeout, settings.default_sender, settings.verify) == (
        "xml",
        12.5,
        "Shop",
        False,
    )
    assert settings.token == TOKEN


def test_connection_from_uri_env_var_builds_base_url_with_scheme_and_port(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SMS_OTHER", f"sms://:{TOKEN}@sms.test:8443/https?format=json")

    settings = SmsHook("sms_other").settings

    assert settings.base_url == "https://sms.test:8443"


def test_format_argument_overrides_the_connection(monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_SMS_DEFAULT", json.dumps({"conn_type": "sms", "host": BASE_URL, "password": TOKEN})
    )
    hook = SmsHook(format="xml")
    assert hook.format == "xml"
    assert hook.session.headers["Accept"] == "application/xml"
    with pytest.raises(ValueError, match="format must be 'json' or 'xml'"):
        SmsHook(format="yaml")


@pytest.mark.parametrize(
    ("conn", "match"),
    [
        ({"host": BASE_URL}, "password"),
        ({"password": TOKEN}, "host"),
        ({"host": BASE_URL, "password": TOKEN, "extra": {"format": "csv"}}, "format"),
        ({"host": BASE_URL, "password": TOKEN, "extra": {"timeout": "-1"}}, "timeout"),
    ],
)
def test_bad_connection_is_a_clear_error(monkeypatch, conn, match):
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", json.dumps({"conn_type": "sms", **conn}))
    with pytest.raises(SmsValidationError, match=match) as info:
        _ = SmsHook().settings
    assert "sms_default" in str(info.value)


def test_test_connection_success(make_hook, requests_mock, fmt):
    hook = make_hook(fmt)
    body = (
        {"json": {"status": 1, "message": "OK", "list": [], "totalRecords": 4}}
        if fmt == "json"
        else {
            "text": "<response><status>1</status><message>OK</message>"
            "<totalRecords>4</totalRecords></response>"
        }
    )
    requests_mock.get(f"{BASE_URL}/npai", **body)

    ok, message = hook.test_connection()

    assert ok is True
    assert "access token accepted" in message
    assert "4 NPAI entries" in message
    assert requests_mock.last_request.qs == {"start": ["0"], "length": ["1"]}


def test_test_connection_wrong_token(make_hook, requests_mock):
    hook = make_hook()
    requests_mock.get(f"{BASE_URL}/npai", status_code=401, json={"status": -1, "message": "Invalid token"})

    ok, message = hook.test_connection()

    assert ok is False
    assert "rejected the access token" in message


def test_test_connection_unreachable(make_hook, requests_mock):
    from .test_hook_errors import refused

    hook = make_hook()
    requests_mock.get(f"{BASE_URL}/npai", exc=refused())

    ok, message = hook.test_connection()

    assert ok is False
    assert "Could not reach the service" in message
    assert requests_mock.call_count == 1  # the Test button does not wait through retries


def test_airflow_ui_form_metadata_for_the_sms_connection_type():
    """What Airflow's own UI service builds for the connection form (labels, hidden fields, extras)."""
    from airflow.api_fastapi.core_api.services.ui.connections import HookMetaService

    (meta,) = [hook for hook in HookMetaService.hook_meta_data() if hook.connection_type == "sms"]
    form = meta.model_dump()

    standard = form["standard_fields"]
    assert (standard["host"]["title"], standard["host"]["hidden"]) == ("Base URL", False)
    assert standard["host"]["placeholder"].startswith("https://")
    assert (standard["password"]["title"], standard["password"]["hidden"]) == ("Access token", False)
    assert all(standard[name]["hidden"] for name in ("login", "port", "url_schema"))
    extras = {
        name: (field["schema"].get("title"), field["value"]) for name, field in form["extra_fields"].items()
    }
    assert extras == {
        "format": ("Wire format", "json"),
        # Before 3.2 the form comes from get_connection_form_widgets: a text field (the hook reads "30").
        "timeout": ("Timeout (seconds)", 30 if FORM_FROM_CONN_FIELDS else "30"),
        "default_sender": ("Default sender", None),
        "verify": ("Verify TLS certificate", True),
        "dlr_webhook_id": ("DLR webhook id", None),
        "dlr_allowed_callers": ("DLR callers allowed", None),
        "dlr_max_body": ("DLR largest body (bytes)", None),
        "dlr_api_url": ("API server URL (for the delivery-reports sensor)", None),
    }
    if FORM_FROM_CONN_FIELDS:  # WTForms widgets have no choices in the form's schema
        assert form["extra_fields"]["format"]["schema"]["enum"] == ["json", "xml"]
