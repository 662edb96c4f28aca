"""Run the pack's rules outside the Pulumi engine, on resources recorded under mocks (``nsb-delays check``).

Each recorded resource is handed to the rules the way the engine's analyzer hands it over:
``deserialize_properties`` (secrets unwrapped) then ``unknown_checking_proxy``; the secret markers
the recording kept become ``additional_secret_outputs``, which is how the SDK flags secret inputs.
Under mocks the engine registers no default provider, so one is synthesised per package from the
stack file's ``<package>:*`` keys (``rabbitmq:endpoint`` …), as ``pulumi preview`` would register it.
Policy config uses the ``--policy-pack-config`` JSON format and is checked against each rule's schema.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    Policy,
    PolicyCustomTimeouts,
    PolicyProviderResource,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.deserialize import SPECIAL_SECRET_SIG, SPECIAL_SIG_KEY, deserialize_properties
from pulumi_policy.proxy import unknown_checking_proxy

from nsb_delays.components.recording import RecordedResource

from .pack import POLICIES, POLICIES_BY_NAME

ALL_POLICIES_KEY = "all"  # the config key that sets every policy's enforcement level
ENFORCEMENT_KEY = "enforcementLevel"
LEVELS = {level.value: level for level in EnforcementLevel}
PROVIDER_TYPE_PREFIX = "pulumi:providers:"
DEFAULT_PROVIDER_NAME = "default"


class PolicyConfigError(ValueError):
    """A policy config that the engine would refuse; ``problems`` names each bad key."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(f"invalid policy config {source}:\n" + "\n".join(f"  - {p}" for p in problems))


@dataclass(frozen=True)
class Violation:
    policy: str
    enforcement: EnforcementLevel
    message: str
    urn: str | None

    @property
    def mandatory(self) -> bool:
        return self.enforcement in (EnforcementLevel.MANDATORY, EnforcementLevel.REMEDIATE)

    @property
    def resource(self) -> str:
        """``type::name`` from the urn, or ``(stack)`` for a violation of the stack as a whole."""
        if not self.urn:
            return "(stack)"
        qualified_type, name = self.urn.split("::")[-2:]
        return f"{qualified_type.rsplit('$', 1)[-1]}::{name}"


@dataclass(frozen=True)
class PackConfig:
    """Enforcement level and properties per policy, parsed from the ``--policy-pack-config`` format."""

    all_level: EnforcementLevel | None = None
    levels: Mapping[str, EnforcementLevel] = field(default_factory=dict)
    properties: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def level(self, policy: Policy) -> EnforcementLevel:
        default = policy.enforcement_level or EnforcementLevel.ADVISORY
        return self.levels.get(policy.name) or self.all_level or default

    def config(self, policy: Policy) -> dict[str, Any]:
        return dict(self.properties.get(policy.name, {}))

    def with_defaults(self, policy_name: str, values: Mapping[str, Any]) -> PackConfig:
        """Add properties derived from the stack config: the user's values win, lists (exemptions) are joined."""
        user = self.properties.get(policy_name, {})
        merged = {**values, **user}
        for key, value in values.items():
            if isinstance(value, list) and isinstance(user.get(key), list):
                merged[key] = sorted({*value, *user[key]})
        problems = _schema_problems(POLICIES_BY_NAME[policy_name], merged)
        if problems:
            raise PolicyConfigError(f"derived for {policy_name!r}", problems)
        return PackConfig(self.all_level, self.levels, {**self.properties, policy_name: merged})


