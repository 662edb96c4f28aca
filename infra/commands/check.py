"""``nsb-delays check --stack STACK``: the policy pack's rules on what the program declares, without Pulumi.

The program runs under mocks (``record_stack``), and every recorded resource, plus a default
provider synthesised from the stack file's ``rabbitmq:*``/``aws:*`` keys, goes through the same
rules as ``pulumi preview --policy-pack policies``. Exit 0: no mandatory violation; 1: at least
one; 2: the stack or the policy config could not be read.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import click
from jinja2 import Environment, FileSystemLoader, StrictUndefined
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from nsb_delays.components.model import sqs as sqs_model
from nsb_delays.components.recording import PROJECT
from nsb_delays.infra.program import record_stack
from nsb_delays.policies.endpoint_rules import endpoint_retirement_order, previous_endpoint_names
from nsb_delays.policies.offline import (
    PackConfig,
    PolicyConfigError,
    Violation,
    default_providers,
    load_pack_config,
    policy_resources,
    run_policies,
)
from nsb_delays.policies.pack import PACK_NAME, POLICIES
from nsb_delays.policies.props import BROKER_VERSION_OPTION
from nsb_delays.policies.sqs_rules import sqs_delay_queue_pairs
from nsb_delays.stack.config import ConfigError, StackConfig, load_stack, read_stack_yaml, stack_name

from .errors import EXIT_BAD_INPUT, EXIT_FAILED, CommandError
from .stack_option import stack_option

TEMPLATE_DIR = Path(__file__).parent
MARKDOWN_TEMPLATE = "check.md.j2"
FORMATS = ("text", "markdown", "json")
EXIT_VIOLATIONS = EXIT_FAILED
EXIT_UNREADABLE = EXIT_BAD_INPUT


def derived_config(config: StackConfig, pack_config: PackConfig, baseline: StackConfig | None) -> PackConfig:
    """Facts the stack config already states, which a ``pulumi preview`` user writes into the policy config."""
    if config.sqs:
        without = [
            sqs_model.input_queue_name(endpoint.endpoint, config.sqs.queue_name_prefix)
            for endpoint in config.sqs.endpoints
            if not endpoint.delayed_delivery
        ]
        pack_config = pack_config.with_defaults(sqs_delay_queue_pairs.name, {"withoutDelayedDelivery": without})
    if config.rabbitmq:
        version = {BROKER_VERSION_OPTION: str(config.rabbitmq.infrastructure.broker_version)}
        for policy in POLICIES:  # every rule that judges by the stack's RabbitMQ
            if policy.config_schema is not None and BROKER_VERSION_OPTION in policy.config_schema.properties:
                pack_config = pack_config.with_defaults(policy.name, version)
    if baseline is not None:
        previous = previous_endpoint_names(policy_resources(record_stack(baseline)))
        pack_config = pack_config.with_defaults(endpoint_retirement_order.name, {"previousEndpoints": previous})
    return pack_config


def check_stack(stack: str, pack_config: PackConfig, baseline: str | None = None) -> tuple[list[Violation], int]:
    """The violations of ``stack`` and how many resources were checked. Raises ConfigError/PolicyConfigError."""
    config = load_stack(stack)
    baseline_config = load_stack(baseline) if baseline else None
    pack_config = derived_config(config, pack_config, baseline_config)
    name = stack_name(stack)
    recorded = record_stack(config, stack=name)
    providers = default_providers(recorded, read_stack_yaml(stack), project=PROJECT, stack=name)
    resources = policy_resources(recorded, providers)
    violations = run_policies(resources, pack_config)
    violations.sort(key=lambda v: (not v.mandatory, v.policy, v.urn or "", v.message))
    return violations, len(resources)


def report_context(stack: str, violations: list[Violation], resource_count: int) -> dict[str, Any]:
    by_rule = Counter(v.policy for v in violations)
    return {
        "pack": PACK_NAME,
        "stack": stack_name(stack),
        "resource_count": resource_count,
        "rule_count": len(POLICIES),
        "mandatory": [v for v in violations if v.mandatory],
        "advisory": [v for v in violations if not v.mandatory],
        "by_rule": sorted(by_rule.items()),
    }


def markdown_cell(text: object) -> str:
    """Text safe inside a GitHub table cell: no pipes or newlines, and ``<endpoint>`` is not taken for HTML."""
    return (
        str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|").replace("\n", " ")
    )


def render_markdown(context: dict[str, Any]) -> str:
    environment = Environment(
        loader=FileSystemLoader(TEMPLATE_DIR), undefined=StrictUndefined, keep_trailing_newline=True, autoescape=False
    )
    environment.filters["cell"] = markdown_cell
    return environment.get_template(MARKDOWN_TEMPLATE).render(**context)


def print_text(context: dict[str, Any]) -> None:
    console = Console(width=200)
    violations = context["mandatory"] + context["advisory"]
    if violations:
        table = Table("Level", "Rule", "Resource", "Message", show_lines=True)
        for violation in violations:
            table.add_row(
                violation.enforcement.value,
                violation.policy,
                escape(violation.resource),
                escape(violation.message),
            )
        console.print(table)
    console.print(
        f"{context['pack']} on stack {context['stack']!r}: {context['resource_count']} resources, "
        f"{context['rule_count']} rules: {len(context['mandatory'])} mandatory, "
        f"{len(context['advisory'])} advisory violation(s)"
    )


def as_json(context: dict[str, Any]) -> str:
    violations = context["mandatory"] + context["advisory"]
    return json.dumps(
        {
            "stack": context["stack"],
            "resources": context["resource_count"],
            "violations": [
                {
                    "policy": v.policy,
                    "enforcement": v.enforcement.value,
                    "urn": v.urn,
                    "resource": v.resource,
                    "message": v.message,
                }
                for v in violations
            ],
        },
        indent=2,
    )


@click.command()
@stack_option
@click.option(
    "--format",
    "output_format",
    type=click.Choice(FORMATS),
    default="text",
    show_default=True,
    help="text: a table for the terminal; markdown: a pull-request comment; json: for scripts.",
)
@click.option(
    "--policy-config",
    type=click.Path(dir_okay=False),
    help="Policy config JSON, the format of `pulumi preview --policy-pack-config`.",
)
@click.option(
    "--baseline",
    metavar="STACK",
    help="The deployed version of the stack file (e.g. `git show main:Pulumi.dev.yaml > base.yaml`); endpoints "
    "it binds and the checked stack does not get the retirement advice.",
)
def check(stack: str, output_format: str, policy_config: str | None, baseline: str | None) -> None:
    """Run the policy pack on what the program declares for STACK, offline; exit 1 on a mandatory violation."""
    try:
        pack_config = load_pack_config(policy_config) if policy_config else PackConfig()
        violations, resource_count = check_stack(stack, pack_config, baseline)
    except (ConfigError, PolicyConfigError) as error:
        raise CommandError(str(error), exit_code=EXIT_UNREADABLE) from None
    context = report_context(stack, violations, resource_count)
    if output_format == "markdown":
        click.echo(render_markdown(context), nl=False)
    elif output_format == "json":
        click.echo(as_json(context))
    else:
        print_text(context)
    if context["mandatory"]:
        raise SystemExit(EXIT_VIOLATIONS)
