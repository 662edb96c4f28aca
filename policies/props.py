"""Reading resource props the way the policy engine delivers them.

The engine hands a policy camelCase input names, every number as a float, secrets unwrapped, and
the whole bag wrapped in ``unknown_checking_proxy``: touching a value that is unknown during
preview raises ``UnknownValueError``. These helpers turn such a value into ``UNKNOWN`` instead, so
a rule skips that one check and keeps the others; ``pulumi up`` analyzes the resolved inputs again
before it creates anything.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pulumi_policy import PolicyConfigSchema, ReportViolation, Secret, proxy
from pulumi_policy.proxy import UnknownValueError

from nsb_delays.components.model.rabbitmq.versions import DEFAULT_BROKER_VERSION, BrokerVersion

# Every ``UNKNOWN_*_VALUE`` placeholder pulumi-policy puts where a preview value is not known yet.
_SENTINELS = frozenset(
    getattr(proxy, name) for name in dir(proxy) if name.startswith("UNKNOWN_") and name.endswith("_VALUE")
)


class _Unknown:
    """A value the engine cannot know during preview."""

    def __repr__(self) -> str:
        return "<unknown during preview>"


UNKNOWN: Any = _Unknown()


def is_sentinel(value: Any) -> bool:
    return isinstance(value, str) and value in _SENTINELS


def value_at(props: Any, *path: str) -> Any:
    """The value at ``path``: None when absent, ``UNKNOWN`` when unknown during preview."""
    current = props
    for key in path:
        if is_sentinel(current):
            return UNKNOWN
        if not isinstance(current, Mapping):
            return None
        try:
            if key not in current:
                return None
            current = current[key]
        except UnknownValueError:
            return UNKNOWN
    return UNKNOWN if is_sentinel(current) else current


def resolved(value: Any) -> Any:
    """A plain copy (dicts, lists, scalars) of a possibly proxied value, or ``UNKNOWN`` if any part is."""
    try:
        return _plain(value)
    except UnknownValueError:
        return UNKNOWN


def _plain(value: Any) -> Any:
    if is_sentinel(value):
        raise UnknownValueError(value, [])
    if isinstance(value, Secret):
        return _plain(value.value)
    if isinstance(value, Mapping):
        return {key: _plain(value[key]) for key in value}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [_plain(value[i]) for i in range(len(value))]
    return value


def whole_number(value: Any) -> int | None:
    """An engine number (always a float) as an int; None for anything that is not a whole number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


@dataclass(frozen=True)
class DeclaredArguments:
    """A queue's arguments as the provider would send them, and which input they came from."""

    values: dict[str, Any]
    source: str  # "settings.argumentsJson", "settings.arguments" or "" (none declared)
    error: str = ""  # argumentsJson that is not a JSON object


def declared_arguments(props: Any) -> DeclaredArguments | Any:
    """Decode ``settings.argumentsJson`` (ints stay ints) or read the string-only ``settings.arguments`` map."""
    arguments_json = value_at(props, "settings", "argumentsJson")
    if arguments_json is UNKNOWN:
        return UNKNOWN
    if arguments_json:
        try:
            decoded = json.loads(arguments_json)
        except (TypeError, ValueError) as error:
            return DeclaredArguments({}, "settings.argumentsJson", f"is not valid JSON ({error})")
        if not isinstance(decoded, dict):
            return DeclaredArguments({}, "settings.argumentsJson", f"is not a JSON object: {arguments_json!r}")
        return DeclaredArguments(decoded, "settings.argumentsJson")
    arguments = resolved(value_at(props, "settings", "arguments"))
    if arguments is UNKNOWN:
        return UNKNOWN
    if arguments:
        return DeclaredArguments(dict(arguments), "settings.arguments")
    return DeclaredArguments({}, "")


def config_value(config: Mapping[str, Any], schema: PolicyConfigSchema | None, key: str) -> Any:
    """A policy config property, falling back to the default its JSON schema declares."""
    if key in config:
        return config[key]
    if schema is None or key not in schema.properties:
        raise KeyError(f"policy config property {key!r} is not in the policy's schema")
    return schema.properties[key].get("default")


BROKER_VERSION_OPTION = "brokerVersion"


BROKER_VERSION_PATTERN = r"^[0-9]+\.[0-9]+(\.[0-9]+)?$"
"""A ``brokerVersion`` option's form, for the config's schema: the engine refuses a config that does not match it
before the pack runs (as ``nsb-delays check`` does), and a rule refuses a release below the oldest supported."""


def broker_version_option(description: str) -> dict[str, Any]:
    """The config option of a rule that judges by the stack's RabbitMQ: the stack's
    ``nsb-delays:rabbitmq.brokerVersion`` (``nsb-delays check`` passes it), else the components' default."""
    return {
        "type": "string",
        "pattern": BROKER_VERSION_PATTERN,
        "default": str(DEFAULT_BROKER_VERSION),
        "description": description,
    }


def configured_broker_version(config: Mapping[str, Any], schema: PolicyConfigSchema, rule: str) -> BrokerVersion:
    """A rule's ``brokerVersion`` option, parsed where it enters; ValueError naming the option and the rule it
    broke."""
    try:
        return BrokerVersion(config_value(config, schema, BROKER_VERSION_OPTION))
    except ValueError as error:
        raise ValueError(f"policy config {rule}.{BROKER_VERSION_OPTION}: {error}") from None


class Report(Protocol):
    """How a rule reports a violation: ``report(message)``, or ``report(message, urn)`` from a stack rule.

    pulumi-policy's callback is ``report_violation(message, urn=None)``, but its ``ReportViolation`` alias
    declares ``urn`` required; ``tolerate_unknowns`` hands each rule the callback typed as it is."""

    def __call__(self, message: str, urn: str | None = None) -> None: ...


Validator = Callable[[Any, Report], None]


def tolerate_unknowns(validate: Validator) -> Callable[[Any, ReportViolation], None]:
    """Skip the rest of a check that touched a value unknown during preview (it runs again at ``pulumi up``)."""

    @functools.wraps(validate)
    def run(args: Any, report_violation: ReportViolation) -> None:
        def report(message: str, urn: str | None = None) -> None:
            report_violation(message, urn)

        try:
            validate(args, report)
        except UnknownValueError:
            return

    return run