def parse_pack_config(raw: Any, source: str = "(inline)") -> PackConfig:
    """``{"all": "mandatory", "rule": "disabled", "other": {"enforcementLevel": "advisory", "key": 1}}``."""
    if not isinstance(raw, Mapping):
        raise PolicyConfigError(source, [f"expected a JSON object, got {type(raw).__name__}"])
    problems: list[str] = []
    all_level = None
    levels: dict[str, EnforcementLevel] = {}
    properties: dict[str, dict[str, Any]] = {}
    for name, value in raw.items():
        if name == ALL_POLICIES_KEY:
            all_level = _level(value, name, problems)
            continue
        policy = POLICIES_BY_NAME.get(name)
        if policy is None:
            problems.append(f"{name!r}: no such policy (known: {', '.join(sorted(POLICIES_BY_NAME))})")
            continue
        if isinstance(value, str):
            level = _level(value, name, problems)
            if level:
                levels[name] = level
            continue
        if not isinstance(value, Mapping):
            problems.append(f"{name!r}: expected an enforcement level or an object, got {value!r}")
            continue
        if ENFORCEMENT_KEY in value:
            level = _level(value[ENFORCEMENT_KEY], f"{name}.{ENFORCEMENT_KEY}", problems)
            if level:
                levels[name] = level
        values = {key: item for key, item in value.items() if key != ENFORCEMENT_KEY}
        problems += [f"{name!r}: {problem}" for problem in _schema_problems(policy, values)]
        properties[name] = values
    if problems:
        raise PolicyConfigError(source, problems)
    return PackConfig(all_level, levels, properties)


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json`` keeps the last of two equal keys; a policy config that says a rule twice is refused instead."""
    keys = [key for key, _ in pairs]
    duplicates = sorted({key for key in keys if keys.count(key) > 1})
    if duplicates:
        raise ValueError(f"duplicate key(s) {', '.join(map(repr, duplicates))} in one object")
    return dict(pairs)


def load_pack_config(path: str | Path) -> PackConfig:
    try:
        raw = json.loads(Path(path).read_text(), object_pairs_hook=_refuse_duplicate_keys)
    except (OSError, ValueError) as error:
        raise PolicyConfigError(str(path), [f"cannot read JSON: {error}"]) from None
    return parse_pack_config(raw, str(path))


def _level(value: Any, key: str, problems: list[str]) -> EnforcementLevel | None:
    if value in LEVELS:
        return LEVELS[value]
    problems.append(f"{key!r}: unknown enforcement level {value!r} (expected one of {', '.join(LEVELS)})")
    return None


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "string": (str,),
    "array": (list,),
    "object": (dict,),
}


def _type_problem(value: Any, schema: Mapping[str, Any], path: str) -> list[str]:
    expected = schema.get("type")
    kinds = _JSON_TYPES.get(expected, (object,)) if isinstance(expected, str) else (object,)
    whole_float = expected == "integer" and isinstance(value, float) and value.is_integer()
    if (isinstance(value, bool) and expected != "boolean") or not (isinstance(value, kinds) or whole_float):
        return [f"{path}: expected {expected}, got {value!r}"]
    problems = []
    if "minimum" in schema and value < schema["minimum"]:
        problems.append(f"{path}: {value!r} is below the minimum {schema['minimum']}")
    if "maximum" in schema and value > schema["maximum"]:
        problems.append(f"{path}: {value!r} is above the maximum {schema['maximum']}")
    if "pattern" in schema and not re.search(schema["pattern"], value):
        problems.append(f"{path}: {value!r} does not match {schema['pattern']!r}")
    if expected == "array" and "items" in schema:
        for index, item in enumerate(value):
            problems += _type_problem(item, schema["items"], f"{path}[{index}]")
    return problems


def _schema_problems(policy: Policy, values: Mapping[str, Any]) -> list[str]:
    """The subset of JSON Schema the pack's config schemas use: type, items, minimum, maximum, pattern, required."""
    schema = policy.config_schema
    known = schema.properties if schema else {}
    problems = [
        f"{key!r} is not a config property of this policy (known: {', '.join(sorted(known)) or 'none'})"
        for key in values
        if key not in known
    ]
    for key, value in values.items():
        if key in known:
            problems += _type_problem(value, known[key], repr(key))
    for key in (schema.required or []) if schema else []:
        if key not in values:
            problems.append(f"required property {key!r} is missing")
    return problems


# --- recorded resources -> what the analyzer receives ------------------------------------------------------


def _secret_keys(inputs: Mapping[str, Any]) -> list[str]:
    return [
        key
        for key, value in inputs.items()
        if isinstance(value, Mapping) and value.get(SPECIAL_SIG_KEY) == SPECIAL_SECRET_SIG
    ]


def _stack_config_value(value: Any) -> Any:
    """A ``secure:`` stack-file value stays a secret (its ciphertext is not the password)."""
    if isinstance(value, Mapping) and set(value) == {"secure"}:
        return {SPECIAL_SIG_KEY: SPECIAL_SECRET_SIG, "value": value["secure"]}
    return value


