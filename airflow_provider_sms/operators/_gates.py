"""The gates of a send: ``max_cost``, ``max_filtered_ratio``, ``min_credits_after``. Not public API.

A gate reads the simulated figures of the exact campaign that will be sent. This module only says
what the gates make of them (:class:`GateCheck`); the send decides what a refusal leads to
(``on_cost_exceeded``: ask, skip or fail).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_sms._task_arguments import check_on_cost_exceeded
from airflow_provider_sms.exceptions import SmsValidationError
from airflow_provider_sms.operators._recipient_batches import summary

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping


def _number(value: object, field: str, *, given: bool) -> float | int | None:
    """A templated gate value (it may render to a string) as a finite number >= 0, or None when unset.

    A gate fails closed: one the DAG gave (``given``) that rendered to nothing (``""``, ``None``,
    ``"None"``) is an error, not "no gate", and so are NaN and infinity (``"1e400"``): a budget that
    failed to arrive must not mean an unlimited budget.
    """
    if value is None or (isinstance(value, str) and value.strip() in ("", "None")):
        if not given:
            return None
        raise SmsValidationError.for_value(
            field,
            value,
            "the gate was given but rendered to nothing; a gate that cannot be read refuses to send "
            "(give a number, or leave the argument out for no gate)",
        )
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        number = -1.0
    if isinstance(value, bool) or not math.isfinite(number) or number < 0:
        raise SmsValidationError.for_value(field, value, "must be a number >= 0, neither NaN nor infinite")
    return int(number) if number.is_integer() else number


def read_gates(
    *,
    max_cost: object,
    max_filtered_ratio: object,
    min_credits_after: object,
    on_cost_exceeded: object,
    given: Collection[str] = (),
) -> dict[str, float | int | None]:
    """The gates from the operator's (rendered) arguments, each checked and named when wrong.

    :param given: the gates the DAG set (not None when the operator was built): those may not render
        to nothing.
    """
    check_on_cost_exceeded(on_cost_exceeded)
    ratio = _number(max_filtered_ratio, "max_filtered_ratio", given="max_filtered_ratio" in given)
    if ratio is not None and ratio > 1:
        raise SmsValidationError.for_value(
            "max_filtered_ratio", max_filtered_ratio, "must be between 0 and 1 (0.2 = 20 %)"
        )
    return {
        "max_cost": _number(max_cost, "max_cost", given="max_cost" in given),
        "max_filtered_ratio": ratio,
        "min_credits_after": _number(
            min_credits_after, "min_credits_after", given="min_credits_after" in given
        ),
    }


@dataclass(frozen=True)
class GateCheck:
    """What the gates make of a simulated campaign: each gate's sentence, and those that refused.

    :param gate: the gates' decision and figures, as the XCom's ``gate`` (``passed``,
        ``filtered_ratio``, ``refusals``: the refusing gates' sentences).
    :param simulation: the simulated figures, added up over the batches.
    :param checks: one sentence per gate set, whichever way it went.
    :param refused: the names of the gates that refused.
    """

    gate: dict[str, Any]
    simulation: dict[str, Any]
    checks: tuple[str, ...]
    refused: tuple[str, ...]

    @property
    def passed(self) -> bool:
        """Whether every gate let the campaign go."""
        return not self.refused

    @property
    def text(self) -> str:
        """The refusal, as the task log says it."""
        refusals = "; ".join(self.gate["refusals"])
        return f"Gate refused the send: {refusals}. Simulated: {summary(self.simulation)}"

    def figures(self) -> dict[str, float]:
        """The figures the gates read: ``cost``, ``credits_after`` and ``filtered_ratio``."""
        return {
            "cost": self.simulation["cost"],
            "credits_after": self.simulation["credits"],
            "filtered_ratio": self.gate["filtered_ratio"],
        }


def check_gates(
    gates: Mapping[str, Any], simulation: Mapping[str, Any], rejected_locally: int = 0
) -> GateCheck:
    """Compare the simulated figures with the gates.

    :param rejected_locally: recipients left out before any request (``invalid_numbers="skip"``):
        ``max_filtered_ratio`` counts them with the service's filtered ones.
    """
    given = simulation["total"] + rejected_locally
    ratio = (simulation["filtered"] + rejected_locally) / given if given else 0.0
    # (gate, passed, what was compared) for each gate set: one sentence, whichever way it went.
    checks: list[tuple[str, bool, str]] = []
    if gates["max_cost"] is not None:
        passed = simulation["cost"] <= gates["max_cost"]
        checks.append(
            (
                "max_cost",
                passed,
                f"cost {simulation['cost']} credits is {'within' if passed else 'over'} "
                f"max_cost {gates['max_cost']}",
            )
        )
    if gates["max_filtered_ratio"] is not None:
        passed = ratio <= gates["max_filtered_ratio"]
        checks.append(
            (
                "max_filtered_ratio",
                passed,
                f"{ratio:.1%} of the numbers would be filtered, {'within' if passed else 'over'} "
                f"max_filtered_ratio {gates['max_filtered_ratio']:.1%}",
            )
        )
    if gates["min_credits_after"] is not None:
        passed = simulation["credits"] >= gates["min_credits_after"]
        checks.append(
            (
                "min_credits_after",
                passed,
                f"{simulation['credits']} credits would be left, {'at least' if passed else 'under'} "
                f"min_credits_after {gates['min_credits_after']}",
            )
        )
    refusals = [text for _, passed, text in checks if not passed]
    gate = {**gates, "passed": not refusals, "filtered_ratio": round(ratio, 4), "refusals": refusals}
    return GateCheck(
        gate,
        dict(simulation),
        tuple(text for _, _, text in checks),
        tuple(name for name, passed, _ in checks if not passed),
    )
