"""The client's wire: request bodies encoded, the service's answers and delivery reports decoded.

JSON and XML. The delivery report stays here because the provider is its reader: the receiver on the
API server decodes what the service posts, and its store keys a report by the report's encoding. The
service's side (requests read, answers written) is the sandbox's (:mod:`airflow_provider_sms.sandbox.wire`),
which reuses this module's parser and XML rules, so one wire definition serves both sides. XML is
parsed with defusedxml's rules: no DTD, no entity expansion, no external entities (see
:func:`_safe_fromstring`).
"""

from __future__ import annotations

import gc
import json
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any, Literal, TypeVar
from xml.etree.ElementTree import Element, ParseError, fromstring
from xml.parsers.expat import ExpatError, ParserCreate
from xml.sax.saxutils import escape, quoteattr

from defusedxml import DefusedXmlException, DTDForbidden
from pydantic import BaseModel, ValidationError

from airflow_provider_sms._validation import format_errors, join_errors, quoted
from airflow_provider_sms.exceptions import SmsApiError, SmsAuthError, SmsNotFoundError, SmsValidationError
from airflow_provider_sms.models import (
    ApiEnvelope,
    CampaignResult,
    DeliveryReport,
    ListRef,
    Message,
    NpaiList,
    Recipient,
    Webhook,
    WebhookResponse,
)
from airflow_provider_sms.phone_numbers import quoted_masked

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

WireFormat = Literal["json", "xml"]
FORMATS: tuple[str, ...] = ("json", "xml")
CONTENT_TYPES: dict[str, str] = {"json": "application/json", "xml": "application/xml"}
XML_DECLARATION = '<?xml version="1.0" encoding="UTF-8"?>'
# Elements that repeat on the wire: always decoded as lists, even when there is one or none.
REPEATED_ELEMENTS = frozenset({"list", "links", "gsm", "lists"})
# How much of an unreadable body an error quotes.
_QUOTED_BODY_BYTES = 200
_CR_ENTITY = {"\r": "&#13;"}

M = TypeVar("M", bound=BaseModel)


def check_format(value: object) -> WireFormat:
    """Return ``value`` as a wire format, or raise ValueError naming the allowed ones."""
    if value not in FORMATS:
        raise ValueError(f"format must be 'json' or 'xml', got {value!r}")
    return value  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------- requests


def _message_json(message: Message) -> dict[str, Any]:
    return message.model_dump(
        exclude_none=True, exclude_defaults=False, exclude={"links"} if not message.links else set()
    )


def _cdata(text: str) -> str:
    # "]]>" cannot appear inside one CDATA section: split it across two. A carriage return would be
    # turned into a line feed by any XML parser (end-of-line normalization, CDATA included), so it
    # goes between two sections as a character reference: XML then carries the same text as JSON.
    inner = text.replace("]]>", "]]]]><![CDATA[>").replace("\r", "]]>&#13;<![CDATA[")
    return "<![CDATA[" + inner + "]]>"


def escape_text(text: str) -> str:
    """Escape element text; ``\r`` as a character reference, which XML parsers keep (see ``_cdata``)."""
    return escape(text, _CR_ENTITY)


def _message_xml(message: Message) -> str:
    parts = ["<message>", "<text>", _cdata(message.text), "</text>"]
    for name in ("pushtype", "sender", "delay"):
        value = getattr(message, name)
        if value is not None:
            parts.append(f"<{name}>{escape_text(value)}</{name}>")
    parts.extend(f"<links>{escape_text(link)}</links>" for link in message.links)
    parts.append("</message>")
    return "".join(parts)


def _all_digits(recipients: Sequence[str | Recipient]) -> bool:
    """Whether every recipient is a string of ASCII digits: checked on them joined, in one scan."""
    try:
        digits = "".join(recipients)  # type: ignore[arg-type]
    except TypeError:  # a Recipient among them
        return False
    # An empty string among digits passes too, and needs no escaping either.
    return digits.isdigit() and digits.isascii()


