"""Codec cases: encoding a /send body and decoding the NPAI list, against the standard library.

Our side always produces or returns exactly what the provider sends or gives a user; each case first
checks, on a small document, that both sides describe the same document, so that the comparison is
between two ways of doing the same work.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from typing import Any

import defusedxml.ElementTree as SafeET

from airflow_provider_sms import codec
from airflow_provider_sms.models import Message
from airflow_provider_sms.recipients import parse_recipients
from airflow_provider_sms.sandbox import wire
from benchmarks.harness import REPORT, Record, Target, best_of, record, traced_peak

MESSAGE = Message(
    text="Spring sale: 20% off this weekend only <-short->",
    pushtype="marketing",
    sender="Shop",
    links=["https://shop.example.com/spring"],
)
JSON_DUMPS = "json.dumps of the same {'value': number} dicts (built beforehand)"


def numbers(count: int) -> list[str]:
    """``count`` distinct French mobile numbers, international format, digits only."""
    return [f"336{index:08d}" for index in range(count)]


def _message_dict() -> dict[str, Any]:
    # What a user would put in the body by hand: the fields that are set, in the interface's order.
    return {
        "text": MESSAGE.text,
        "pushtype": MESSAGE.pushtype,
        "sender": MESSAGE.sender,
        "links": MESSAGE.links,
    }


def _json_baseline(gsm: list[dict[str, str]]) -> bytes:
    body = {"sms": {"message": _message_dict(), "recipients": {"gsm": gsm}}}
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def _xml_baseline(values: list[str]) -> bytes:
    root = ET.Element("sms")
    message = ET.SubElement(root, "message")
    for name, value in _message_dict().items():
        for item in value if isinstance(value, list) else [value]:
            ET.SubElement(message, name).text = item
    recipients = ET.SubElement(root, "recipients")
    for value in values:
        ET.SubElement(recipients, "gsm").text = value
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


def _check_same_document(fmt: codec.WireFormat, ours: bytes, baseline: bytes) -> None:
    # Both bodies, read back by the sandbox's decoder, must be the same request.
    if wire.decode_request(ours, fmt) != wire.decode_request(baseline, fmt):
        raise AssertionError(f"encode {fmt}: our body and the baseline's are not the same document")


def encode_cases(size: int, reps: int) -> list[Record]:
    """POST /send body for ``size`` numbers, JSON and XML, plus the whole path and peak memory."""
    sample = numbers(1000)
    _check_same_document(
        "json",
        codec.encode_send(MESSAGE, sample, "json"),
        _json_baseline([{"value": value} for value in sample]),
    )
    _check_same_document("xml", codec.encode_send(MESSAGE, sample, "xml"), _xml_baseline(sample))

    values = numbers(size)
    gsm = [{"value": value} for value in values]
    ours, baseline = best_of(
        lambda: codec.encode_send(MESSAGE, values, "json"), lambda: _json_baseline(gsm), reps=reps
    )
    rows = [
        record(
            "encode /send body, JSON",
            size,
            ours,
            baseline,
            Target(1.3),
            baseline_name=JSON_DUMPS,
            note="codec.encode_send from validated digit strings vs json.dumps of the same "
            "{'value': number} dicts (built beforehand, not timed)",
        )
    ]
    whole, baseline = best_of(
        lambda: codec.encode_send(MESSAGE, parse_recipients(values), "json"),
        lambda: _json_baseline(gsm),
        reps=reps,
    )
    rows.append(
        record(
            "validate + encode /send body, JSON",
            size,
            whole,
            baseline,
            REPORT,
            baseline_name=JSON_DUMPS,
            note="the hook's whole path: recipients.parse_recipients (checks every number) then "
            "codec.encode_send, vs the same json.dumps (which checks nothing)",
        )
    )
    ours_peak = traced_peak(lambda: codec.encode_send(MESSAGE, values, "json"))
    base_peak = traced_peak(lambda: _json_baseline(gsm))
    rows.append(
        record(
            "peak memory of the JSON encode",
            size,
            ours_peak,
            base_peak,
            Target(2.0),
            baseline_name=f"tracemalloc peak of {JSON_DUMPS}",
            unit="bytes",
            peak_memory=ours_peak,
            note="tracemalloc peak while encoding (the body included; the input list is not)",
        )
    )
    ours, baseline = best_of(
        lambda: codec.encode_send(MESSAGE, values, "xml"), lambda: _xml_baseline(values), reps=reps
    )
    rows.append(
        record(
            "encode /send body, XML",
            size,
            ours,
            baseline,
            Target(1.3),
            baseline_name="xml.etree.ElementTree build + tostring of the same document",
            note="codec.encode_send vs xml.etree.ElementTree build + tostring of the same document",
        )
    )
    return rows


def npai_body(count: int, fmt: codec.WireFormat) -> bytes:
    """A GET /npai answer of ``count`` entries, encoded as the sandbox encodes it."""
    entries = [
        {
            "id": str(100000 + index),
            "destination": f"336{index:08d}",
            "date": f"2025-0{1 + index % 9}-{1 + index % 28:02d} 1{index % 10}:0{index % 6}:00",
            "info1": f"customer-{index}",
            "info2": "",
            "info3": None,
            "info4": None,
            "user_information": [],
            "campaign_id": 5000 + index % 50,
            "batch_id": None if index % 2 else f"b{index % 7}",
        }
        for index in range(count)
    ]
    payload = {
        "status": 1,
        "message": "OK",
        "list": entries,
        "totalRecords": count,
        "totalDisplayRecords": count,
    }
    return wire.encode_response(payload, fmt)


def decode_cases(size: int, reps: int) -> list[Record]:
    """GET /npai answer of ``size`` entries, JSON and XML, decoded into a validated NpaiList."""
    rows = []
    body = npai_body(size, "json")
    if len(codec.decode_npai(body, "json").entries) != len(json.loads(body)["list"]):
        raise AssertionError("decode NPAI JSON: entries lost")
    ours, baseline = best_of(lambda: codec.decode_npai(body, "json"), lambda: json.loads(body), reps=reps)
    rows.append(
        record(
            "decode NPAI list, JSON",
            size,
            ours,
            baseline,
            Target(2.0),
            baseline_name="json.loads of the same answer",
            note="codec.decode_npai -> validated NpaiList vs json.loads (plain dicts, nothing checked)",
        )
    )
    body = npai_body(size, "xml")
    if len(codec.decode_npai(body, "xml").entries) != len(ET.fromstring(body).findall("list")):
        raise AssertionError("decode NPAI XML: entries lost")
    ours, baseline, defused = best_of(
        lambda: codec.decode_npai(body, "xml"),
        lambda: ET.fromstring(body),
        lambda: SafeET.fromstring(body),
        reps=reps,
    )
    rows.append(
        record(
            "decode NPAI list, XML",
            size,
            ours,
            baseline,
            Target(2.0),
            baseline_name="xml.etree.ElementTree.fromstring of the same answer",
            note="codec.decode_npai (DOCTYPE refused, tree built, converted and validated) vs a bare "
            "xml.etree.ElementTree.fromstring (C parser, no safety check, an Element tree only)",
        )
    )
    rows.append(
        record(
            "decode NPAI list, XML, vs defusedxml",
            size,
            ours,
            defused,
            REPORT,
            baseline_name="defusedxml.ElementTree.fromstring of the same answer",
            note="the same decode vs defusedxml.ElementTree.fromstring alone, the safe parse a user "
            "would pick (pure-Python parser)",
        )
    )
    return rows
