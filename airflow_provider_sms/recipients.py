"""Recipients as DAG authors give them, checked in one pass, and the bad ones reported by rule.

Campaigns may have hundreds of thousands of numbers: plain numbers stay plain strings (a model per
number would cost more than the send), and the bad ones are counted by the rule they broke with the
first few quoted, masked (:class:`RejectedRecipients`), so that one line reports them however many
there are. List ids are checked here too (:func:`parse_lists`). The rule of one number is
:mod:`airflow_provider_sms.phone_numbers`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from airflow_provider_sms._validation import build, format_errors, join_errors
from airflow_provider_sms.exceptions import SmsValidationError
from airflow_provider_sms.models import ListRef, Recipient
from airflow_provider_sms.phone_numbers import (
    VALID_NUMBER,
    NumberRuleError,
    all_valid_numbers,
    normalize_number,
    quoted_masked,
)

# How many bad numbers an error message quotes before summarising the rest.
_EXAMPLES = 5


def _rule_of(exc: ValueError) -> str:
    """The rule a bad recipient broke, for counting (a pydantic error: its first field and kind)."""
    if isinstance(exc, ValidationError):
        error = exc.errors(include_url=False)[0]
        cause = (error.get("ctx") or {}).get("error")
        if isinstance(cause, NumberRuleError):
            return cause.rule
        where = ".".join(str(part) for part in error["loc"]) or "recipient"
        kind = "invalid" if error["type"] == "value_error" else error["type"]
        return f"{where} {kind}"
    return getattr(exc, "rule", "invalid")


RecipientInput = str | int | Mapping[str, Any] | Recipient


class RejectedRecipients:
    """Recipients refused by local validation, counted by rule with the first few quoted, masked.

    The examples name each one's position in the input and quote its number masked
    (:func:`~airflow_provider_sms.phone_numbers.mask_number`): they reach the task log and the
    result's ``rejected_locally``; the position finds the number in the input.

    One message however many are bad: a campaign of 200,000 numbers with 10,000 bad ones is
    reported in one line, not 10,000.

    :param field: the parameter's name, for the messages.
    """

    def __init__(self, field: str = "recipients") -> None:
        self.field = field
        self.count = 0
        self.by_rule: dict[str, int] = {}
        self.examples: list[str] = []

    def add(self, position: int, exc: ValueError) -> None:
        """Count the recipient at ``position`` (in the whole input), refused with ``exc``."""
        self.count += 1
        rule = _rule_of(exc)
        first_of_rule = rule not in self.by_rule
        self.by_rule[rule] = self.by_rule.get(rule, 0) + 1
        # The first few, and the first of every other rule broken (up to twice as many).
        if len(self.examples) < _EXAMPLES or (first_of_rule and len(self.examples) < 2 * _EXAMPLES):
            # The numbers quoted masked: this text reaches the task log (and the result's examples).
            if isinstance(exc, ValidationError):
                reason = join_errors(format_errors(exc, quote=quoted_masked))
            else:
                reason = str(exc)
            self.examples.append(f"{self.field}[{position}]: {reason}")

    def describe(self, total: int) -> str:
        """``N of total recipients are not valid (by rule: ...); examples``."""
        more = f" (and {self.count - len(self.examples)} more)" if self.count > len(self.examples) else ""
        rules = ", ".join(
            f"{count} {rule}" for rule, count in sorted(self.by_rule.items(), key=lambda kv: -kv[1])
        )
        return (
            f"{self.count} of {total} recipients are not valid (by rule: {rules}); "
            + "; ".join(self.examples)
            + more
        )

    def as_dict(self) -> dict[str, Any]:
        """What the operators return in XCom as ``rejected_locally``."""
        return {"count": self.count, "by_rule": dict(self.by_rule), "examples": list(self.examples)}


def parse_recipients(
    items: Iterable[RecipientInput],
    *,
    allow_gsmsmsid: bool = True,
    field: str = "recipients",
    offset: int = 0,
    rejected: RejectedRecipients | None = None,
) -> list[str | Recipient]:
    """Validate and normalize recipients in one pass, reporting every bad one in a single error.

    Plain numbers stay plain strings (cheap for campaigns of millions); a recipient with a
    ``gsmsmsid`` becomes a :class:`Recipient`.

    :param allow_gsmsmsid: False for list campaigns and simulations, where ``gsmsmsid`` is not valid.
    :param offset: position of the first item in the whole input, so that errors about one batch
        of a large campaign quote positions in the whole input.
    :param rejected: where to count the bad recipients instead of raising (they are left out); by
        default any bad recipient raises one :class:`SmsValidationError` naming them all.
    """
    if isinstance(items, (str, bytes, Mapping, Recipient)):
        items = [items]  # type: ignore[list-item]
    if isinstance(items, (list, tuple)) and all_valid_numbers(items):
        return list(items)
    prepared: list[str | Recipient] = []
    bad = rejected if rejected is not None else RejectedRecipients(field)
    bad_before = bad.count
    for index, item in enumerate(items):
        try:
            if isinstance(item, str) and VALID_NUMBER.fullmatch(item):
                prepared.append(item)
                continue
            if isinstance(item, (Recipient, Mapping)):
                recipient = Recipient.model_validate(item)
            else:
                prepared.append(normalize_number(item))
                continue
            if recipient.gsmsmsid is not None and not allow_gsmsmsid:
                raise NumberRuleError(
                    "gsmsmsid is only valid on /send (numbers), not on lists or simulations",
                    "gsmsmsid not allowed",
                )
            prepared.append(recipient if recipient.gsmsmsid is not None else recipient.value)
        except ValueError as exc:  # pydantic's ValidationError included
            bad.add(offset + index, exc)
    if rejected is not None:
        return prepared
    if bad.count:
        message = f"{field}: " + bad.describe(len(prepared) + bad.count - bad_before)
        raise SmsValidationError.for_field(field, message)
    if not prepared:
        message = f"{field}: no recipients given; give at least one telephone number"
        raise SmsValidationError.for_field(field, message)
    return prepared


def parse_lists(items: object, field: str = "lists") -> list[ListRef]:
    """Validate list ids (ints, digit strings or ``{"value": id}``; one or several) into :class:`ListRef`."""
    if isinstance(items, (int, str, Mapping, ListRef)):
        items = [items]
    if not isinstance(items, Iterable):
        raise SmsValidationError.for_value(field, items, "expected a list id or a list of list ids (ints)")
    refs: list[ListRef] = []
    for index, item in enumerate(items):
        if isinstance(item, Mapping) and "gsmsmsid" in item:
            message = f"{field}[{index}]: gsmsmsid is only valid on /send, not on list campaigns"
            raise SmsValidationError.for_field(f"{field}[{index}]", message)
        refs.append(
            build(
                ListRef,
                item if isinstance(item, (Mapping, ListRef)) else {"value": item},
                f"{field}[{index}]",
            )
        )
    if not refs:
        message = f"{field}: no list ids given; give at least one list id"
        raise SmsValidationError.for_field(field, message)
    return refs
