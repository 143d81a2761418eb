"""The telephone-number rule: international format without sign, digits only (E.164).

What people type (``+33 6 12 34 56 78``, ``0033...``) is normalized; anything else is refused with
the rule it broke named (:class:`NumberRuleError`), so that many bad numbers can be counted by rule.
Used by the models (a recipient's and a delivery report's number), the recipients' parsing and the
NPAI sensor's filter.

Numbers are personal data: what logs, warnings and errors show of one is masked (:func:`mask_number`),
the refusals of this rule included; :func:`quoted_masked` quotes any other value an error names with
the numbers in it masked.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from airflow_provider_sms._validation import quoted

if TYPE_CHECKING:
    from collections.abc import Sequence

# International format without sign: country code first (never 0), 8 to 15 digits (E.164).
VALID_NUMBER = re.compile(r"[1-9][0-9]{7,14}")
# Valid numbers, one a line: a whole batch checked in one scan (all_valid_numbers).
_VALID_LINES = re.compile(rf"(?:{VALID_NUMBER.pattern}\n)*{VALID_NUMBER.pattern}")
# Separators people type inside numbers; stripped before checking.
_SEPARATORS = re.compile(r"[\s.\-()/]")
# What may be a telephone number inside other text: a run of 8 digits or more (the shortest valid one).
_DIGIT_RUN = re.compile(r"(?<![0-9])[0-9]{8,}(?![0-9])")


class NumberRuleError(ValueError):
    """A recipient refused by one rule; ``rule`` names it, so that many bad ones are counted by rule.

    :param message: what is wrong, quoting the value.
    :param rule: the rule's short name, e.g. ``national number``.
    """

    def __init__(self, message: str, rule: str) -> None:
        super().__init__(message)
        self.rule = rule


def all_valid_numbers(items: Sequence[object]) -> bool:
    """Whether ``items`` is not empty and every item is a string already in international format.

    One scan of the items joined by newlines instead of one match each: a campaign's numbers are
    usually all valid already, so the common case costs no step per number.
    """
    try:
        lines = "\n".join(items)  # type: ignore[arg-type]
    except TypeError:  # something other than a string among them
        return False
    # A newline inside an item would make two lines that may each pass: the count of lines rules it out.
    return bool(items) and lines.count("\n") == len(items) - 1 and _VALID_LINES.fullmatch(lines) is not None


def normalize_number(value: object) -> str:
    """Return ``value`` as digits in international format, or raise ``ValueError`` saying why.

    :param value: a number as text (separators and a leading ``+`` or ``00`` accepted) or an int.
    """
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise NumberRuleError(
            f"a telephone number must be a string of digits, got {quoted_masked(value)}", "not text"
        )
    text = str(value)
    if VALID_NUMBER.fullmatch(text):
        return text
    digits = _SEPARATORS.sub("", text)
    if digits.startswith("+"):
        digits = digits[1:]
    elif digits.startswith("00"):
        digits = digits[2:]
    elif digits.startswith("0"):
        raise NumberRuleError(
            f"{quoted(mask_number(text))} is a national number; give it in international format with its "
            "country code, e.g. 33612345678 for 06 12 34 56 78 in France",
            "national number",
        )
    if not VALID_NUMBER.fullmatch(digits):
        raise NumberRuleError(
            f"{quoted(mask_number(text))} is not an international telephone number "
            "(8 to 15 digits, country code first, no letters)",
            "not an international number",
        )
    return digits


def mask_number(number: str) -> str:
    """``number`` as logs show it: its first and last three characters, the rest hidden (``336•••••678``).

    Telephone numbers are personal data: logs and warnings show them masked; the full numbers are only
    where a DAG asked for them (e.g. the delivery wait's XCom). Enough is left to tell numbers apart
    when comparing with a list one holds, not to dial one.

    Any text is masked by its characters, a valid number or not (``+33 6 12 ab`` is ``+33••••• ab``):
    an error about a bad number quotes it masked too. Text under 10 characters shows a quarter of it
    (rounded down) at each end, so under 4 characters nothing (``12345678`` is ``12••••78``).
    """
    # Short ones (not valid numbers, but quoted in errors) show less: never more than half.
    shown = 3 if len(number) >= 10 else len(number) // 4
    hidden = len(number) - 2 * shown
    return f"{number[:shown]}{'•' * hidden}{number[len(number) - shown :]}" if shown else "•" * len(number)


def mask_numbers_in(text: str) -> str:
    """``text`` with each run of 8 digits or more (what may be a number) masked by :func:`mask_number`.

    For text that is not a number but may hold some: a refused body's reason, a quoted value. Shorter
    runs (dates, times, counts, addresses) are left as they are; text masked already is unchanged.
    """
    return _DIGIT_RUN.sub(lambda found: mask_number(found.group()), text)


def quoted_masked(value: object) -> str:
    """``quoted(value)`` for an error message, with the numbers in it masked (:func:`mask_numbers_in`).

    What errors quote of a value that may hold telephone numbers: a recipient that is not text, the
    input of a delivery report or of an NPAI entry that failed validation.
    """
    return mask_numbers_in(quoted(value))
