"""The stack as a stack rule sees it: RabbitMQ objects grouped by broker and vhost, SQS queues by region.

A rule judges absence only where every name is known: a broker whose name, vhost or binding end is unknown
during preview is ``incomplete``, and the rules skip it until ``pulumi up`` knows them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from pulumi_policy import PolicyResource

from nsb_delays.components.model.rabbitmq.graph import delay_levels
from nsb_delays.components.model.rabbitmq.names import Generation
from nsb_delays.components.resource_types import RABBITMQ_BINDING, RABBITMQ_EXCHANGE, RABBITMQ_QUEUE

from .props import UNKNOWN, value_at

DEFAULT_VHOST = "/"
BINDING_ENDS = ("source", "destinationType", "destination", "routingKey")


def name_of(resource: PolicyResource, key: str = "name") -> str | None:
    value = value_at(resource.props, key)
    return value if isinstance(value, str) else None


def vhost_of(resource: PolicyResource) -> str:
    value = value_at(resource.props, "vhost")
    return value if isinstance(value, str) else DEFAULT_VHOST


def broker_of(resource: PolicyResource) -> tuple[str, str]:
    """Which broker and vhost a RabbitMQ object lives in: (provider urn or "" for the default, vhost)."""
    return (resource.provider.urn if resource.provider else "", vhost_of(resource))


@dataclass
class Broker:
    """The RabbitMQ objects of one broker/vhost, by physical name."""

    exchanges: dict[str, PolicyResource] = field(default_factory=dict)
    queues: dict[str, PolicyResource] = field(default_factory=dict)
    bindings: dict[tuple[str, str, str, str], PolicyResource] = field(default_factory=dict)
    # A name or key unknown during preview: absence cannot be judged until `pulumi up` knows it.
    incomplete: bool = False


def brokers(resources: Iterable[PolicyResource]) -> dict[tuple[str, str], Broker]:
    found: dict[tuple[str, str], Broker] = defaultdict(Broker)
    for resource in resources:
        broker = found[broker_of(resource)] if resource.resource_type.startswith("rabbitmq:") else None
        if broker is None:
            continue
        if resource.resource_type in (RABBITMQ_EXCHANGE, RABBITMQ_QUEUE):
            name = value_at(resource.props, "name")
            broker.incomplete |= name is UNKNOWN or value_at(resource.props, "vhost") is UNKNOWN
            objects = broker.exchanges if resource.resource_type == RABBITMQ_EXCHANGE else broker.queues
            if isinstance(name, str):
                objects.setdefault(name, resource)
        elif resource.resource_type == RABBITMQ_BINDING:
            ends = [value_at(resource.props, k) for k in (*BINDING_ENDS, "vhost")]
            broker.incomplete |= UNKNOWN in ends
            if all(isinstance(end, str) for end in ends[:-1]):
                broker.bindings.setdefault((ends[0], ends[1], ends[2], ends[3]), resource)
    return {key: broker for key, broker in found.items() if broker.exchanges or broker.queues or broker.bindings}


def where(key: tuple[str, str]) -> str:
    provider, vhost = key
    return f"vhost {vhost!r}" + (f" of provider {provider.rsplit('::', 1)[-1]!r}" if provider else "")


def generations_present(broker: Broker) -> list[Generation]:
    """A generation is present when any of its level exchanges/queues or its delivery exchange is declared."""
    present: list[Generation] = []
    for generation in Generation:
        names = {spec.name for spec in delay_levels(generation).exchanges}
        if names & (set(broker.exchanges) | set(broker.queues)):
            present.append(generation)
    return present


def sqs_region(resource: PolicyResource) -> str:
    """Where an SQS queue lives: its provider's region, else the provider itself ("" for the default)."""
    if resource.provider is None:
        return ""
    region = value_at(resource.provider.props, "region")
    return region if isinstance(region, str) else resource.provider.urn
