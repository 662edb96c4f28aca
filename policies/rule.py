"""What every rule of the pack shares, written once: a rule reads as its decorator and its check.

The decorator says what the rule is (name, description, enforcement level, config schema) and, for a resource
rule, what it applies to: resource types, and ``when=`` where that is narrower than a type (an SQS queue named
'-delay.fifo'). It wraps the check in ``tolerate_unknowns`` (a value unknown during preview ends that check, not
the pack), builds pulumi-policy's policy object and registers it. The decorated name is that object, so ``pack``
lists the rules in the pack's order and refuses a list that misses one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection
from typing import Any, TypeVar

from pulumi_policy import (
    EnforcementLevel,
    Policy,
    PolicyConfigSchema,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from .props import Report, tolerate_unknowns, value_at

MANDATORY = EnforcementLevel.MANDATORY
ADVISORY = EnforcementLevel.ADVISORY

ResourceCheck = Callable[[ResourceValidationArgs, Report], None]
StackCheck = Callable[[StackValidationArgs, Report], None]
_Rule = TypeVar("_Rule", ResourceValidationPolicy, StackValidationPolicy)

# Every rule a decorator made, in the order the modules define them; ``pack`` holds them in the pack's order.
REGISTERED: list[Policy] = []


def resource_rule(
    *,
    name: str,
    description: str,
    level: EnforcementLevel,
    types: Collection[str],
    when: Callable[[Any], bool] | None = None,
    config_schema: PolicyConfigSchema | None = None,
) -> Callable[[ResourceCheck], ResourceValidationPolicy]:
    """A rule on each resource of one of ``types`` (and, given ``when``, whose props it holds true for): the check
    never sees any other resource."""
    applies_to = frozenset(types)

    def declare(check: ResourceCheck) -> ResourceValidationPolicy:
        @functools.wraps(check)
        def validate(args: ResourceValidationArgs, report: Report) -> None:
            if args.resource_type in applies_to and (when is None or when(args.props)):
                check(args, report)

        return _registered(ResourceValidationPolicy, validate, name, description, level, config_schema)

    return declare


def stack_rule(
    *, name: str, description: str, level: EnforcementLevel, config_schema: PolicyConfigSchema | None = None
) -> Callable[[StackCheck], StackValidationPolicy]:
    """A rule on the stack as a whole: the check sees every resource and reports against the urn it names."""

    def declare(check: StackCheck) -> StackValidationPolicy:
        return _registered(StackValidationPolicy, check, name, description, level, config_schema)

    return declare


def _registered(
    kind: type[_Rule],
    check: Callable[[Any, Report], None],
    name: str,
    description: str,
    level: EnforcementLevel,
    config_schema: PolicyConfigSchema | None,
) -> _Rule:
    """Both kinds of rule built alike, so every check skips what is unknown and ``pack`` can see it is listed."""
    policy = kind(
        name=name,
        description=description,
        validate=tolerate_unknowns(check),
        enforcement_level=level,
        config_schema=config_schema,
    )
    REGISTERED.append(policy)
    return policy


def name_in(names: Collection[str], key: str = "name") -> Callable[[Any], bool]:
    """A ``when=``: the resources whose ``key`` prop is one of ``names`` (a known string, never ``UNKNOWN``)."""

    def named(props: Any) -> bool:
        value = value_at(props, key)
        return isinstance(value, str) and value in names

    return named


def names_option(description: str) -> dict[str, Any]:
    """A config option listing names (exemptions, endpoints declared elsewhere): empty unless the user says."""
    return {"type": "array", "items": {"type": "string"}, "default": [], "description": description}


def quoted(name: Any) -> str:
    """A name read from props, for a message: quoted, or ``(unnamed)`` while it is absent or unknown."""
    return repr(name) if isinstance(name, str) else "(unnamed)"
