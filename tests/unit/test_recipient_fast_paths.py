"""The bulk paths of a big send answer exactly as the one-by-one rules they stand in for.

A campaign's numbers are checked, cut from a file, written to the plan's file and encoded a batch at a
time (one scan of the batch instead of one step per number). Each property here compares a bulk path
with the per-item rule on inputs drawn to hit its edges: a newline inside an item, a non-ASCII digit, a
quoted cell spanning lines across a block of the file, a recipient with a ``gsmsmsid`` among numbers.
"""

from __future__ import annotations

import csv
import io
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_sms import codec
from airflow_provider_sms.exceptions import SmsValidationError
from airflow_provider_sms.models import Message, Recipient
from airflow_provider_sms.operators import _recipient_batches
from airflow_provider_sms.operators._recipient_batches import RecipientSource, _recipient
from airflow_provider_sms.phone_numbers import all_valid_numbers
from airflow_provider_sms.recipients import RejectedRecipients, parse_recipients

VALID = st.from_regex(r"[1-9][0-9]{7,14}", fullmatch=True)
# Near misses of a valid number: too short or long, a leading 0 or +, separators, a newline inside or
# around, non-ASCII digits, two numbers on two lines, nothing at all.
NEAR = st.one_of(
    st.from_regex(r"[0-9+ \n.\-]{0,17}", fullmatch=True),
    st.builds(lambda a, b: f"{a}\n{b}", VALID, VALID),
    st.builds(lambda a: a + "\n", VALID),
    st.builds(lambda a: "\n" + a, VALID),
    st.builds(lambda a: a.replace("3", "\uff13"), VALID),
)
ITEMS = st.lists(st.one_of(VALID, VALID, NEAR), max_size=12)


def one_by_one(items: list[str]) -> tuple[list[str | Recipient], dict[str, int]]:
    """What the per-item rule keeps and refuses: each item parsed alone."""
    kept: list[str | Recipient] = []
    rejected = RejectedRecipients()
    for index, item in enumerate(items):
        kept.extend(parse_recipients([item], offset=index, rejected=rejected))
    return kept, rejected.by_rule


@given(ITEMS)
def test_a_batch_of_strings_is_checked_as_each_string_alone(items):
    rejected = RejectedRecipients()

    kept = parse_recipients(items, rejected=rejected)

    assert (kept, rejected.by_rule) == one_by_one(items)
    assert all_valid_numbers(items) == (bool(items) and not rejected.count and kept == items)


def test_two_numbers_in_one_item_are_refused_not_sent_as_two():
    with pytest.raises(SmsValidationError, match=r"recipients\[1\]"):
        parse_recipients(["33612345678", "33612345679\n33612345680"])


@given(st.lists(st.one_of(VALID, VALID, NEAR, st.just("")), max_size=12))
def test_the_recipients_of_a_body_are_those_given_in_json_and_xml(numbers):
    message = Message(text="Hi")

    body = json.loads(codec.encode_send(message, numbers, "json"))
    xml = codec.encode_send(message, numbers, "xml").decode()

    assert body["sms"]["recipients"]["gsm"] == [{"value": number} for number in numbers]
    if all(number.isdigit() and number.isascii() for number in numbers):
        assert xml.count("<gsm>") == len(numbers)
        assert "".join(f"<gsm>{number}</gsm>" for number in numbers) in xml


# Rows of a recipients file: numbers (as typed), number and gsmsmsid, blank and whitespace-only lines,
# and quoted cells, some spanning two lines.
ROWS = st.lists(
    st.one_of(
        VALID,
        VALID,
        st.builds(lambda number, spaces: f"{spaces}{number}{spaces}", VALID, st.sampled_from([" ", "\t"])),
        st.builds(
            lambda number, gsmsmsid: f"{number},{gsmsmsid}",
            VALID,
            st.from_regex(r"[a-z0-9]{0,4}", fullmatch=True),
        ),
        st.just(""),
        st.just("   "),
        st.builds(lambda number: f'"{number}"', VALID),
        st.builds(lambda number: f'{number},"a\nb"', VALID),
    ),
    max_size=30,
)


def reader_rows(text: str) -> list[object]:
    """The recipients of a file's rows read by the CSV reader alone, first row as any other."""
    rows = ([cell.strip() for cell in row] for row in csv.reader(io.StringIO(text, newline="")))
    return [_recipient(cells) for cells in rows if cells and any(cells)]


@given(ROWS, st.sampled_from(["\n", "\r\n"]), st.integers(min_value=1, max_value=4))
def test_a_file_read_in_blocks_gives_the_rows_the_csv_reader_gives(rows, newline, block_lines):
    text = "".join(row + newline for row in rows)
    expected = reader_rows(text)
    with pytest.MonkeyPatch.context() as patch:
        # Blocks of a few lines: every kind of row falls at a block's start, end and middle.
        patch.setattr(_recipient_batches, "_BLOCK_LINES", block_lines)

        read = list(RecipientSource(io.StringIO(text, newline="")).items())

    assert read == expected


RECIPIENTS = st.lists(
    st.one_of(
        VALID,
        VALID,
        st.builds(
            lambda number, gsmsmsid: {"value": number, "gsmsmsid": gsmsmsid},
            VALID,
            st.from_regex(r"[a-z{}\n\"]{1,6}", fullmatch=True),
        ),
    ),
    min_size=1,
    max_size=20,
)


@given(RECIPIENTS, st.integers(min_value=1, max_value=7))
def test_the_batches_read_back_are_the_recipients_checked_in_order(recipients, size):
    source = RecipientSource(recipients)

    plan = source.plan(size)
    batches = [batch for _, batch in source.batches()]

    expected: list[str | Recipient] = []
    seen: set[str] = set()
    for item in recipients:  # the first of each number, as given
        number = item if isinstance(item, str) else item["value"]
        if number not in seen:
            seen.add(number)
            expected.append(item if isinstance(item, str) else Recipient.model_validate(item))
    assert [item for batch in batches for item in batch] == expected
    assert [len(batch) for batch in batches[:-1]] == [size] * (plan.batches - 1)
    assert len(batches) == plan.batches
