"""``nsb-delays explain DELAY DESTINATION``: the path of a delayed message, as a table like the one of the RabbitMQ
transport's documentation (Particular/docs.particular.net ``transports/rabbitmq/delayed-delivery.md``, "Example"),
over the routing key of Particular/NServiceBus.RabbitMQ
``src/NServiceBus.Transport.RabbitMQ/DelayedDelivery/DelayInfrastructure.cs`` ``CalculateRoutingKey``."""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from nsb_delays.components.model.rabbitmq.name_rules import rabbitmq_address_problems
from nsb_delays.components.model.rabbitmq.names import DEFAULT_GENERATION, GENERATIONS, MAX_LEVEL, Generation
from nsb_delays.components.model.rabbitmq.routing import (
    MAX_DELAY_SECONDS,
    DelayError,
    DelayPath,
    Hop,
    delay_path,
    first_level,
    normalize_delay,
)


def _delay(value: str) -> int:
    try:
        delay = int(value, 10)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a whole number of seconds", param_hint="DELAY") from None
    if delay < 0:
        raise click.BadParameter(f"{delay} is negative; a delay is 0..{MAX_DELAY_SECONDS} s", param_hint="DELAY")
    try:
        return normalize_delay(delay)
    except DelayError as error:
        raise click.BadParameter(str(error), param_hint="DELAY") from None


# The keys of ``--json``, in order: one list for the output and its help text (``DelayPath`` / ``Hop`` attributes).
PATH_KEYS = ("delay_seconds", "destination", "generation", "routing_key", "first_exchange", "total_seconds")
HOP_KEYS = ("exchange", "level", "routing_value", "routed_to", "seconds_in_queue", "dead_letter_to")
JSON_HELP = f"Print a JSON object: {', '.join(PATH_KEYS)}, hops (a list of: {', '.join(HOP_KEYS)})."


def path_as_dict(path: DelayPath) -> dict[str, object]:
    return {key: getattr(path, key) for key in PATH_KEYS} | {
        "hops": [{key: getattr(hop, key) for key in HOP_KEYS} for hop in path.hops]
    }


def _segment(path: DelayPath, hop: Hop) -> str:
    """The key from the first level's bit on, with the word this hop reads in brackets (where the documentation's
    table sets it in bold)."""
    first = path.hops[0].level
    if first is None:  # delay_path starts at a level exchange (level 0 at least), never at the delivery exchange
        raise ValueError(f"delay path {path.routing_key!r} does not start at a delay level")
    words = path.routing_key[2 * (MAX_LEVEL - first_level(path.delay_seconds)) :].split(".", first + 1)
    index = len(words) - 1 if hop.level is None else first - hop.level
    words[index] = f"[{words[index]}]"
    return ".".join(words)


# ``explain -7 Sales``: a negative delay is an argument to refuse with its rule, not an unknown option.
@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("delay", metavar="DELAY")
@click.argument("destination")
@click.option(
    "--generation",
    type=click.Choice(GENERATIONS),
    default=DEFAULT_GENERATION.value,
    show_default=True,
    help="The delay graph to explain (v1: nsb.delay-level-NN, v2: nsb.v2.delay-level-NN).",
)
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
def explain(delay: str, destination: str, generation: str, as_json: bool) -> None:
    """Show how a message delayed by DELAY seconds travels to DESTINATION."""
    problems = rabbitmq_address_problems(destination)
    if problems:
        raise click.BadParameter(f"{destination!r} {'; '.join(problems)}", param_hint="DESTINATION")
    path = delay_path(_delay(delay), destination, Generation(generation))
    if as_json:
        click.echo(json.dumps(path_as_dict(path), indent=2))
        return
    console = Console(width=200)
    console.print(f"routing key    {path.routing_key}")
    console.print(f"publish to     {path.first_exchange}  (level of the highest set bit)")
    table = Table("Exchange", "Routing key segment", "Routing value", "Routed to", "Delay in queue", "Dead-letter to")
    for hop in path.hops:
        table.add_row(
            hop.exchange,
            escape(_segment(path, hop)),
            hop.routing_value,
            hop.routed_to,
            f"{hop.seconds_in_queue} s" if hop.seconds_in_queue else "-",
            hop.dead_letter_to or "-",
        )
    console.print(table)
    console.print(f"total          {path.total_seconds} s")
