"""Property-based tests (issue 9, item 3), with hypothesis.

- Every model of :mod:`airflow_provider_sms.models` survives encode -> decode in JSON and in XML,
  with the wire's own functions in both directions (the client's encoders in the codec and the
  sandbox's request decoder; the sandbox's response encoder and the client's decoders).
- The sandbox's figures always add up: ``total == sent + sum(filtered counts)`` for any recipient set
  (valid, invalid, duplicated, blacklisted, NPAI, not-allowed, flooded, over the country limit), for
  simulations and sends; over HTTP (fewer examples) and on the state directly (more).

Runs are reproducible (``derandomize=True``, no example database written); deadlines are off
where HTTP is involved.
"""

from __future__ import annotations

import string
from datetime import datetime
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

import pytest
import requests
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from airflow_provider_sms import codec
from airflow_provider_sms.models import (
    FILTER_FIELDS,
    CampaignResult,
    ListRef,
    Message,
    NpaiEntry,
    NpaiList,
    Recipient,
    Webhook,
    WebhookResponse,
)
from airflow_provider_sms.sandbox import wire
from airflow_provider_sms.sandbox.state import DEFAULT_SEEDS, SandboxConfig, SandboxState
from airflow_provider_sms.sandbox.wire import CampaignRequest
from airflow_provider_sms.short_urls import SHORT_MARKER

if TYPE_CHECKING:
    from airflow_provider_sms.sandbox.server import SandboxServer

FORMATS = ("json", "xml")
# Reproducible in CI: the same examples every run, nothing written to .hypothesis/.
CODEC = settings(max_examples=250, derandomize=True, database=None, deadline=None)
STATE = settings(max_examples=300, derandomize=True, database=None, deadline=None)
HTTP = settings(
    max_examples=100,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# ------------------------------------------------------------------------------------ strategies

# Characters XML 1.0 cannot carry (Message refuses them) and lone surrogates (no UTF-8 body can).
_UNSENDABLE = "".join(map(chr, [*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0xFFFE, 0xFFFF]))
any_char = st.characters(blacklist_categories=("Cs",), blacklist_characters=_UNSENDABLE)
# The hard cases, as whole pieces, so that they show up far more often than by chance.
FRAGMENTS = [
    "]]>",
    "]]]]>",
    "<![CDATA[",
    "&",
    "&amp;",
    "<",
    ">",
    '"',
    "'",
    "\r\n",
    "\r",
    "\t",
    "😀",
    "👩\u200d👩\u200d👧\u200d👦",
    "🏳️\u200d🌈",
    "🇫🇷",
    "🇺🇦",
    "مرحبا",
    "שלום",
    "\u200f",
    "\u202e",
    "e\u0301",
    "\u0351\u0352",
    "\x7f",
    "\x85",
    "\ufeff",
    "\u2028",
    "null",
    "\\u0041",
    "€",
    "\U0010fffd",
]
hard_text = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(any_char, max_size=8)), max_size=12).map(
    "".join
)
# Text as a user may write it: anything sendable but blank (refused), and no stray short-URL marker.
sms_text = (
    st.one_of(hard_text, st.text(any_char, max_size=200))
    .filter(lambda text: text.strip() != "")
    .filter(lambda text: SHORT_MARKER not in text)
)
# Strings of the service's answers: never blank (XML writes "" and None alike, see below).
answer_text = st.text(any_char, min_size=1, max_size=40).filter(lambda text: text.strip() != "")
numbers = st.from_regex(r"[1-9][0-9]{7,14}", fullmatch=True)
gsmsmsids = st.one_of(st.none(), st.text(any_char, max_size=30))
senders = st.one_of(
    st.none(),
    st.from_regex(r"[A-Za-z0-9 ]{1,11}", fullmatch=True).filter(lambda text: text.strip() != ""),
    st.from_regex(r"[0-9]{1,15}", fullmatch=True),
)
_url_char = st.characters(
    blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp", "Cn"), blacklist_characters="\ufeff"
)
hosts = st.one_of(
    st.from_regex(r"[a-z0-9]{1,12}(\.[a-z0-9]{1,12}){0,2}\.[a-z]{2,6}", fullmatch=True),
    st.sampled_from(["bücher.example", "例え.テスト", "xn--bcher-kva.example", "127.0.0.1:8080"]),
)
links = st.builds(
    lambda scheme, host, path, query, fragment: f"{scheme}://{host}/{path}{query}{fragment}",
    st.sampled_from(["http", "https"]),
    hosts,
    st.text(_url_char, max_size=20),
    st.one_of(
        st.just(""),
        st.lists(
            st.tuples(st.text(_url_char, min_size=1, max_size=6), st.text(_url_char, max_size=6)), max_size=4
        ).map(lambda pairs: "?" + "&".join(f"{key}={value}" for key, value in pairs)),
    ),
    st.one_of(st.just(""), st.text(_url_char, max_size=10).map(lambda text: "#" + text)),
)
_ZONES = [ZoneInfo(name) for name in ("UTC", "Europe/Paris", "America/New_York", "Asia/Kolkata")]
# Delays in the future, in any zone; from January 1st two years ahead, so that the examples are the
# same all year long and none ages into the past.
delays = st.one_of(
    st.none(),
    st.datetimes(
        min_value=datetime(datetime.now().year + 2, 1, 1),
        max_value=datetime(2045, 12, 31),
        timezones=st.sampled_from(_ZONES),
        allow_imaginary=False,
    ).map(lambda when: when.replace(microsecond=0)),
)


