"""SeenNumbers (the cross-batch de-duplication of a campaign) answers exactly as a set of strings would."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_sms.models import Recipient
from airflow_provider_sms.operators._seen_numbers import SeenNumbers

# Numbers as parse_recipients returns them: 8 to 15 digits, no leading zero; drawn from few digits so
# that prefixes, suffixes and repeats of one another are common.
NUMBERS = st.from_regex(r"[1-3][0-3]{7,14}", fullmatch=True)


def first_of_each(numbers):
    """What a set of strings keeps: the first of each number, in order."""
    kept, reference = [], set()
    for number in numbers:
        if number not in reference:
            reference.add(number)
            kept.append(number)
    return kept


@given(st.lists(st.lists(NUMBERS, max_size=50), max_size=8))
def test_unseen_keeps_the_first_of_each_number_across_batches_as_a_set_does(batches):
    seen = SeenNumbers()

    kept = [number for batch in batches for number in seen.unseen(batch)]

    assert kept == first_of_each([number for batch in batches for number in batch])


def test_numbers_that_contain_one_another_are_told_apart():
    seen = SeenNumbers()
    # Each is a prefix, a suffix or an infix of another; any bucket holding several must not confuse them.
    family = ["33612345678", "3361234567", "336123456789", "36123456", "123456789012345", "23456789"]

    assert seen.unseen(family) == family
    assert seen.unseen(family) == []


def test_recipients_with_a_gsmsmsid_count_by_their_number():
    seen = SeenNumbers()
    first = Recipient(value="33612345678", gsmsmsid="a")

    assert seen.unseen([first, "33612345679"]) == [first, "33612345679"]
    assert seen.unseen([Recipient(value="33612345679", gsmsmsid="b"), "33612345678"]) == []


def test_a_campaign_larger_than_the_buckets_is_still_exact():
    seen = SeenNumbers()
    numbers = [f"336{index:08d}" for index in range(0, 600_000, 3)]

    assert seen.unseen(numbers) == numbers
    assert seen.unseen(numbers) == []
    # Neighbours never given are new.
    neighbours = [f"336{index:08d}" for index in range(1, 3000, 3)]
    assert seen.unseen(neighbours) == neighbours
