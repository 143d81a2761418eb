"""The exact request and the decoded result of each of the six endpoints, in JSON and in XML."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from airflow_provider_sms.models import CampaignResult, NpaiList, Webhook

from .conftest import BASE_URL, TOKEN
from .samples import WEBHOOK, npai_entry

MESSAGE = {
    "text": "Soldes -20% <-short-> & <b>gras</b> ]]> fin",
    "pushtype": "marketing",
    "sender": "Boutique",
    "delay": "2031-06-01 10:00:00",
    "links": ["https://shop.example.com/?utm=sms&id=7"],
}

RESULT_JSON = {
    "status": 1,
    "message": "OK",
    "ticket": "14672468",
    "cost": 2,
    "credits": 642,
    "total": 3,
    "sent": 2,
    "blacklisted": 0,
    "duplicated": 0,
    "npai": 1,
    "invalid": 0,
    "not_allowed": 0,
    "flood": 0,
    "country_limit": 0,
}
RESULT_XML = (
    '<?xml version="1.0" encoding="UTF-8"?><response><status>1</status><message>OK</message>'
    "<ticket>14672468</ticket><cost>2</cost><credits>642</credits><total>3</total><sent>2</sent>"
    "<blacklisted>0</blacklisted><duplicated>0</duplicated><npai>1</npai><invalid>0</invalid>"
    "<not_allowed>0</not_allowed><flood>0</flood><country_limit>0</country_limit></response>"
)
NPAI_ENTRY = npai_entry("81", date="2026-10-25 02:30:00", campaign=14672468, info1="a")


def xml_tree(element: ET.Element) -> Any:
    """A structural view of an XML element (independent of the codec under test)."""
    children = [xml_tree(child) for child in element]
    return (element.tag, dict(element.attrib), (element.text or "").strip() if not children else "", children)


def parse_body(body: bytes, fmt: str) -> Any:
    return json.loads(body) if fmt == "json" else xml_tree(ET.fromstring(body))


def respond(fmt: str, json_body: dict[str, Any], xml_body: str) -> dict[str, Any]:
    if fmt == "json":
        return {"json": json_body}
    return {"text": xml_body, "headers": {"Content-Type": "application/xml"}}


def assert_headers(request: Any, fmt: str, with_body: bool) -> None:
    content_type = f"application/{fmt}"
    assert request.headers["Authorization"] == f"Bearer {TOKEN}"
    assert request.headers["Accept"] == content_type
    if with_body:
        assert request.headers["Content-Type"] == content_type


def expected_send_xml(recipients: list[tuple[str, dict[str, str]]]) -> Any:
    return (
        "sms",
        {},
        "",
        [
            (
                "message",
                {},
                "",
                [
                    ("text", {}, MESSAGE["text"], []),
                    ("pushtype", {}, "marketing", []),
                    ("sender", {}, "Boutique", []),
                    ("delay", {}, "2031-06-01 10:00:00", []),
                    ("links", {}, MESSAGE["links"][0], []),
                ],
            ),
            ("recipients", {}, "", [("gsm", attrib, number, []) for number, attrib in recipients]),
        ],
    )


@pytest.mark.parametrize("path", ["/send", "/send/simulate"])
def test_send_and_simulate_request_and_result(make_hook, requests_mock, fmt, path):
    hook = make_hook(fmt)
    requests_mock.post(BASE_URL + path, **respond(fmt, RESULT_JSON, RESULT_XML))
    recipients = ["+33 6 12 34 56 78", {"value": "33611111111", "gsmsmsid": "crm-42"}]

    call = hook.send if path == "/send" else hook.simulate
    result = call(MESSAGE, recipients)

    assert result == CampaignResult(**RESULT_JSON)
    assert isinstance(result.cost, int)
    (request,) = requests_mock.request_history
    assert request.method == "POST"
    assert request.path == path
    assert_headers(request, fmt, with_body=True)
    # gsmsmsid links a recipient to its delivery report: it only exists on a real send.
    gsmsmsid = {"gsmsmsid": "crm-42"} if path == "/send" else {}
    if fmt == "json":
        assert parse_body(request.body, fmt) == {
            "sms": {
                "message": MESSAGE,
                "recipients": {"gsm": [{"value": "33612345678"}, {**gsmsmsid, "value": "33611111111"}]},
            }
        }
    else:
        assert b"<![CDATA[" in request.body
        assert parse_body(request.body, fmt) == expected_send_xml(
            [("33612345678", {}), ("33611111111", gsmsmsid)]
        )


@pytest.mark.parametrize("path", ["/send/lists", "/send/lists/simulate"])
def test_lists_request_and_result(make_hook, requests_mock, fmt, path):
    hook = make_hook(fmt)
    answer = {
        key: value
        for key, value in RESULT_JSON.items()
        if not (path.endswith("simulate") and key == "ticket")
    }
    answer_xml = RESULT_XML if path == "/send/lists" else RESULT_XML.replace("<ticket>14672468</ticket>", "")
    requests_mock.post(BASE_URL + path, **respond(fmt, answer, answer_xml))

    call = hook.send_lists if path == "/send/lists" else hook.simulate_lists
    result = call(MESSAGE, [12, "13", {"value": 14}])

    assert result == CampaignResult(**answer)
    assert result.ticket == (None if path.endswith("simulate") else "14672468")
    (request,) = requests_mock.request_history
    assert (request.method, request.path) == ("POST", path)
    assert_headers(request, fmt, with_body=True)
    if fmt == "json":
        assert parse_body(request.body, fmt) == {
            "sms": {"message": MESSAGE, "lists": [{"value": 12}, {"value": 13}, {"value": 14}]}
        }
    else:
        tree = parse_body(request.body, fmt)
        assert tree[0] == "sms"
        assert [child[0] for child in tree[3]] == ["message", "lists", "lists", "lists"]
        assert [child[3] for child in tree[3][1:]] == [[("value", {}, str(n), [])] for n in (12, 13, 14)]


def test_get_webhook(make_hook, requests_mock, fmt):
    hook = make_hook(fmt)
    xml = (
        '<?xml version="1.0" encoding="UTF-8"?><response><status>1</status><message>OK</message><webhook>'
        "<webhook_id>1839</webhook_id><type>DLR</type><url>https://crm.example.com/dlr</url>"
        "<status>live</status><signature>f0e1d2</signature><last_http_code>200</last_http_code>"
        "</webhook></response>"
    )
    requests_mock.get(
        f"{BASE_URL}/webhook/1839", **respond(fmt, {"status": 1, "message": "OK", "webhook": WEBHOOK}, xml)
    )

    webhook = hook.get_webhook(1839)

    assert webhook == Webhook(**WEBHOOK)
    assert webhook.last_http_code == 200
    (request,) = requests_mock.request_history
    assert (request.method, request.path, request.body) == ("GET", "/webhook/1839", None)
    assert_headers(request, fmt, with_body=False)


def npai_xml(entries: str, total: int) -> str:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><response><status>1</status><message>OK</message>{entries}'
        f"<totalRecords>{total}</totalRecords><totalDisplayRecords>{total}</totalDisplayRecords></response>"
    )


ENTRY_XML = (
    "<list><id>81</id><destination>33612345678</destination><date>2026-10-25 02:30:00</date>"
    "<info1>a</info1><info2></info2><info3/><info4/><user_information/>"
    "<campaign_id>14672468</campaign_id><batch_id>null</batch_id></list>"
)


@pytest.mark.parametrize("count", [0, 1, 2])
def test_get_npai_zero_one_and_many_entries(make_hook, requests_mock, fmt, count):
    hook = make_hook(fmt)
    entries = [{**NPAI_ENTRY, "id": str(81 + i)} for i in range(count)]
    xml_entries = "".join(ENTRY_XML.replace("<id>81</id>", f"<id>{81 + i}</id>") for i in range(count))
    body = {
        "status": 1,
        "message": "OK",
        "list": entries,
        "totalRecords": count,
        "totalDisplayRecords": count,
    }
    requests_mock.get(f"{BASE_URL}/npai", **respond(fmt, body, npai_xml(xml_entries, count)))

    npai = hook.get_npai()

    assert isinstance(npai, NpaiList)
    assert [entry.id for entry in npai.entries] == [str(81 + i) for i in range(count)]
    assert npai.total_records == count
    for entry in npai.entries:
        assert entry.batch_id is None
        assert entry.user_information == []
        assert entry.campaign_id == 14672468
        assert entry.destination == "33612345678"
    (request,) = requests_mock.request_history
    assert (request.method, request.path) == ("GET", "/npai")
    assert request.qs == {"start": ["0"], "length": ["1000"]}
    assert_headers(request, fmt, with_body=False)


def test_get_npai_follows_pages(make_hook, requests_mock):
    hook = make_hook("json")
    total = 2500
    pages = []
    for start in (0, 1000, 2000):
        entries = [{**NPAI_ENTRY, "id": str(i)} for i in range(start, min(start + 1000, total))]
        pages.append({"json": {"status": 1, "message": "OK", "list": entries, "totalRecords": total}})
    requests_mock.get(f"{BASE_URL}/npai", pages)

    npai = hook.get_npai()

    assert len(npai.entries) == total
    assert len({entry.id for entry in npai.entries}) == total
    assert [r.qs["start"] for r in requests_mock.request_history] == [["0"], ["1000"], ["2000"]]


def test_get_npai_stops_when_the_service_ignores_paging(make_hook, requests_mock, caplog):
    hook = make_hook("json")
    entries = [{**NPAI_ENTRY, "id": str(i)} for i in range(3)]
    requests_mock.get(
        f"{BASE_URL}/npai", json={"status": 1, "message": "OK", "list": entries, "totalRecords": 5}
    )

    npai = hook.get_npai()

    assert len(npai.entries) == 3
    assert requests_mock.call_count == 2
    assert "only 3 entries could be read" in caplog.text


def test_npai_entry_date_is_paris_time_and_overlap_is_first_occurrence(make_hook, requests_mock):
    hook = make_hook("json")
    body = {"status": 1, "message": "OK", "list": [NPAI_ENTRY], "totalRecords": 1}
    requests_mock.get(f"{BASE_URL}/npai", json=body)

    (entry,) = hook.get_npai().entries

    assert entry.paris_date.isoformat() == "2026-10-25T02:30:00+02:00"