@st.composite
def messages(draw: st.DrawFn) -> Message:
    """A valid Message: text with one marker per link, optional pushtype, sender and delay."""
    link_list = draw(st.lists(links, max_size=3))
    text = draw(sms_text)
    for _ in link_list:
        text += draw(st.sampled_from([" ", "", "\n"])) + SHORT_MARKER
    return Message.model_validate(
        {
            "text": text,
            "pushtype": draw(st.sampled_from([None, "alert", "marketing"])),
            "sender": draw(senders),
            "delay": draw(delays),
            "links": link_list,
        }
    )


recipients = st.lists(
    st.one_of(numbers, st.builds(Recipient, value=numbers, gsmsmsid=gsmsmsids)), min_size=1, max_size=20
)
list_refs = st.lists(
    st.builds(ListRef, value=st.integers(min_value=0, max_value=2**53)), min_size=1, max_size=10
)
counts = st.integers(min_value=0, max_value=10**9)
tickets = st.one_of(st.none(), st.integers(min_value=1, max_value=10**12).map(str))
campaign_results = st.builds(
    CampaignResult,
    status=st.just(1),
    message=st.one_of(st.just("OK"), answer_text),
    ticket=tickets,
    cost=counts,
    credits=st.integers(min_value=-(10**6), max_value=10**9),
    total=counts,
    sent=counts,
    **{name: counts for name in FILTER_FIELDS},
)
webhooks = st.builds(
    Webhook,
    webhook_id=st.one_of(st.integers(min_value=1, max_value=10**9).map(str), answer_text),
    type=st.sampled_from(["DLR", "MO", "STOP", "CLICKER", "BALANCE_ALERT"]),
    url=links,
    status=st.sampled_from(["live", "paused", "disabled"]),
    signature=st.one_of(st.none(), answer_text),
    last_http_code=st.one_of(st.none(), st.integers(min_value=0, max_value=599)),
)
paris_dates = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2045, 12, 31)).map(
    lambda when: when.strftime("%Y-%m-%d %H:%M:%S")
)
npai_entries = st.builds(
    NpaiEntry,
    id=st.integers(min_value=1, max_value=10**9).map(str),
    destination=numbers,
    date=paris_dates,
    info1=st.one_of(st.none(), answer_text),
    info2=st.one_of(st.none(), answer_text),
    info3=st.one_of(st.none(), answer_text),
    info4=st.one_of(st.none(), answer_text),
    # Its content is not documented: strings (XML cannot tell 7 from "7", so no numbers here).
    user_information=st.lists(answer_text, max_size=3),
    campaign_id=st.one_of(st.none(), st.integers(min_value=1, max_value=10**12)),
    # null when no batch; "null" as a value would read back as no batch in XML.
    batch_id=st.one_of(st.none(), answer_text.filter(lambda text: text != "null")),
)
npai_lists = st.builds(
    NpaiList,
    status=st.just(1),
    message=st.just("OK"),
    entries=st.lists(npai_entries, max_size=5),
    total_records=st.one_of(st.none(), counts),
    total_display_records=st.one_of(st.none(), counts),
)


