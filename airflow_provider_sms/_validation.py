"""Input turned into models, and refused input reported. Not public API.

Every refusal names the field, the value and the rule: :func:`build` validates data as a model and
raises :class:`~airflow_provider_sms.exceptions.SmsValidationError` built from pydantic's errors
(:func:`format_errors`); a bad value is quoted short (:func:`quoted`). Used by the models, the
telephone-number rule, the recipients' parsing, the codec and the sandbox.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from pydantic import BaseModel, ValidationError

from airflow_provider_sms.exceptions import SmsValidationError

if TYPE_CHECKING:
    from collections.abc import Callable

# Longest quote of a bad value in an error (a hostile megabyte "number" must not make a megabyte error).
QUOTED_VALUE_CHARS = 60

M = TypeVar("M", bound=BaseModel)


def quoted(value: object) -> str:
    """``repr(value)``, cut to :data:`QUOTED_VALUE_CHARS` characters for error messages."""
    text = repr(value)
    if len(text) <= QUOTED_VALUE_CHARS:
        return text
    return f"{text[:QUOTED_VALUE_CHARS]}... ({len(text)} characters)"


def format_errors(
    exc: ValidationError, prefix: str = "", *, quote: Callable[[object], str] = quoted
) -> list[tuple[str, str]]:
    """Turn a pydantic error into ``(field, message)`` pairs that name the field, value and rule.

    :param exc: the error of a model's validation.
    :param prefix: the path of the validated data in the caller's input, e.g. ``message``.
    :param quote: how a bad value is quoted; input that may hold telephone numbers passes
        :func:`airflow_provider_sms.phone_numbers.quoted_masked`, which masks them.
    """
    errors = []
    for error in exc.errors(include_url=False):
        field = ".".join(str(part) for part in (prefix, *error["loc"]) if part != "")
        text = error["msg"].removeprefix("Value error, ")
        if error["type"] != "value_error" and "input" in error:
            text = f"{text} (got {quote(error['input'])})"
        errors.append((field or "message", text))
    return errors


def join_errors(errors: list[tuple[str, str]]) -> str:
    """``(field, message)`` pairs as one line: ``field: message; field: message``."""
    return "; ".join(f"{field}: {text}" for field, text in errors)


def build(model: type[M], data: object, field: str) -> M:
    """Validate ``data`` as ``model``, raising :class:`SmsValidationError` that names ``field``.

    :param model: the model to build.
    :param data: an instance of it (returned as it is) or what to validate.
    :param field: the parameter that gave ``data``, named in the error.
    """
    if isinstance(data, model):
        return data
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = format_errors(exc, field)
        raise SmsValidationError(join_errors(errors), errors) from None