def encode_send(message: Message, recipients: Sequence[str | Recipient], fmt: WireFormat) -> bytes:
    """Body of POST /send and /send/simulate.

    :param recipients: normalized numbers (digit strings) or :class:`Recipient` for those with a
        ``gsmsmsid``, as returned by :func:`airflow_provider_sms.recipients.parse_recipients`.
    """
    if fmt == "json":
        head = json.dumps({"message": _message_json(message)}, ensure_ascii=False, separators=(",", ":"))
        gsm = _json_gsm(recipients)
        return ('{"sms":' + head[:-1] + ',"recipients":{"gsm":[' + gsm + "]}}}").encode()
    return (
        XML_DECLARATION
        + "<sms>"
        + _message_xml(message)
        + "<recipients>"
        + _xml_gsm(recipients)
        + "</recipients></sms>"
    ).encode()


def _json_gsm(recipients: Sequence[str | Recipient]) -> str:
    # Validated numbers are ASCII digits and need no escaping: joining them is what makes a
    # million-number body cheap. Anything else goes through json.dumps.
    if _all_digits(recipients):
        return '{"value":"' + '"},{"value":"'.join(recipients) + '"}'  # type: ignore[arg-type]
    items = []
    for item in recipients:
        if isinstance(item, Recipient):
            entry = {"value": item.value}
            if item.gsmsmsid is not None:
                entry = {"gsmsmsid": item.gsmsmsid, "value": item.value}
            items.append(json.dumps(entry, ensure_ascii=False, separators=(",", ":")))
        else:
            items.append(json.dumps({"value": item}, separators=(",", ":")))
    return ",".join(items)


def _xml_gsm(recipients: Sequence[str | Recipient]) -> str:
    if _all_digits(recipients):
        return "<gsm>" + "</gsm><gsm>".join(recipients) + "</gsm>"  # type: ignore[arg-type]
    items = []
    for item in recipients:
        if isinstance(item, Recipient):
            attr = f" gsmsmsid={quoteattr(item.gsmsmsid)}" if item.gsmsmsid is not None else ""
            items.append(f"<gsm{attr}>{escape_text(item.value)}</gsm>")
        else:
            items.append(f"<gsm>{escape_text(item)}</gsm>")
    return "".join(items)


def encode_lists(message: Message, lists: Sequence[ListRef], fmt: WireFormat) -> bytes:
    """Body of POST /send/lists and /send/lists/simulate."""
    if fmt == "json":
        body = {"sms": {"message": _message_json(message), "lists": [{"value": ref.value} for ref in lists]}}
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    items = "".join(f"<lists><value>{ref.value}</value></lists>" for ref in lists)
    return (XML_DECLARATION + "<sms>" + _message_xml(message) + items + "</sms>").encode()


# --------------------------------------------------------------------------------------- responses


def decode_campaign_result(body: bytes, fmt: WireFormat, *, endpoint: str = "") -> CampaignResult:
    """Decode the answer of a send or a simulation."""
    return _decode(body, fmt, CampaignResult, endpoint)


def decode_webhook(body: bytes, fmt: WireFormat, *, endpoint: str = "") -> Webhook:
    """Decode the answer of GET /webhook/:id."""
    envelope = _decode(body, fmt, WebhookResponse, endpoint)
    if envelope.webhook is None:
        raise SmsApiError(
            envelope.status, "the answer has no 'webhook' record", body=quote_body(body), endpoint=endpoint
        )
    return envelope.webhook


def decode_npai(body: bytes, fmt: WireFormat, *, endpoint: str = "") -> NpaiList:
    """Decode the answer of GET /npai."""
    with _gc_paused():
        # Its entries are numbers: a shape error quotes them masked.
        return _decode(body, fmt, NpaiList, endpoint, quote=quoted_masked)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a long answer is turned into objects.

    A long NPAI list creates many containers, none of them in a cycle; each batch of them would
    trigger collections that walk the whole heap, for nothing. Reference counting still frees
    everything as usual.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def encode_delivery_report(report: DeliveryReport) -> bytes:
    """The body of the service's POST to a DLR webhook: one report, JSON (the only format it posts).

    The receiver's store keys a report by these bytes; the sandbox posts them.
    """
    return report.model_dump_json().encode()