# -------------------------------------------------------------------------- codec round trips


@CODEC
@given(message=messages(), to=recipients, fmt=st.sampled_from(FORMATS))
def test_send_request_round_trip(message: Message, to: list[str | Recipient], fmt: str) -> None:
    """Proves: a /send body (Message, Recipients with and without gsmsmsid) decodes, service side,
    to the same models."""
    request = wire.decode_request(codec.encode_send(message, to, fmt), fmt)

    assert Message.model_validate(request.message) == message
    expected = [item if isinstance(item, Recipient) else Recipient(value=item) for item in to]
    assert [Recipient.model_validate(item) for item in request.recipients] == expected


@CODEC
@given(message=messages(), refs=list_refs, fmt=st.sampled_from(FORMATS))
def test_lists_request_round_trip(message: Message, refs: list[ListRef], fmt: str) -> None:
    """Proves: a /send/lists body (Message, ListRefs) decodes, service side, to the same models."""
    request = wire.decode_request(codec.encode_lists(message, refs, fmt), fmt)

    assert Message.model_validate(request.message) == message
    assert [ListRef.model_validate({"value": value}) for value in request.lists] == refs


@CODEC
@given(result=campaign_results, fmt=st.sampled_from(FORMATS))
def test_campaign_result_round_trip(result: CampaignResult, fmt: str) -> None:
    """Proves: a campaign result the sandbox encodes is what the client decodes."""
    assert codec.decode_campaign_result(wire.encode_response(result, fmt), fmt) == result


@CODEC
@given(webhook=webhooks, fmt=st.sampled_from(FORMATS))
def test_webhook_round_trip(webhook: Webhook, fmt: str) -> None:
    """Proves: a webhook record (any link as its url) survives the GET /webhook/:id envelope."""
    envelope = WebhookResponse(status=1, message="OK", webhook=webhook)
    assert codec.decode_webhook(wire.encode_response(envelope, fmt), fmt) == webhook


@CODEC
@given(npai=npai_lists, fmt=st.sampled_from(FORMATS))
def test_npai_list_round_trip(npai: NpaiList, fmt: str) -> None:
    """Proves: NPAI lists (zero, one or many entries; null batch_id; empty user_information) survive."""
    assert codec.decode_npai(wire.encode_response(npai, fmt), fmt) == npai


@CODEC
@given(
    sender=st.from_regex(r"[A-Za-z0-9 ]{1,11}|[0-9]{1,15}", fullmatch=True),
    list_id=st.integers(min_value=-(10**6), max_value=10**6),
    fmt=st.sampled_from(FORMATS),
)
def test_what_validation_accepts_the_wire_carries(sender: str, list_id: int, fmt: str) -> None:
    """Proves two fixes: a value is either refused before any request or carried unchanged, in both
    formats. A blank sender (XML dropped it, JSON sent spaces) and a negative list id (accepted as
    an int, refused as the text XML carries) are now refused."""
    try:
        message = Message(text="Hi", sender=sender)
    except ValueError:
        assert not sender.strip()
    else:
        request = wire.decode_request(codec.encode_send(message, ["33612345678"], fmt), fmt)
        assert Message.model_validate(request.message).sender == sender
    try:
        ref = ListRef(value=list_id)
    except ValueError:
        assert list_id < 0
        with pytest.raises(ValueError, match="list id must be an integer"):
            ListRef(value=str(list_id))
    else:
        request = wire.decode_request(codec.encode_lists(Message(text="Hi"), [ref], fmt), fmt)
        assert [ListRef.model_validate({"value": value}) for value in request.lists] == [ref]


