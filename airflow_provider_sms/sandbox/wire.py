"""The service's side of the wire, as the sandbox speaks it: read request bodies, write answers.

The shapes are the client's (:mod:`airflow_provider_sms.codec`): requests are read with its safe parser
and answers written with its XML rules, so one wire definition serves both sides.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from airflow_provider_sms import codec
from airflow_provider_sms.exceptions import SmsApiError


@dataclass
class CampaignRequest:
    """A request body as the service receives it, before the service's own checks.

    Numbers are kept as given: the service counts invalid ones rather than refusing the request.
    """

    message: dict[str, Any]
    recipients: list[dict[str, Any]] = field(default_factory=list)
    lists: list[Any] = field(default_factory=list)


def malformed_status(fmt: codec.WireFormat) -> int:
    """The service's status for an unreadable request body: -6 in JSON, -2 in XML."""
    return -6 if fmt == "json" else -2


def decode_request(body: bytes, fmt: codec.WireFormat) -> CampaignRequest:
    """Read a send or simulate body. Raises SmsApiError with status -6 (JSON) or -2 (XML) if malformed."""
    data = codec.parse_body(body, fmt, error_status=malformed_status(fmt), keep_root=True)
    sms = data.get("sms") if isinstance(data, dict) else None
    if not isinstance(sms, dict) or not isinstance(sms.get("message"), dict):
        raise SmsApiError(malformed_status(fmt), "body must hold an 'sms' object with a 'message'")
    message = dict(sms["message"])
    if fmt == "xml":
        message.setdefault("links", [])
    recipients_node = sms.get("recipients")
    gsm = recipients_node.get("gsm", []) if isinstance(recipients_node, dict) else []
    if isinstance(gsm, dict):
        gsm = [gsm]
    recipients = [item if isinstance(item, dict) else {"value": item} for item in gsm]
    lists = sms.get("lists", [])
    if not isinstance(lists, list):
        lists = [lists]
    return CampaignRequest(
        message=message,
        recipients=recipients,
        lists=[item.get("value") if isinstance(item, dict) else item for item in lists],
    )


def encode_response(data: BaseModel | Mapping[str, Any], fmt: codec.WireFormat) -> bytes:
    """Encode an answer of the service: JSON object, or XML rooted at ``response``."""
    payload = data.model_dump(by_alias=True) if isinstance(data, BaseModel) else dict(data)
    if fmt == "json":
        return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
    return (codec.XML_DECLARATION + _xml_element("response", payload)).encode()


def _xml_element(tag: str, value: Any) -> str:
    if isinstance(value, Mapping):
        inner = "".join(_xml_children(name, item) for name, item in value.items())
        return f"<{tag}>{inner}</{tag}>"
    if value is None:
        # The interface writes an absent batch_id as the text null; other absent values are empty.
        return f"<{tag}>null</{tag}>" if tag == "batch_id" else f"<{tag}/>"
    if isinstance(value, bool):
        value = int(value)
    return f"<{tag}>{codec.escape_text(str(value))}</{tag}>"


def _xml_children(name: str, value: Any) -> str:
    if isinstance(value, list):
        if name in codec.REPEATED_ELEMENTS:
            return "".join(_xml_element(name, item) for item in value)
        return f"<{name}>" + "".join(_xml_element("item", item) for item in value) + f"</{name}>"
    return _xml_element(name, value)