def decode_delivery_report(body: bytes) -> DeliveryReport:
    """Read the body of one delivery report (JSON); a malformed or invalid one raises SmsValidationError.

    What a receiver of the service's DLR calls gets: the error names the field and the rule, so that
    it can answer the caller with a clear 4xx; a number it quotes is masked (the receiver logs the error
    and keeps it in its refusal counts).
    """
    try:
        return DeliveryReport.model_validate_json(body)
    except ValidationError as exc:
        errors = format_errors(exc, "report", quote=quoted_masked)
        raise SmsValidationError(join_errors(errors), errors) from None


def decode_envelope(body: bytes, fmt: WireFormat) -> ApiEnvelope:
    """Read only ``status``/``message``/``details`` of any answer; raises SmsApiError if unreadable."""
    data = parse_body(body, fmt)
    if not isinstance(data, dict):
        raise SmsApiError(None, f"the answer is not a {fmt.upper()} object", body=quote_body(body))
    try:
        return ApiEnvelope.model_validate(data)
    except ValidationError as exc:
        raise SmsApiError(
            None, f"unreadable status in the answer: {exc.errors()[0]['msg']}", body=quote_body(body)
        ) from None


def _decode(
    body: bytes, fmt: WireFormat, model: type[M], endpoint: str, *, quote: Callable[[object], str] = quoted
) -> M:
    if fmt == "json" and body:
        # Fast path: pydantic parses and validates in one pass; errors fall through to the slow path.
        try:
            result = model.model_validate_json(body)
            if getattr(result, "status", None) == 1:
                return result
        except ValidationError:
            pass
    data = parse_body(body, fmt, endpoint=endpoint)
    if not isinstance(data, dict):
        raise SmsApiError(
            None, f"the answer is not a {fmt.upper()} object", body=quote_body(body), endpoint=endpoint
        )
    raise_for_status(data, body=body, endpoint=endpoint)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = join_errors(format_errors(exc, quote=quote)[:5])
        raise SmsApiError(
            1,
            f"the answer does not have the documented shape ({problems})",
            body=quote_body(body),
            endpoint=endpoint,
        ) from None


def raise_for_status(
    data: Mapping[str, Any], *, body: bytes = b"", endpoint: str = "", http_status: int | None = None
) -> None:
    """Raise the matching SmsApiError unless the answer's ``status`` is 1."""
    status = data.get("status")
    if status is None:
        error = data.get("error") or data.get("message") or "no 'status' in the answer"
        raise SmsApiError(None, str(error), body=quote_body(body), endpoint=endpoint, http_status=http_status)
    try:
        code = int(status)
    except (TypeError, ValueError):
        raise SmsApiError(
            None, f"'status' is not an integer: {status!r}", body=quote_body(body), endpoint=endpoint
        ) from None
    if code == 1:
        return
    error_class = {-1: SmsAuthError, -5: SmsNotFoundError}.get(code, SmsApiError)
    raise error_class(
        code,
        str(data.get("message") or data.get("error") or "no message"),
        body=quote_body(body),
        details=data.get("details"),
        endpoint=endpoint,
        http_status=http_status,
    )


def quote_body(body: bytes) -> bytes:
    """The start of an unreadable ``body`` that an error quotes."""
    return body[:_QUOTED_BODY_BYTES]


