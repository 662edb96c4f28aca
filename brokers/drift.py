"""A drift: one way a live broker or queue differs from what the model declares, as ``verify`` and ``discover`` list
it (what is missing, unexpected or different, both values shown as JSON text, and the fix when it is not obvious).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Literal

from nsb_delays.components.model.rabbitmq.arguments import argument_differences

DriftKind = Literal["missing", "unexpected", "different"]
ABSENT = "(absent)"


@dataclass(frozen=True, order=True)
class Drift:
    kind: DriftKind
    subject: str  # "queue nsb.v2.delay-level-03", "binding a -> b", "broker", "SQS queue x"
    field: str
    expected: str
    actual: str
    fix: str = dataclasses.field(default="", compare=False)  # what to do about it, when it is not obvious


def shown(value: Any) -> str:
    """JSON text, so a string ``"1000"`` and a number ``1000`` look different in the table."""
    return ABSENT if value is None else json.dumps(value, ensure_ascii=False)


def field_drifts(subject: str, expected: dict[str, Any], actual: dict[str, Any], fix: str = "") -> list[Drift]:
    """Each field of ``expected`` the listed object ``actual`` does not hold exactly (type included: a string TTL is
    drift); ``arguments`` key by key."""
    drifts = []
    for field, value in expected.items():
        got = actual.get(field)
        if field == "arguments":
            if value or got:
                drifts += _argument_drifts(subject, value, got or {})
        elif got != value or type(got) is not type(value):
            drifts.append(Drift("different", subject, field, shown(value), shown(got), fix))
    return drifts


def _argument_drifts(subject: str, expected: dict[str, Any], actual: dict[str, Any]) -> list[Drift]:
    return [
        Drift(d.kind, subject, f"arguments.{d.key}", shown(d.expected), shown(d.actual))
        for d in argument_differences(expected, actual)
    ]
