"""airflow_provider_sms._compat: the same result from common-compat and from the fallbacks for older releases.

The suite's lowest run (Python 3.10, common-compat 1.20) takes the fallbacks for real; these tests take
every path on whichever release is installed, by hiding what newer releases bring.
"""

from __future__ import annotations

import json
import sys
import types
from typing import Any

import pytest
from airflow.providers.common.compat.sdk import redact
from airflow.sdk import Connection

from airflow_provider_sms._compat import mask_secret
from airflow_provider_sms.exceptions import SmsValidationError
from airflow_provider_sms.hooks._transport import connection_extra, connection_settings
from tests.compat import secrets_masker

SECRET = "compat-secret-9d41c7e2"
EXTRA = {"format": "xml", "timeout": 7}


def hide(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    """Make ``from <module> import <name>`` fail for ``modules``, as on releases that lack the name."""
    for module in modules:
        monkeypatch.setitem(sys.modules, module, types.ModuleType(module))


@pytest.mark.parametrize(
    "hidden",
    [
        pytest.param((), id="common-compat"),
        # Then airflow.sdk.log (Airflow 3.1+) or, on Airflow 3.0, its secrets_masker module.
        pytest.param(("airflow.providers.common.compat.sdk",), id="airflow"),
    ],
)
def test_mask_secret_registers_the_secret_with_airflows_masker(monkeypatch, hidden):
    masker = secrets_masker()
    monkeypatch.setattr(masker, "patterns", set())
    monkeypatch.setattr(masker, "replacer", None)
    with monkeypatch.context() as hiding:
        hide(hiding, *hidden)
        mask_secret(SECRET)
    assert redact(f"token {SECRET} sent") == "token *** sent"


def real_connection(extra: str = json.dumps(EXTRA)) -> Connection:
    return Connection(
        conn_id="sms_compat", conn_type="sms", host="https://sms.test", password=SECRET, extra=extra
    )


class MaskedExtraConnection:
    """A connection whose extra may only be read as text: ``extra_dejson`` would go through the masker."""

    conn_type = "sms"
    host = "https://sms.test"
    password = SECRET
    schema = port = None
    extra = json.dumps(EXTRA)

    @property
    def extra_dejson(self) -> dict[str, Any]:
        raise AssertionError("extra_dejson hands every extra value to the secrets masker")

    async def aextra_dejson(self) -> dict[str, Any]:
        raise AssertionError("aextra_dejson hands every extra value to the secrets masker")


def test_the_extra_is_read_as_text_never_through_the_secrets_masker():
    """extra_dejson registers "json" (the format) with the masker, which warns that it is too short."""
    settings = connection_settings(MaskedExtraConnection(), conn_id="sms_compat")
    assert (settings.format, settings.timeout) == ("xml", 7.0)
    assert connection_extra(real_connection(), conn_id="sms_compat") == EXTRA
    assert connection_extra(real_connection(""), conn_id="sms_compat") == {}


@pytest.mark.parametrize("extra", ["{not json", "[1, 2]", '"json"'])
def test_an_extra_that_is_not_a_json_object_names_the_field(extra):
    with pytest.raises(SmsValidationError, match="connection 'sms_compat': extra is not a JSON object"):
        connection_extra(real_connection(extra), conn_id="sms_compat")
