"""Recipients read in batches from a list, a file or any iterable; batch results added up. Internal.

A campaign of hundreds of thousands of numbers is sent as several campaigns of ``batch_size`` numbers
each. The source is read once, by :meth:`RecipientSource.plan`, which checks every recipient before
any request, removes duplicates (across batches too: the service only filters duplicates within one
campaign, so each copy in another batch would receive the SMS) and writes the valid recipients to a
temporary file; the simulation and the send read their batches back from that file. Nothing here
holds the campaign whole: memory is one batch plus the numbers already seen, kept exactly and
compactly by :class:`~airflow_provider_sms.operators._seen_numbers.SeenNumbers`. What is sent is
exactly what was checked, even if the source changes in between.
"""

from __future__ import annotations

import csv
import hashlib
import io
import operator
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, islice
from typing import IO, TYPE_CHECKING, Any, TypeGuard, cast

from airflow_provider_sms._validation import quoted
from airflow_provider_sms.exceptions import SmsValidationError
from airflow_provider_sms.models import FILTER_FIELDS, CampaignResult, Recipient
from airflow_provider_sms.operators._seen_numbers import SeenNumbers
from airflow_provider_sms.phone_numbers import mask_number, quoted_masked
from airflow_provider_sms.recipients import RejectedRecipients, parse_recipients

if TYPE_CHECKING:
    from airflow_provider_sms._task_arguments import InvalidNumbers

# Bad batches quoted in a validation error (each quotes its first bad numbers).
_QUOTED_BATCHES = 3
# What a recipients file must look like, said in errors about one that does not.
FILE_FORMAT = (
    "A recipients file has one telephone number per line (international format, e.g. 33612345678), "
    "optionally followed by ',gsmsmsid'; a first line 'value' or 'value,gsmsmsid' is skipped. For a CSV "
    "file with a header and other columns, give the numbers' column: recipients_column='phone'"
)
_FIGURES = ("cost", "total", "sent", *FILTER_FIELDS)
# Lines of a recipients file read at a time after its first row.
_BLOCK_LINES = 4096


@dataclass(frozen=True)
class BatchPlan:
    """What the validation pass found: the number of batches and of recipients.

    :param batches: batches the campaign is split into.
    :param recipients: valid recipients after removing duplicates.
    :param duplicates: numbers given more than once (sent once, counted in ``duplicated``).
    :param rejected: with ``invalid_numbers="skip"``, the recipients left out by local validation.
    :param audience: digest of the valid numbers as a set (:class:`NumberSetDigest`), or of the
        sorted list ids: part of the campaign's content digest, which an approval and a claim of
        lists compare.
    """

    batches: int
    recipients: int
    duplicates: int
    rejected: RejectedRecipients | None = None
    audience: str = ""

    @property
    def rejected_count(self) -> int:
        """Recipients left out by local validation (0 unless ``invalid_numbers="skip"``)."""
        return self.rejected.count if self.rejected is not None else 0