def parse_body(
    body: bytes,
    fmt: WireFormat,
    *,
    endpoint: str = "",
    error_status: int | None = None,
    keep_root: bool = False,
) -> Any:
    """Parse a body into plain Python values; unreadable bodies raise SmsApiError, never a raw error.

    The sandbox reads request bodies with it too: the one safe parser of both sides.

    :param endpoint: the call answered, as errors name it.
    :param error_status: the ``status`` an unreadable body's error carries (None: the service's answer
        had none; the sandbox gives the service's status for a malformed request).
    :param keep_root: an XML document is read as ``{root tag: content}``, as a JSON request's outer
        object names its root; else as its root's content.
    """
    status = error_status
    if not body or not body.strip():
        raise SmsApiError(status, "empty body", endpoint=endpoint)
    # A hostile body nested thousands deep (``[[[[...`` or ``<a><a><a>...``) exhausts the recursion
    # of json.loads or of _xml_value: refused like any unreadable body, never a bare RecursionError
    # (on a send, that would hide that the campaign may have been created).
    too_deep = f"the body is nested too deeply to be an answer of the service; it starts with {body[:60]!r}"
    if fmt == "json":
        try:
            return json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise SmsApiError(
                status,
                f"the body is not valid JSON ({exc}); it starts with {body[:60]!r}",
                body=quote_body(body),
                endpoint=endpoint,
            ) from None
        except RecursionError:
            raise SmsApiError(status, too_deep, body=quote_body(body), endpoint=endpoint) from None
    try:
        root = _safe_fromstring(body)
    except DefusedXmlException as exc:
        raise SmsApiError(
            status,
            f"the XML body was refused as unsafe ({type(exc).__name__}: a DOCTYPE could expand "
            "entities or read external files, and no answer of the service has one)",
            body=quote_body(body),
            endpoint=endpoint,
        ) from None
    except (ParseError, ExpatError, ValueError) as exc:
        raise SmsApiError(
            status,
            f"the body is not valid XML ({exc}); it starts with {body[:60]!r}",
            body=quote_body(body),
            endpoint=endpoint,
        ) from None
    try:
        return {root.tag: _xml_value(root)} if keep_root else _xml_value(root)
    except RecursionError:
        raise SmsApiError(status, too_deep, body=quote_body(body), endpoint=endpoint) from None


class _PrologEnd(Exception):
    """Raised by :func:`_safe_fromstring`'s check when the root element starts: the prolog is clean."""


def _refuse_dtd(name: str, sysid: str | None, pubid: str | None, has_internal_subset: bool) -> None:
    raise DTDForbidden(name, sysid, pubid)


def _stop_at_root(name: str, attributes: dict[str, str]) -> None:
    raise _PrologEnd


def _safe_fromstring(body: bytes) -> Element:
    """Parse XML with defusedxml's ``forbid_dtd`` rule, at the speed of the C ElementTree parser.

    Entities can only be declared, and external ones referenced, in a DOCTYPE, which may only appear
    before the root element. So expat reads the prolog alone (stopping at the root's start tag) and
    refuses any DOCTYPE with defusedxml's :class:`DTDForbidden`; the document, known to carry no DTD,
    is then parsed by the C parser (defusedxml's own parser is the slower pure-Python one).
    """
    check = ParserCreate()
    check.StartDoctypeDeclHandler = _refuse_dtd
    check.StartElementHandler = _stop_at_root
    with suppress(_PrologEnd):
        check.Parse(body, True)
    return fromstring(body)


def _xml_value(element: Element) -> Any:
    if len(element) == 0:
        text = element.text
        if element.attrib:
            return {"value": text, **element.attrib}
        return text if text is None or text.strip() else None
    if element.tag == "user_information":
        return [_xml_value(child) for child in element]
    result: dict[str, Any] = {}
    for child in element:
        if len(child) or child.attrib:
            value = _xml_value(child)
        else:
            # A leaf without attributes (almost every element): inlined, as _xml_value would read it.
            text = child.text
            value = text if text and not text.isspace() else None
        if child.tag == "batch_id" and value == "null":
            value = None
        if child.tag in REPEATED_ELEMENTS:
            result.setdefault(child.tag, []).append(value)
        elif child.tag in result:
            existing = result[child.tag]
            result[child.tag] = [*existing, value] if isinstance(existing, list) else [existing, value]
        else:
            result[child.tag] = value
    if element.attrib:
        result.update(element.attrib)
    return result
