"""The sandbox's side of the wire: request bodies as the service reads them."""

from __future__ import annotations

import pytest

from airflow_provider_sms.exceptions import SmsApiError
from airflow_provider_sms.sandbox import wire


@pytest.mark.parametrize(
    ("body", "fmt", "status"),
    [
        (b"{not json", "json", -6),
        (b"<sms><message>", "xml", -2),
        (b"", "json", -6),
        (b'{"sms": 1}', "json", -6),
    ],
)
def test_malformed_request_bodies_map_to_the_service_statuses(body, fmt, status):
    with pytest.raises(SmsApiError) as info:
        wire.decode_request(body, fmt)
    assert info.value.status == status


def test_a_doctype_in_a_request_is_refused_as_malformed():
    body = b'<!DOCTYPE sms [<!ENTITY x "y">]><sms><message><text>&x;</text></message></sms>'
    with pytest.raises(SmsApiError, match="unsafe") as info:
        wire.decode_request(body, "xml")
    assert info.value.status == -2