@pytest.mark.parametrize("fmt", FORMATS)
def test_blank_info_fields_read_back_as_empty_text_in_both_formats(fmt: str) -> None:
    """XML writes "" as an empty element, which carries no text: the NPAI info fields are text, so an
    empty element reads back as "" there too, as in JSON (and a null as "")."""
    entry = NpaiEntry(id="1", destination="33612345678", date="2030-01-01 10:00:00", info1="", info2=None)  # type: ignore[arg-type]
    decoded = codec.decode_npai(
        wire.encode_response(NpaiList(status=1, message="OK", list=[entry]), fmt), fmt
    )

    assert [decoded.entries[0].info1, decoded.entries[0].info2] == ["", ""]


# --------------------------------------------------------------------- sandbox figures invariant

BLACKLISTED = sorted(DEFAULT_SEEDS.blacklist)
SEEDED_NPAI = [entry["destination"] for entry in DEFAULT_SEEDS.npai]
valid_fr = st.from_regex(r"336[0-9]{8}", fullmatch=True)
# Belgium and Switzerland: 11 digits; the UK: 12; Germany has no fixed length here (8-15).
valid_other = st.one_of(
    st.from_regex(r"(32|41)[1-9][0-9]{7}", fullmatch=True),
    st.from_regex(r"44[1-9][0-9]{8}", fullmatch=True),
    st.from_regex(r"49[1-9][0-9]{5,11}", fullmatch=True),
)
unreachable = st.from_regex(r"337000[0-9]{5}", fullmatch=True)
not_allowed = st.from_regex(r"(86|81|7|55)[0-9]{9}", fullmatch=True)
invalid = st.one_of(
    st.from_regex(r"336[0-9]{9}", fullmatch=True),  # French length is 11 digits
    st.from_regex(r"0[0-9]{9}", fullmatch=True),
    st.from_regex(r"33[a-z][0-9]{8}", fullmatch=True),
    st.sampled_from(["", " ", "+33612345678", "33 6 12 34 56 78", "1234567"]),
    st.text(string.printable.strip(), max_size=16),
)
numbers_pool = st.one_of(
    valid_fr,
    valid_other,
    unreachable,
    not_allowed,
    invalid,
    st.sampled_from(BLACKLISTED),
    st.sampled_from(SEEDED_NPAI),
)


@st.composite
def recipient_sets(draw: st.DrawFn, max_size: int = 30) -> list[str]:
    """A recipient set mixing every kind of number, with duplicates drawn from the set itself."""
    base = draw(st.lists(numbers_pool, min_size=1, max_size=max_size))
    copies = draw(st.lists(st.sampled_from(base), max_size=len(base)))
    order = draw(st.permutations(base + copies))
    return list(order)


def assert_figures_add_up(result: CampaignResult, recipients_given: int) -> None:
    """The invariant; each filter that counted something is an event (``--hypothesis-show-statistics``
    shows how often every filter took part)."""
    for name in FILTER_FIELDS:
        if getattr(result, name):
            event(f"{name} counted")
    filtered = sum(getattr(result, name) for name in FILTER_FIELDS)
    assert result.total == recipients_given
    assert result.total == result.sent + filtered, result
    assert min(result.sent, *(getattr(result, name) for name in FILTER_FIELDS)) >= 0


@pytest.fixture(scope="module")
def busy_state() -> SandboxState:
    """A sandbox state where anti-flood (1 message) and a country limit (FR: 5 a month) bite fast."""
    return SandboxState(SandboxConfig(flood_limit=1, country_limits={"33": 5, "44": 2}))