class RecipientSource:
    """Recipients read once, checked and de-duplicated, then handed out in batches as often as needed.

    :param recipients: a list or tuple (e.g. from XCom) of numbers or ``{"value", "gsmsmsid"}`` dicts;
        a path (:class:`pathlib.Path` or Airflow's ``ObjectStoragePath``) or an open text file with one
        number per line, optionally ``number,gsmsmsid`` (CSV; a ``value[,gsmsmsid]`` header is
        skipped); a single number; or any other iterable (read once, as everything else).
    :param allow_gsmsmsid: False where ``gsmsmsid`` is not valid.
    :param field: the parameter's name, for error messages.
    :param invalid_numbers: ``fail`` (any recipient failing local validation refuses the campaign) or
        ``skip`` (those recipients are left out, counted in :attr:`BatchPlan.rejected`).
    :param column: for a CSV file with a header: the header of the column holding the numbers (an
        optional ``gsmsmsid`` column is read too).
    """

    def __init__(
        self,
        recipients: object,
        *,
        allow_gsmsmsid: bool = True,
        field: str = "recipients",
        invalid_numbers: InvalidNumbers = "fail",
        column: str | None = None,
    ) -> None:
        if recipients is None:
            raise SmsValidationError.for_field(
                field, f"{field}: no recipients given; give at least one telephone number"
            )
        self._source = recipients
        # Where an open file was when given: reading starts there.
        self._start = recipients.tell() if _is_file(recipients) else 0
        # What plan() found valid, one recipient a line, and the length of each batch's text in it.
        self._valid: IO[str] | None = None
        self._lengths: list[int] = []
        self.allow_gsmsmsid = allow_gsmsmsid
        self.field = field
        self.skip_invalid = invalid_numbers == "skip"
        self.column = column

    def items(self) -> Iterator[Any]:
        """An iterator over the raw recipients, as given."""
        source = self._source
        if isinstance(source, (str, int, bytes, Mapping, Recipient)):
            return iter([source])
        if isinstance(source, Sequence):
            return iter(source)
        if self.is_file():
            return self._file_rows()
        if isinstance(source, Iterable):
            return iter(source)
        raise SmsValidationError.for_field(
            self.field,
            f"{self.field}: expected numbers, a list, a file or a path, got {type(source).__name__}",
        )

    def is_file(self) -> bool:
        """Whether the recipients are read from a file or a path (CSV)."""
        source = self._source
        return (
            isinstance(source, os.PathLike)
            or (hasattr(source, "open") and hasattr(source, "read_text"))
            or _is_file(source)
        )

    def _file_rows(self) -> Iterator[Any]:
        source: Any = self._source
        if _is_file(source):
            source.seek(self._start)
            yield from _rows(source, self.field, self.column)
            return
        with source.open("r", encoding="utf-8", newline="") as handle:
            yield from _rows(handle, self.field, self.column)

    def plan(self, size: int) -> BatchPlan:
        """Read everything once: check every recipient, remove duplicates, count batches; no request made.

        The valid recipients are written to a temporary file, one a line: the digits of a number, the
        JSON of a :class:`Recipient` (one with a ``gsmsmsid``); :meth:`batches` reads them back.

        :raises SmsValidationError: quoting the bad numbers of up to three batches, with their
            positions in the whole input.
        """
        batches = recipients = duplicates = 0
        errors: list[str] = []
        rejected = RejectedRecipients(self.field) if self.skip_invalid else None
        audience = NumberSetDigest()
        lengths: list[int] = []
        # Deleted when closed or collected; kept open for the passes that follow. No newline translation:
        # a batch is read back by its length in characters.
        valid = tempfile.TemporaryFile("w+", encoding="utf-8", newline="")  # noqa: SIM115
        for batch, dropped in self._walk(size, errors=errors, rejected=rejected):
            batches += 1
            recipients += len(batch)
            duplicates = dropped
            audience.add(batch)
            # One write per batch, not per number: a text file encodes each write apart.
            try:
                text = "\n".join(batch)  # type: ignore[arg-type]  # numbers only: the usual batch
            except TypeError:  # recipients with a gsmsmsid among them
                text = "\n".join(item if type(item) is str else item.model_dump_json() for item in batch)  # type: ignore[union-attr]
            lengths.append(valid.write(text))
        if errors:
            valid.close()
            more = len(errors) - _QUOTED_BATCHES
            message = " | ".join(errors[:_QUOTED_BATCHES]) + (
                f" | and bad numbers in {more} more chunk(s)" if more > 0 else ""
            )
            if self.is_file() and self.column is None:
                message += f". {FILE_FORMAT}"
            raise SmsValidationError.for_field(self.field, message)
        if not recipients:
            valid.close()
            message = f"{self.field}: no recipients given; give at least one telephone number"
            if rejected is not None and rejected.count:
                message = (
                    f"{self.field}: no valid recipient is left once the invalid ones are skipped "
                    f"(invalid_numbers='skip'): {rejected.describe(rejected.count)}"
                )
            raise SmsValidationError.for_field(self.field, message)
        if self._valid is not None:
            self._valid.close()
        self._valid, self._lengths = valid, lengths
        return BatchPlan(
            batches=batches,
            recipients=recipients,
            duplicates=duplicates,
            rejected=rejected,
            audience=audience.hexdigest(),
        )

    def batches(self) -> Iterator[tuple[int, list[str | Recipient]]]:
        """``(index, recipients)`` of each batch :meth:`plan` made, read back from its file.

        The recipients are numbers (``str``) or :class:`Recipient` (those with a ``gsmsmsid``).
        """
        if self._valid is None:
            raise RuntimeError("RecipientSource.batches() reads what plan() checked: call plan() first")
        self._valid.seek(0)
        for index, length in enumerate(self._lengths):
            # Numbers are read back as they were written, checked already; a recipient line is JSON.
            text = self._valid.read(length)
            lines = text.split("\n")
            if "{" not in text:
                yield index, cast("list[str | Recipient]", lines)
                continue
            yield index, [Recipient.model_validate_json(line) if line[0] == "{" else line for line in lines]

    def _walk(
        self, size: int, *, errors: list[str], rejected: RejectedRecipients | None = None
    ) -> Iterator[tuple[list[str | Recipient], int]]:
        """Yield ``(batch, duplicates so far)``.

        Bad numbers are counted in ``rejected`` and left out when it is given; otherwise their
        chunk's error is collected into ``errors``.
        """
        seen = SeenNumbers()
        duplicates = 0
        pending: list[str | Recipient] = []
        items = self.items()
        offset = 0
        while chunk := list(islice(items, size)):
            try:
                valid = parse_recipients(
                    chunk,
                    allow_gsmsmsid=self.allow_gsmsmsid,
                    field=self.field,
                    offset=offset,
                    rejected=rejected,
                )
            except SmsValidationError as exc:
                errors.append(str(exc))
                valid = []
            offset += len(chunk)
            new = seen.unseen(valid)
            duplicates += len(valid) - len(new)
            pending.extend(new)
            while len(pending) >= size:
                yield pending[:size], duplicates
                pending = pending[size:]
        if pending:
            yield pending, duplicates


