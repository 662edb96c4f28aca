"""Comparing a vhost's definitions around one stack's removal, for the split-stack test and ``bench split``."""

from __future__ import annotations

from typing import Any

KINDS = ("exchanges", "queues", "bindings", "policies")


def objects_of_others(definitions: dict[str, Any], team: list[str], group: str) -> dict[str, list[str]]:
    """Every object of the vhost that is not the leaving team's, each kind as sorted reprs (order-free equality).
    The team's queues stay on the broker (retained), its exchanges, bindings and ``nsb-delays.<group>.*`` policies
    go."""

    def theirs(name: str) -> bool:
        return name in team or name.startswith(f"nsb-delays.{group}.")

    kept = {
        "exchanges": [e for e in definitions["exchanges"] if not theirs(e["name"])],
        "queues": [q for q in definitions["queues"] if not theirs(q["name"])],
        "bindings": [b for b in definitions["bindings"] if b["destination"] not in team],
        "policies": [p for p in definitions["policies"] if not theirs(p["name"])],
    }
    return {kind: sorted(map(repr, kept[kind])) for kind in KINDS}
