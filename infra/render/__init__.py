"""Render a stack's infrastructure as files for teams whose installers are off and who don't run Pulumi.

``render(stack, format)`` reads the model's objects for the stack and writes them: the JSON formats
(RabbitMQ definitions, CloudFormation) as documents built in ``documents.py`` and written by ``json.dumps``;
the text formats (T-SQL, Mermaid) by filling a jinja2 template under ``templates/`` with a context from
``contexts.py``. Templates only arrange values they are given, so every name, TTL and attribute still comes
from the model.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import jinja2

from nsb_delays.components.model import msmq
from nsb_delays.stack.config import StackConfig

from . import contexts, documents


class RenderError(ValueError):
    """The stack cannot be rendered in the requested format (e.g. the section it needs is missing)."""


@dataclass(frozen=True)
class Format:
    section: str  # the nsb-delays:<section> the format renders
    content: Callable[[StackConfig, str], Any]  # what the file holds, for a stack (and its name)
    write: Callable[[Any], str]  # that content as the file's text
    description: str


def fill_template(template: str, context: Mapping[str, Any]) -> str:
    return environment().get_template(template).render(**context)


PASSWORDS_FORMAT = "rabbitmq-definitions"
"""The format that can carry endpoint users (with their password hashes)."""

FORMATS: dict[str, Format] = {
    "rabbitmq-definitions": Format(
        "rabbitmq",
        documents.definitions_document,
        documents.json_text,
        "RabbitMQ definitions for POST /api/definitions or rabbitmqctl import_definitions",
    ),
    "cloudformation": Format(
        "sqs",
        documents.cloudformation_document,
        documents.json_text,
        "CloudFormation template: each endpoint's SQS input queue and -delay.fifo queue",
    ),
    "mssql-delayed-store": Format(
        "msmq",
        contexts.mssql_context,
        partial(fill_template, "mssql-delayed-store.sql.j2"),
        "idempotent T-SQL for the MSMQ transport's SQL Server delayed store tables",
    ),
    "mermaid": Format(
        "rabbitmq",
        contexts.mermaid_context,
        partial(fill_template, "mermaid.mmd.j2"),
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
        content = (
            documents.definitions_document(stack, stack_name, passwords)
            if passwords is not None
            else spec.content(stack, stack_name)
        )
    except ValueError as error:
        raise RenderError(f"format {format_name!r}: {error}") from None
    return spec.write(content)
