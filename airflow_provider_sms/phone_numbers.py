"""The telephone-number rule: international format without sign, digits only (E.164).

What people type (``+33 6 12 34 56 78``, ``0033...``) is normalized; anything else is refused with
the rule it broke named (:class:`NumberRuleError`), so that many bad numbers can be counted by rule.
Used by the models (a recipient's and a delivery report's number), the recipients' parsing and the
NPAI sensor's filter.
"""

from __future__ import annotations

import re

from airflow_provider_sms._validation import quoted

# International format without sign: country code first (never 0), 8 to 15 digits (E.164).
VALID_NUMBER = re.compile(r"[1-9][0-9]{7,14}")
# Separators people type inside numbers; stripped before checking.
_SEPARATORS = re.compile(r"[\s.\-()/]")


class NumberRuleError(ValueError):
    """A recipient refused by one rule; ``rule`` names it, so that many bad ones are counted by rule.

    :param message: what is wrong, quoting the value.
    :param rule: the rule's short name, e.g. ``national number``.
    """

    def __init__(self, message: str, rule: str) -> None:
        super().__init__(message)
        self.rule = rule


def normalize_number(value: object) -> str:
    """Return ``value`` as digits in international format, or raise ``ValueError`` saying why.

    :param value: a number as text (separators and a leading ``+`` or ``00`` accepted) or an int.
    """
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise NumberRuleError(
            f"a telephone number must be a string of digits, got {quoted(value)}", "not text"
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
            f"{quoted(text)} is a national number; give it in international format with its country code, "
            "e.g. 33612345678 for 06 12 34 56 78 in France",
            "national number",
        )
    if not VALID_NUMBER.fullmatch(digits):
        raise NumberRuleError(
            f"{quoted(text)} is not an international telephone number "
            "(8 to 15 digits, country code first, no letters)",
            "not an international number",
        )
    return digits
