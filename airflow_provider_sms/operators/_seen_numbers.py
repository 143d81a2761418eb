"""Internal: the numbers a campaign has already met, kept exactly in a fraction of a set's memory.

De-duplicating across batches means remembering every number of the campaign until its last batch.
A Python ``set`` of the numbers holds a string object and a table slot for each, which for a million
numbers was most of what such a campaign cost (the figures: docs/performance.md, "The million
numbers"). :class:`SeenNumbers` keeps them in 65,536 strings of digits instead,
``|33612345678|33698765432|...``, a number going to the string its hash picks: a lookup is one C
substring search of a short string for ``|digits|``, exact because the ``|`` that bounds every number
can never be part of one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from airflow_provider_sms.models import Recipient

# Enough buckets that even a million numbers leave each one short to search and to copy when one is
# added; the empty buckets are one shared string.
_BUCKETS = 1 << 16
_MASK = _BUCKETS - 1


class SeenNumbers:
    """An exact set of the numbers of validated recipients (digit strings, or :class:`Recipient`)."""

    def __init__(self) -> None:
        self._buckets = ["|"] * _BUCKETS

    def unseen(self, items: Sequence[str | Recipient]) -> list[str | Recipient]:
        """The items whose number was not seen before, in order (the first of repeats); all now seen."""
        buckets = self._buckets  # locals: this loop runs once per number of the campaign
        kept: list[str | Recipient] = []
        keep = kept.append
        for item in items:
            number = item if type(item) is str else item.value  # type: ignore[union-attr]
            index = hash(number) & _MASK
            bucket = buckets[index]
            if f"|{number}|" not in bucket:
                buckets[index] = f"{bucket}{number}|"
                keep(item)
        return kept
