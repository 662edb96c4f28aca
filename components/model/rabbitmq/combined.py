"""A stack's parking and delivery-limit policies as a few combined policies instead of one per object.

Every policy change makes RabbitMQ re-match every exchange and queue of the vhost against all its policies
(rabbitmq-server ``deps/rabbit/src/rabbit_policy.erl``, ``update_matched_objects``), so one policy per endpoint makes
a stack of n endpoints cost the broker n x (objects in the vhost) matches. Combined, the same objects get the same
definitions from a handful of policies whose pattern lists them: ``^(Sales|Billing|Shipping)$``, as NServiceBus's
documentation suggests for pre-created delivery-limit policies.

Which policy holds a name depends on that name alone: its SHA-256 bits pick a bucket, and a bucket whose pattern
would pass ``MAX_POLICY_PATTERN_BYTES`` (RabbitMQ 4.3.3's bound, kept on every version so a stack
moves between them unchanged) splits in two by the next bit. Adding or removing an endpoint so changes
only its own bucket's pattern; a split or merge creates new buckets (new names) before Pulumi deletes the old ones,
so no object is ever without its policy (while both exist they give the same definition).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum

from .delivery_limits import DELIVERY_LIMIT_POLICY_KEY
from .graph import ALTERNATE_EXCHANGE_POLICY_KEY, ALTERNATE_EXCHANGE_POLICY_SUFFIX
from .names import combined_policy_name, dotnet_regex_escape
from .objects import PolicySpec
from .versions import MAX_POLICY_PATTERN_BYTES, pattern_bytes

__all__ = [
    "COMBINED_POLICY_KINDS",
    "ROOT_BUCKET",
    "PolicyScope",
    "combined_pattern",
    "combined_policies",
]


class PolicyScope(StrEnum):
    """Who declares an endpoint's parking and delivery-limit policies: the stack, combined for all its endpoints
    (``RabbitMqEndpointPolicies``), or each endpoint its own, one per object as NServiceBus names them."""

    STACK = "stack"
    ENDPOINT = "endpoint"


ROOT_BUCKET = "all"  # the bucket of every name, until its pattern is too long
# A combined policy's kind in its name, from the one key of its definition.
COMBINED_POLICY_KINDS = {
    DELIVERY_LIMIT_POLICY_KEY: DELIVERY_LIMIT_POLICY_KEY,
    ALTERNATE_EXCHANGE_POLICY_KEY: ALTERNATE_EXCHANGE_POLICY_SUFFIX.strip("."),
}


def combined_pattern(names: Iterable[str]) -> str:
    """``^(a|b|c)$`` with each name escaped as .NET's ``Regex.Escape`` does (as NServiceBus escapes its own)."""
    return "^(" + "|".join(dotnet_regex_escape(name) for name in sorted(names)) + ")$"


_FRAME_BYTES = pattern_bytes(combined_pattern([""]))  # "^(" and ")$"
_HASH_BITS = 256


@dataclass(frozen=True)
class _Name:
    """A name with what its buckets are worked out from: its SHA-256 as an integer, its escaped length in bytes."""

    name: str
    digest: int
    escaped_bytes: int

    @classmethod
    def of(cls, name: str) -> _Name:
        digest = int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest(), "big")
        return cls(name, digest, pattern_bytes(dotnet_regex_escape(name)))

    def bit(self, depth: int) -> str:
        """The name's hash bit at ``depth`` (0: the leading bit), as a bucket's name spells it."""
        return "1" if self.digest >> (_HASH_BITS - 1 - depth) & 1 else "0"


def _buckets(names: Sequence[_Name], prefix: str, limit: int) -> Iterator[tuple[str, Sequence[str]]]:
    """The smallest buckets, by leading hash bits, whose pattern fits ``limit`` bytes (one name always fits: a queue
    name has at most 255 bytes, twice that escaped). A pattern's bytes: its frame, each escaped name, a ``|``
    between two."""
    if len(names) == 1 or _FRAME_BYTES + sum(n.escaped_bytes for n in names) + len(names) - 1 <= limit:
        yield prefix or ROOT_BUCKET, [n.name for n in names]
        return
    depth = len(prefix)
    for bit in "01":
        half = [name for name in names if name.bit(depth) == bit]
        if half:
            yield from _buckets(half, prefix + bit, limit)


def combined_policies(
    policies: Iterable[PolicySpec], group: str, max_pattern_length: int = MAX_POLICY_PATTERN_BYTES
) -> tuple[PolicySpec, ...]:
    """Per-object ``policies`` as few policies of ``group``: one per kind (apply-to, priority, definition) and bucket,
    each matching exactly the targets of the per-object policies it replaces, with their definition."""
    by_kind: dict[str, tuple[PolicySpec, set[str]]] = {}
    for policy in policies:
        keys = list(policy.definition)
        if len(keys) != 1 or keys[0] not in COMBINED_POLICY_KINDS:
            raise ValueError(f"policy {policy.name!r}: only {', '.join(COMBINED_POLICY_KINDS)} policies combine")
        kind = COMBINED_POLICY_KINDS[keys[0]]
        first, targets = by_kind.setdefault(kind, (policy, set()))
        if (first.apply_to, first.priority, dict(first.definition)) != (
            policy.apply_to, policy.priority, dict(policy.definition)
        ):  # fmt: skip
            raise ValueError(f"policies {first.name!r} and {policy.name!r} differ: one {kind} policy cannot hold both")
        targets.update(policy.targets)
    combined = []
    for kind, (first, targets) in sorted(by_kind.items()):
        for bucket, names in _buckets([_Name.of(name) for name in sorted(targets)], "", max_pattern_length):
            combined.append(
                PolicySpec(
                    name=combined_policy_name(group, kind, bucket),
                    targets=tuple(names),
                    pattern=combined_pattern(names),
                    apply_to=first.apply_to,
                    priority=first.priority,
                    definition=dict(first.definition),
                )
            )
    return tuple(combined)
