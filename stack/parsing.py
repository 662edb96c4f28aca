"""The stack config's parser: a whole stack's config (``nsb-delays:rabbitmq``, ``nsb-delays:sqs``,
``nsb-delays:msmq`` and the endpoint users' passwords) -> the stack's plan (``plan.py``), every value checked where it
enters.

The whole config is checked before any resource is declared; every problem is collected and reported at once, each
naming the key and the rule it broke. Each transport's section is parsed by its own parser
(``components/section/parsing.py``), which a transport's inputs go through too; the MSMQ section, which no component
declares, and the passwords, which are the stack file's, here. The Pulumi program (through ``pulumi.Config``) and the
CLI (reading ``Pulumi.<stack>.yaml``: ``stack_file.py``) parse config here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from nsb_delays.components.model import msmq
from nsb_delays.components.section.keys import MSMQ, NAMESPACE, SECTIONS, TOPOLOGY_OPERATOR, config_keys
from nsb_delays.components.section.parsing import (
    ConfigError,
    checked_fields,
    key_path,
    parse_rabbitmq_section,
    parse_sqs_section,
    password_keys,
)
from nsb_delays.components.section.plan import UNNAMED_STACK

from .plan import MsmqConfig, StackConfig, TopologyOperatorConfig

__all__ = ["ConfigError", "parse_stack_config", "password_keys"]


def _check_passwords(
    raw: Mapping[str, Any], keys: tuple[str, ...], problems: list[str], password_secrets: bool
) -> None:
    """Each password key a Pulumi secret (``{secure: …}``), never a password in plain text; and present, unless the
    passwords come from elsewhere (``password_secrets`` false: an OpenTofu variable, a Kubernetes Secret, a
    ``--passwords`` file)."""
    for key in keys:
        value = raw.get(key)
        fix = f"pulumi config set --secret {NAMESPACE}:{key} <password>"
        if value is None and password_secrets:
            problems.append(f"{NAMESPACE}:{key}: missing (an endpoint user's passwordKey names it): {fix}")
        elif value is not None and not (isinstance(value, Mapping) and "secure" in value):
            problems.append(f"{NAMESPACE}:{key}: a password in plain text; make it a Pulumi secret: {fix}")


def _parse_msmq(raw: Any, problems: list[str]) -> MsmqConfig:
    path = f"{NAMESPACE}:msmq"
    values = checked_fields(raw, path, config_keys()[MSMQ], problems)
    endpoints = values.pop("endpoints", [])
    for i, name in enumerate(endpoints):
        if not isinstance(name, str) or not name.strip():
            problems.append(f"{key_path(path, 'endpoints')}[{i}]: expected a non-empty endpoint name, got {name!r}")
    for name, count in Counter(e for e in endpoints if isinstance(e, str)).items():
        if count > 1:
            problems.append(f"{key_path(path, 'endpoints')}: {name!r} is listed {count} times")
    schema = values.get("schema", msmq.DEFAULT_SCHEMA)
    try:  # with or without endpoints: the section's own setting
        msmq.check_schema(schema)
    except ValueError as error:
        problems.append(f"{key_path(path, 'schema')}: {error}")
        schema = msmq.DEFAULT_SCHEMA  # said once, for the section; the endpoints' tables are still checked
    for i, name in enumerate(endpoints):
        if isinstance(name, str) and name.strip():
            try:
                msmq.delayed_store_table(name, schema)
            except ValueError as error:
                problems.append(f"{key_path(path, 'endpoints')}[{i}]: {error}")
    return MsmqConfig(endpoints=tuple(e for e in endpoints if isinstance(e, str)), **values)


def _parse_topology_operator(raw: Any, problems: list[str]) -> TopologyOperatorConfig:
    path = f"{NAMESPACE}:{TOPOLOGY_OPERATOR}"
    values = checked_fields(raw, path, config_keys()[TOPOLOGY_OPERATOR], problems)
    for key in ("cluster", "namespace"):
        if key in values and not (isinstance(values[key], str) and values[key].strip()):
            problems.append(f"{key_path(path, key)}: expected a non-empty name, got {values[key]!r}")
            values.pop(key)
    return TopologyOperatorConfig(values.get("cluster"), values.get("namespace"))


def parse_stack_config(
    raw: Mapping[str, Any], stack: str = UNNAMED_STACK, *, password_secrets: bool = True
) -> StackConfig:
    """``raw`` maps ``rabbitmq``/``sqs``/``msmq`` (each may be absent) to their YAML values; ``stack`` is the name of
    the stack they configure; ``password_secrets`` false: the endpoint users' passwords are not the stack's secrets
    (a reader that takes them from elsewhere), so a password key may be absent."""
    problems: list[str] = []
    rabbitmq = parse_rabbitmq_section(raw["rabbitmq"], problems, stack) if raw.get("rabbitmq") is not None else None
    passwords = password_keys(raw.get("rabbitmq"))
    unknown = sorted(set(raw) - set(SECTIONS) - set(passwords))
    for key in unknown:
        known = ", ".join(f"{NAMESPACE}:{section}" for section in SECTIONS)
        problems.insert(0, f"{NAMESPACE}:{key}: unknown key (known: {known}, and endpoint users' passwordKeys)")
    _check_passwords(raw, passwords, problems, password_secrets)
    sqs_config = parse_sqs_section(raw["sqs"], problems) if raw.get("sqs") is not None else None
    msmq_config = _parse_msmq(raw["msmq"], problems) if raw.get("msmq") is not None else None
    operator = raw.get(TOPOLOGY_OPERATOR)
    operator_config = _parse_topology_operator(operator, problems) if operator is not None else None
    if problems:
        raise ConfigError(problems)
    return StackConfig(rabbitmq, sqs_config, msmq_config, raw, stack, operator_config, password_secrets)
