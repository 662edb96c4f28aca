"""Before anything is sent into a delay graph: does the graph exist, and can each destination receive?

A delayed message reaches its endpoint only through the delivery exchange's ``#.<destination>``
binding (``BindToDelayInfrastructure``: to the endpoint's fanout exchange in the conventional
topology, to its queue in the direct one). The timeout migration and ``nsb-delays delays
migrate|transfer`` refuse, naming every destination at once, before they hide or move anything.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from nsb_delays.components.model.rabbitmq.names import (
    LEVEL_COUNT,
    Generation,
    delay_level_name,
    delivery_exchange_name,
    endpoint_binding_key,
)

from .management import ManagementApi

LISTED = 20  # destinations named in a refusal before "…"


class DestinationsRefused(RuntimeError):
    """Destinations that do not exist or are not bound to the delivery exchange: nothing was sent."""


@dataclass(frozen=True)
class UnreachableDestination:
    destination: str
    reason: str


def missing_delay_levels(api: ManagementApi, vhost: str, generation: Generation) -> list[str]:
    """Level exchanges and the delivery exchange of ``generation`` that the vhost lacks."""
    existing = {exchange["name"] for exchange in api.exchanges(vhost)}
    required = [delay_level_name(level, generation) for level in range(LEVEL_COUNT)]
    required.append(delivery_exchange_name(generation))
    return [name for name in required if name not in existing]


def unreachable_destinations(
    destinations: Iterable[str],
    bindings: Iterable[Mapping[str, Any]],
    queues: Iterable[str],
    generation: Generation,
) -> list[UnreachableDestination]:
    """Each destination without a ``#.<destination>`` delivery binding, or whose binding leads to no queue.

    ``bindings`` and ``queues`` are the management API's listings of the vhost. Conventional topology:
    the binding targets the endpoint's exchange, which must itself be bound to a queue of that name.
    """
    delivery = delivery_exchange_name(generation)
    listed = list(bindings)
    delivery_targets = {
        (binding["destination"], binding["destination_type"])
        for binding in listed
        if binding["source"] == delivery and binding["routing_key"] == endpoint_binding_key(binding["destination"])
    }
    exchange_to_queue = {
        binding["source"]
        for binding in listed
        if binding["destination_type"] == "queue" and binding["source"] == binding["destination"]
    }
    existing_queues = set(queues)
    problems = []
    for destination in sorted(set(destinations)):
        key = endpoint_binding_key(destination)
        if (destination, "queue") in delivery_targets:
            if destination not in existing_queues:
                problems.append(UnreachableDestination(destination, "its queue does not exist"))
        elif (destination, "exchange") in delivery_targets:
            if destination not in existing_queues or destination not in exchange_to_queue:
                problems.append(
                    UnreachableDestination(destination, f"exchange {destination!r} is bound but leads to no queue")
                )
        else:
            reason = f"no {key!r} binding on {delivery!r}"
            if destination not in existing_queues:
                reason += " and no queue"
            problems.append(UnreachableDestination(destination, reason))
    return problems


def describe(problems: Iterable[UnreachableDestination], counts: Mapping[str, int] | None = None) -> str:
    """``Billing (12 messages): no '#.Billing' binding on 'nsb.v2.delay-delivery'; …`` (at most LISTED)."""
    items = list(problems)
    parts = []
    for problem in items[:LISTED]:
        count = f" ({counts[problem.destination]:,} message(s))" if counts and problem.destination in counts else ""
        parts.append(f"{problem.destination}{count}: {problem.reason}")
    return "; ".join(parts) + (f"; … and {len(items) - LISTED} more" if len(items) > LISTED else "")


def check_destinations(
    api: ManagementApi,
    destinations: Iterable[str],
    *,
    vhost: str = "/",
    generation: Generation,
    counts: Mapping[str, int] | None = None,
    nothing_done: str = "nothing was migrated",
) -> None:
    """Refuse (``DestinationsRefused``) unless the graph exists and every destination can receive.

    Like the Timeout Migration Tool's RabbitMQ target, this runs before anything is hidden or sent.
    """
    missing = missing_delay_levels(api, vhost, generation)
    if missing:
        raise DestinationsRefused(
            f"the {generation} delay infrastructure is missing on vhost {vhost!r}: {', '.join(missing)} "
            f"(declare it first, e.g. with `pulumi up` of this project); {nothing_done}"
        )
    problems = unreachable_destinations(
        destinations, api.bindings(vhost), [queue["name"] for queue in api.queues(vhost)], generation
    )
    if problems:
        delivery = delivery_exchange_name(generation)
        raise DestinationsRefused(
            f"{len(problems)} destination(s) do not exist or are not bound to {delivery!r} with "
            f"'#.<destination>' on vhost {vhost!r}: {describe(problems, counts)} "
            f"(create the endpoints first; {nothing_done})"
        )
