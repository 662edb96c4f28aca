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

import bisect
import hashlib
import itertools
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
    "combined_targets",
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
    return _pattern_of_escaped(dotnet_regex_escape(name) for name in sorted(names))


def _pattern_of_escaped(escaped: Iterable[str]) -> str:
    return "^(" + "|".join(escaped) + ")$"


_FRAME_BYTES = pattern_bytes(combined_pattern([""]))  # "^(" and ")$"
_HASH_BITS = 256


@dataclass(frozen=True)
class _Name:
    """A name with what its buckets are worked out from: its SHA-256 as an integer, and its escaped form."""

    name: str
    digest: int
    escaped: str

    @classmethod
    def of(cls, name: str) -> _Name:
        return cls(
            name, int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest(), "big"), dotnet_regex_escape(name)
        )


def _buckets(names: Sequence[_Name], limit: int) -> Iterator[tuple[str, list[_Name]]]:
    """The smallest buckets, by leading hash bits, whose pattern fits ``limit`` bytes (one name always fits: a queue
    name has at most 255 bytes, twice that escaped), each with its names sorted. A pattern's bytes: its frame, each
    escaped name, a ``|`` between two. Sorted by hash, the names of a bucket are a run, split where its next bit
    turns 1."""
    ordered = sorted(names, key=lambda n: n.digest)
    digests = [n.digest for n in ordered]
    sizes = list(itertools.accumulate((pattern_bytes(n.escaped) + 1 for n in ordered), initial=0))

    def split(start: int, end: int, prefix: str) -> Iterator[tuple[str, list[_Name]]]:
        if end - start == 1 or _FRAME_BYTES + sizes[end] - sizes[start] - 1 <= limit:
            yield prefix or ROOT_BUCKET, sorted(ordered[start:end], key=lambda n: n.name)
            return
        depth = len(prefix)
        first_one = int(prefix + "1", 2) << (_HASH_BITS - 1 - depth)  # the least hash of the next bit 1
        middle = bisect.bisect_left(digests, first_one, start, end)
        for low, high, bit in ((start, middle, "0"), (middle, end, "1")):
            if low < high:
                yield from split(low, high, prefix + bit)

    if ordered:
        yield from split(0, len(ordered), "")


def _kind(policy: PolicySpec) -> str:
    keys = list(policy.definition)
    if len(keys) != 1 or keys[0] not in COMBINED_POLICY_KINDS:
        raise ValueError(f"policy {policy.name!r}: only {', '.join(COMBINED_POLICY_KINDS)} policies combine")
    return COMBINED_POLICY_KINDS[keys[0]]


def combined_policies(
    policies: Iterable[PolicySpec], group: str, max_pattern_length: int = MAX_POLICY_PATTERN_BYTES
) -> tuple[PolicySpec, ...]:
    """Per-object ``policies`` as few policies of ``group``: one per kind (apply-to, priority, definition) and bucket,
    each matching exactly the targets of the per-object policies it replaces, with their definition."""
    by_kind: dict[str, tuple[PolicySpec, set[str]]] = {}
    for policy in policies:
        first, targets = by_kind.setdefault(_kind(policy), (policy, set()))
        if (first.apply_to, first.priority, first.definition) != (policy.apply_to, policy.priority, policy.definition):
            kind = _kind(policy)
            raise ValueError(f"policies {first.name!r} and {policy.name!r} differ: one {kind} policy cannot hold both")
        targets.update(policy.targets)
    return combined_targets(by_kind.values(), group, max_pattern_length)


def combined_targets(
    kinds: Iterable[tuple[PolicySpec, Iterable[str]]], group: str, max_pattern_length: int = MAX_POLICY_PATTERN_BYTES
) -> tuple[PolicySpec, ...]:
    """``combined_policies`` of each kind given as one object's policy and the targets of all: the per-object
    policies of a thousand endpoints need not be made only to be combined."""
    combined = []
    hashed: dict[str, _Name] = {}  # the kinds mostly name the same objects (an endpoint's queue and exchange)
    for first, targets in sorted(kinds, key=lambda kind: _kind(kind[0])):
        named = [hashed[name] if name in hashed else hashed.setdefault(name, _Name.of(name)) for name in set(targets)]
        for bucket, names in _buckets(named, max_pattern_length):
            combined.append(
                PolicySpec(
                    name=combined_policy_name(group, _kind(first), bucket),
                    targets=tuple(n.name for n in names),
                    pattern=_pattern_of_escaped(n.escaped for n in names),
                    apply_to=first.apply_to,
                    priority=first.priority,
                    definition=dict(first.definition),
                )
            )
    return tuple(combined)
