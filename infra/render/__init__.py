"""Render a stack's infrastructure as files for teams whose installers are off and who don't run Pulumi.

``render(stack, format)`` builds a context from the model (``contexts.py``) and fills a jinja2
template under ``templates/``; templates only arrange values they are given (``tojson`` keeps
numbers numbers), so every name, TTL and attribute still comes from the model. JSON outputs are
parsed back before they are returned, so a broken template fails here rather than at import time.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jinja2

from nsb_delays.components.model import msmq
from nsb_delays.stack.config import StackConfig

from . import contexts


class RenderError(ValueError):
    """The stack cannot be rendered in the requested format (e.g. the section it needs is missing)."""


@dataclass(frozen=True)
class Format:
    template: str
    section: str  # the nsb-delays:<section> the format renders
    context: Callable[[StackConfig, str], dict[str, Any]]
    json: bool
    description: str


PASSWORDS_FORMAT = "rabbitmq-definitions"
"""The format that can carry endpoint users (with their password hashes)."""

FORMATS: dict[str, Format] = {
    "rabbitmq-definitions": Format(
        "rabbitmq-definitions.json.j2",
        "rabbitmq",
        contexts.definitions_context,
        True,
        "RabbitMQ definitions for POST /api/definitions or rabbitmqctl import_definitions",
    ),
    "cloudformation": Format(
        "cloudformation.json.j2",
        "sqs",
        contexts.cloudformation_context,
        True,
        "CloudFormation template: each endpoint's SQS input queue and -delay.fifo queue",
    ),
    "mssql-delayed-store": Format(
        "mssql-delayed-store.sql.j2",
        "msmq",
        contexts.mssql_context,
        False,
        "idempotent T-SQL for the MSMQ transport's SQL Server delayed store tables",
    ),
    "mermaid": Format(
        "mermaid.mmd.j2",
        "rabbitmq",
        contexts.mermaid_context,
        False,
        "Mermaid flowchart of the delay graph and each endpoint's delivery path",
    ),
}


def _tojson(value: Any) -> str:
    """Plain JSON (no HTML escaping, unlike jinja's built-in filter): ints stay ints, bools stay bools."""
    return json.dumps(value, ensure_ascii=False)


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader(__name__, "templates"),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters["tojson"] = _tojson
    env.filters["sql_identifier"] = msmq.quote_identifier
    env.filters["sql_unicode"] = msmq.unicode_literal
    return env


def render(
    stack: StackConfig, format_name: str, stack_name: str = "", passwords: Mapping[str, str] | None = None
) -> str:
    """The text of ``format_name`` for ``stack``; ``stack_name`` only labels the output; ``passwords`` (endpoint
    user -> password) puts the users themselves into ``rabbitmq-definitions``."""
    try:
        spec = FORMATS[format_name]
    except KeyError:
        raise RenderError(f"unknown format {format_name!r}: expected one of {', '.join(FORMATS)}") from None
    if getattr(stack, spec.section) is None:
        raise RenderError(
            f"format {format_name!r} renders the nsb-delays:{spec.section} section, "
            f"which stack {stack_name or '(unnamed)'!r} does not have"
        )
    if passwords is not None and format_name != PASSWORDS_FORMAT:
        raise RenderError(f"--passwords applies only to --format {PASSWORDS_FORMAT}")
    try:
        context = (
            contexts.definitions_context(stack, stack_name, passwords)
            if passwords is not None
            else spec.context(stack, stack_name)
        )
    except ValueError as error:
        raise RenderError(f"format {format_name!r}: {error}") from None
    text = environment().get_template(spec.template).render(**context)
    if spec.json:
        json.loads(text)  # a template bug must not produce a file that only fails on import
    return text