class NumberSetDigest:
    """A digest of a set of distinct telephone numbers that does not depend on their order.

    The same customers exported in another order are the same audience. Sorting the numbers would hold
    them all in memory, and hashing each one is several times slower (docs/performance.md has the
    figures); numbers are digit strings, so the digest is taken of their count, their sum and the sum of
    their squares (exact integers): two different sets agree on all three only when chosen to, never by
    accident of an export. ``gsmsmsid`` is left out: the same people get the same SMS whatever the ids.
    """

    def __init__(self) -> None:
        self._sums = [0, 0, 0]

    def add(self, batch: Sequence[str | Recipient]) -> None:
        """Add a batch of distinct, validated recipients (none seen in an earlier batch)."""
        try:
            values = list(map(int, batch))  # type: ignore[arg-type]  # a batch of numbers: the usual one
        except TypeError:  # recipients with a gsmsmsid among them
            values = [int(item if type(item) is str else item.value) for item in batch]  # type: ignore[union-attr]
        self._sums[0] += len(values)
        self._sums[1] += sum(values)
        self._sums[2] += sum(map(operator.mul, values, values))

    def hexdigest(self) -> str:
        """The digest of the numbers added so far."""
        return hashlib.sha256(":".join(map(str, self._sums)).encode()).hexdigest()[:32]


def _is_file(value: object) -> TypeGuard[IO[Any]]:
    return hasattr(value, "read") and hasattr(value, "seek") and hasattr(value, "tell")


def _rows(handle: IO[Any], field: str, column: str | None) -> Iterator[Any]:
    """Numbers from a text (or binary UTF-8) CSV file (see :data:`FILE_FORMAT`)."""
    if not isinstance(handle.read(0), bytes):
        yield from _csv_rows(handle, field, column)
        return
    text = io.TextIOWrapper(handle, encoding="utf-8", newline="")
    try:
        yield from _csv_rows(text, field, column)
    finally:
        text.detach()  # leave the caller's file open for the next pass