def default_providers(
    resources: Iterable[RecordedResource], stack_config: Mapping[str, Any], *, project: str, stack: str
) -> list[RecordedResource]:
    """One default provider per package whose custom resources name no explicit provider."""
    packages = sorted(
        {r.type.split(":", 1)[0] for r in resources if r.custom and not r.provider and ":providers:" not in r.type}
    )
    providers = []
    for package in packages:
        prefix = f"{package}:"
        inputs = {
            key[len(prefix) :]: _stack_config_value(v) for key, v in stack_config.items() if key.startswith(prefix)
        }
        provider_type = f"{PROVIDER_TYPE_PREFIX}{package}"
        providers.append(
            RecordedResource(
                type=provider_type,
                name=DEFAULT_PROVIDER_NAME,
                inputs=inputs,
                custom=True,
                urn=f"urn:pulumi:{stack}::{project}::{provider_type}::{DEFAULT_PROVIDER_NAME}",
                parent=None,
                protect=False,
                retain_on_delete=False,
                provider=None,
            )
        )
    return providers


def _props(resource: RecordedResource) -> Mapping[str, Any]:
    """What the analyzer sees of a resource: a custom resource's inputs (the provider's outputs echo them), a
    component's registered outputs."""
    shown = resource.inputs if resource.custom or not resource.outputs else resource.outputs
    return unknown_checking_proxy(deserialize_properties(json.loads(json.dumps(shown))))


def policy_resources(
    recorded: Sequence[RecordedResource], providers: Sequence[RecordedResource] = ()
) -> list[PolicyResource]:
    """``PolicyResource`` objects as the analyzer builds them, with parents and providers linked."""
    all_resources = [*recorded, *providers]
    provider_objects = {
        p.urn: PolicyProviderResource(p.type, _props(p), p.urn, p.name)
        for p in all_resources
        if p.type.startswith(PROVIDER_TYPE_PREFIX)
    }
    defaults = {p.type.removeprefix(PROVIDER_TYPE_PREFIX): provider_objects[p.urn] for p in providers}
    converted: dict[str, PolicyResource] = {}
    for resource in all_resources:
        if resource.provider:  # a provider reference is "<urn>::<id>"
            provider = provider_objects.get(resource.provider.rsplit("::", 1)[0])
        elif resource.custom and not resource.type.startswith(PROVIDER_TYPE_PREFIX):
            provider = defaults.get(resource.type.split(":", 1)[0])
        else:
            provider = None
        options = PolicyResourceOptions(
            protect=resource.protect,
            ignore_changes=[],
            delete_before_replace=None,
            aliases=[],
            custom_timeouts=PolicyCustomTimeouts(0, 0, 0),
            additional_secret_outputs=_secret_keys(resource.inputs),
            parent=resource.parent,
        )
        converted[resource.urn] = PolicyResource(
            resource.type, _props(resource), resource.urn, resource.name, options, provider, None, [], {}
        )
    for resource in all_resources:
        if resource.parent in converted:
            converted[resource.urn].parent = converted[resource.parent]
    return list(converted.values())


# --- running the rules -------------------------------------------------------------------------------------


def run_policies(
    resources: Sequence[PolicyResource], config: PackConfig | None = None, policies: Sequence[Policy] = POLICIES
) -> list[Violation]:
    """Every violation, per policy in pack order: resource rules per resource, stack rules once; disabled skipped."""
    config = config or PackConfig()
    violations: list[Violation] = []
    for policy in policies:
        level = config.level(policy)
        if level != EnforcementLevel.DISABLED:
            violations += _run_policy(policy, level, resources, config.config(policy))
    return violations


def _run_policy(
    policy: Policy, level: EnforcementLevel, resources: Sequence[PolicyResource], config: dict[str, Any]
) -> list[Violation]:
    found: list[Violation] = []
    if isinstance(policy, StackValidationPolicy):

        def report_stack(message: str, urn: str | None = None) -> None:
            found.append(Violation(policy.name, level, message, urn))

        policy.validate(StackValidationArgs(list(resources), config), report_stack)
        return found
    if not isinstance(policy, ResourceValidationPolicy):
        return found
    for resource in resources:

        def report(message: str, urn: str | None = None, subject: PolicyResource = resource) -> None:
            # As in the engine: a resource rule's violation is always about the resource it validated.
            found.append(Violation(policy.name, level, message, subject.urn))

        args = ResourceValidationArgs(
            resource.resource_type,
            resource.props,
            resource.urn,
            resource.name,
            resource.opts,
            resource.provider,
            config,
        )
        policy.validate(args, report)
    return found