@st.composite
def campaign_sequences(draw: st.DrawFn) -> list[tuple[str, list[str]]]:
    """Up to five sends and simulations drawing on a shared pool of numbers, so that numbers come back
    from one campaign to the next (anti-flood, the country limit, numbers turned NPAI by a send)."""
    # Mostly good French numbers in the pool, mostly the pool in each campaign: repeats that get sent.
    pool = draw(st.lists(st.one_of(valid_fr, valid_fr, numbers_pool), min_size=1, max_size=6))
    from_pool = st.sampled_from(pool)
    sequence = []
    for _ in range(draw(st.integers(min_value=2, max_value=5))):
        path = draw(st.sampled_from(["/send", "/send", "/send/simulate"]))
        chosen = draw(st.lists(st.one_of(from_pool, from_pool, numbers_pool), min_size=2, max_size=12))
        sequence.append((path, chosen))
    return sequence


@STATE
@given(campaigns=campaign_sequences())
def test_figures_add_up_on_the_state(
    busy_state: SandboxState, campaigns: list[tuple[str, list[str]]]
) -> None:
    """Proves the invariant on the state directly, over sequences of campaigns so that anti-flood and
    the monthly country limit take part; sends also spend exactly their cost and record ``sent`` numbers."""
    busy_state.reset()
    for path, numbers_given in campaigns:
        credits_before = busy_state.credits
        request = CampaignRequest(message={"text": "Hi"}, recipients=[{"value": n} for n in numbers_given])
        result, record = busy_state.campaign(path, request)

        assert_figures_add_up(result, len(numbers_given))
        assert result.cost == result.sent  # a short GSM text: one credit per number sent
        if path == "/send":
            assert record is not None
            assert len(record["sent_to"]) == result.sent
            assert busy_state.credits == credits_before - result.cost
        else:
            assert record is None
            assert busy_state.credits == credits_before


@settings(STATE, max_examples=40)
@given(lists=st.lists(st.sampled_from(sorted(DEFAULT_SEEDS.lists)), min_size=1, max_size=4))
def test_figures_add_up_for_list_campaigns(busy_state: SandboxState, lists: list[int]) -> None:
    """Proves the invariant for list campaigns (lists overlap and hold blacklisted and NPAI numbers)."""
    busy_state.reset()
    expected = sum(len(DEFAULT_SEEDS.lists[list_id]) for list_id in lists)
    for path in ("/send/lists/simulate", "/send/lists"):
        result, _ = busy_state.campaign(path, CampaignRequest(message={"text": "Hi"}, lists=lists))
        assert_figures_add_up(result, expected)


@pytest.mark.integration
@HTTP
@given(
    numbers_given=recipient_sets(),
    path=st.sampled_from(["/send", "/send/simulate"]),
    fmt=st.sampled_from(FORMATS),
)
def test_figures_add_up_over_http(
    sms_sandbox_server: SandboxServer, numbers_given: list[str], path: str, fmt: str
) -> None:
    """Proves the invariant through the real server (raw bodies: the hook would refuse bad numbers
    before sending), and that a send records one campaign with ``sent`` numbers, a simulation none."""
    sms_sandbox_server.state.reset()
    body = codec.encode_send(Message(text="Hello"), numbers_given, fmt)
    headers = {
        "Authorization": f"Bearer {sms_sandbox_server.token}",
        "Content-Type": codec.CONTENT_TYPES[fmt],
        "Accept": codec.CONTENT_TYPES[fmt],
    }

    answer = requests.post(sms_sandbox_server.url + path, data=body, headers=headers, timeout=30)
    result = codec.decode_campaign_result(answer.content, fmt)

    assert_figures_add_up(result, len(numbers_given))
    campaigns: list[dict[str, Any]] = sms_sandbox_server.state.campaigns
    if path == "/send":
        assert len(campaigns) == 1
        assert len(campaigns[0]["sent_to"]) == result.sent
        assert result.ticket == campaigns[0]["ticket"]
    else:
        assert campaigns == []
        assert result.ticket is None