def _csv_rows(text: IO[str], field: str, column: str | None) -> Iterator[Any]:
    reader = csv.reader(text)
    rows = ([cell.strip() for cell in row] for row in reader)
    rows = (cells for cells in rows if cells and any(cells))
    if column is not None:
        yield from _column_rows(rows, field, column)
        return
    first = next(rows, None)
    if first is None:
        return
    if first[0].lower() != "value":
        if _looks_like_a_header(first[0]):
            raise SmsValidationError.for_field(
                field,
                f"{field}: the file starts with a header ({_quoted_cells(first[:6])}), not with "
                f"a telephone number. {FILE_FORMAT}",
            )
        yield _recipient(first)
    # The other rows, a block of lines at a time. A block with no comma and no quote holds one number a
    # line (the usual block of a big campaign's file) and is cut without the reader. The reader starts
    # where a block begins, which is a row's start: no quote was opened before it.
    while block := list(islice(text, _BLOCK_LINES)):
        block_text = "".join(block)
        if '"' in block_text:  # a quoted cell may span lines: the reader takes the rest of the file
            yield from _reader_rows(csv.reader(chain(block, text)))
            return
        if "," in block_text:
            yield from _reader_rows(csv.reader(block))
        else:
            yield from filter(None, map(str.strip, block))


def _reader_rows(reader: Iterator[list[str]]) -> Iterator[Any]:
    """The recipients of a CSV reader's rows; blank rows skipped."""
    for row in reader:
        if len(row) == 1:
            if number := row[0].strip():
                yield number
        elif any(cells := [cell.strip() for cell in row]):
            yield _recipient(cells)


def _recipient(cells: list[str]) -> Any:
    """The recipient of a row's stripped cells: the number, or ``{value, gsmsmsid}``."""
    return {"value": cells[0], "gsmsmsid": cells[1] or None} if len(cells) > 1 else cells[0]


def _column_rows(rows: Iterator[list[str]], field: str, column: str) -> Iterator[Any]:
    """The ``column`` of a CSV file with a header (and its ``gsmsmsid`` column, when there is one)."""
    header = next(rows, None)
    names = [name.lower() for name in header or []]
    if column.strip().lower() not in names:
        raise SmsValidationError.for_field(
            "recipients_column",
            f"recipients_column={column!r}: the file's header has no such column "
            f"(it has {_quoted_cells((header or [])[:20]) or 'nothing'})",
        )
    at = names.index(column.strip().lower())
    id_at = names.index("gsmsmsid") if "gsmsmsid" in names else None
    for cells in rows:
        number = cells[at] if at < len(cells) else ""
        gsmsmsid = cells[id_at] if id_at is not None and id_at < len(cells) else ""
        yield {"value": number, "gsmsmsid": gsmsmsid} if gsmsmsid else number


def _looks_like_a_header(cell: str) -> bool:
    # A telephone number may hold digits, spaces, dots, dashes, parentheses and one leading "+".
    return any(character.isalpha() for character in cell)


def _quoted_cells(cells: Sequence[str]) -> str:
    """A row's cells as an error quotes them: a first row that is data, not a header, may hold numbers.

    A cell without letters (a number, however typed) is masked whole, the numbers in any other masked.
    """
    return ", ".join(
        quoted_masked(cell) if _looks_like_a_header(cell) else quoted(mask_number(cell)) for cell in cells
    )


def combine(results: Sequence[CampaignResult], *, duplicates: int = 0) -> dict[str, Any]:
    """Add up the figures of several batches into those of one campaign.

    Results with a ticket are real sends, those without are simulations. A simulation's ``credits`` is
    the balance after that batch alone, so the balance after all of them is the balance before the
    first simulation minus the cost of the simulations; with no simulation, it is the last send's.

    :param results: one result per batch, in order (sends of earlier attempts first).
    :param duplicates: numbers removed locally as duplicates across batches; added to ``total`` and
        ``duplicated`` so that the figures read as those of the one campaign the service would see.
    """
    figures: dict[str, Any] = {name: sum(getattr(result, name) for result in results) for name in _FIGURES}
    figures["total"] += duplicates
    figures["duplicated"] += duplicates
    simulations = [result for result in results if result.ticket is None]
    if simulations:
        before = simulations[0].credits + simulations[0].cost
        figures["credits"] = before - sum(result.cost for result in simulations)
    else:
        figures["credits"] = results[-1].credits
    figures["filtered"] = sum(figures[name] for name in FILTER_FIELDS)
    return figures


def summary(figures: Mapping[str, Any]) -> str:
    """The one-line summary of added-up figures (as :meth:`CampaignResult.summary` writes it)."""
    return CampaignResult.model_validate({"status": 1, "message": "OK", **figures}).summary()
