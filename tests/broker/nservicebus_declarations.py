"""Declarations as NServiceBus itself makes them, over AMQP with pika: an independent oracle.

Deliberately NOT built from ``components.model``: this transcribes what the transport does
(``DelayInfrastructure.Build``, the routing topologies' ``Initialize`` and ``BindToDelayInfrastructure``,
``rabbitmq-transport endpoint create``; reference/nservicebus-facts.md sections 1.2, 1.3, 1.7, 2) so
that a test comparing it with the program's resources can catch a model that drifted from NServiceBus.
NServiceBus sends the TTL as an AMQP integer (Int64) and every other argument as a string; pika
encodes a Python int as an AMQP integer and a str as a long string, the same type classes.
``validate_delivery_limit`` transcribes what NServiceBus 10+ checks (and creates) when an endpoint starts.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

import pika

from nsb_delays.brokers.delivery import connection_parameters
from nsb_delays.stack.config import (
    DELIVERY_LIMIT_POLICIES_KEY,
    NAMESPACE,
    StackConfig,
    parse_stack_config,
    read_stack_yaml,
)
from servers.rabbitmq import LocalRabbitMq

NAMES = {
    "v2": ("nsb.v2.delay-level-{:02d}", "nsb.v2.delay-delivery"),
    "v1": ("nsb.delay-level-{:02d}", "nsb.delay-delivery"),
}


def declare_delay_infrastructure(channel: Any, generation: str, *, ttl_as_string: bool = False) -> None:
    """``DelayInfrastructure.Build``: levels 27..0, then the delivery exchange and the level-0 binding."""
    level_name, delivery = NAMES[generation]
    max_level = 27
    for level in range(max_level, -1, -1):
        name = level_name.format(level)
        ttl: Any = int(2**level) * 1000
        arguments: dict[str, Any] = {
            "x-message-ttl": str(ttl) if ttl_as_string else ttl,
            "x-dead-letter-exchange": level_name.format(level - 1) if level > 0 else delivery,
        }
        if generation == "v2":
            arguments |= {
                "x-queue-type": "quorum",
                "x-dead-letter-strategy": "at-least-once",
                "x-overflow": "reject-publish",
            }
        else:
            arguments["x-queue-mode"] = "lazy"
        channel.exchange_declare(name, "topic", durable=True)
        channel.queue_declare(name, durable=True, exclusive=False, auto_delete=False, arguments=arguments)
        channel.queue_bind(name, name, "*." * (max_level - level) + "1.#")
    for level in range(max_level, 0, -1):
        channel.exchange_bind(
            level_name.format(level - 1), level_name.format(level), "*." * (max_level - level) + "0.#"
        )
    channel.exchange_declare(delivery, "topic", durable=True)
    channel.exchange_bind(delivery, level_name.format(0), "*." * max_level + "0.#")


def declare_endpoint(
    channel: Any,
    generation: str,
    routing_topology: str,
    queues: Sequence[str],
    sending_queues: Sequence[str] = ("error", "audit"),
    *,
    queue_type: str = "quorum",
) -> None:
    """``endpoint create`` (durable; ``--queueType``, default quorum): topology ``Initialize`` for the receiving and
    the sending (error, audit) queues, then ``#.<queue>`` delivery bindings for the receiving ones only."""
    _, delivery = NAMES[generation]
    for queue in [*queues, *sending_queues]:
        initialize_queue(channel, routing_topology, queue, queue_type)
    for queue in queues:
        if routing_topology == "conventional":
            channel.exchange_bind(queue, delivery, f"#.{queue}")
        else:
            channel.queue_bind(queue, delivery, f"#.{queue}")


def initialize_queue(channel: Any, routing_topology: str, queue: str, queue_type: str = "quorum") -> None:
    """The routing topology's ``Initialize`` of one queue: the queue (``x-queue-type: quorum`` for quorum, no argument
    for classic) and, conventional, a fanout exchange of its name bound to it with no key."""
    arguments = {"x-queue-type": "quorum"} if queue_type == "quorum" else {}
    channel.queue_declare(queue, durable=True, arguments=arguments)
    if routing_topology == "conventional":
        channel.exchange_declare(queue, "fanout", durable=True)
        channel.queue_bind(queue, queue, "")


def declare_legacy_timeout_queues(channel: Any, routing_topology: str, endpoint: str, queue_type: str) -> None:
    """The timeout manager's satellite queues an endpoint created before native delays (``<endpoint>.Timeouts``,
    ``<endpoint>.TimeoutsDispatcher``; docs.particular.net ``nservicebus/messaging/timeout-manager.md``): created as
    any queue of the endpoint, through the topology's ``Initialize``, and never bound to a delay graph."""
    for suffix in (".Timeouts", ".TimeoutsDispatcher"):
        initialize_queue(channel, routing_topology, endpoint + suffix, queue_type)


def setup_type_subscriptions(channel: Any, event: str, parents: Sequence[str]) -> None:
    """``ConventionalRoutingTopology.SetupTypeSubscriptions``: the event type's fanout exchange, then each base class's
    (``System:Object`` last) and interface's, each bound ``parent <- type``."""
    channel.exchange_declare(event, "fanout", durable=True)
    for parent in parents:
        channel.exchange_declare(parent, "fanout", durable=True)
        channel.exchange_bind(destination=parent, source=event, routing_key="")


def subscribe(channel: Any, endpoint: str, event: str, parents: Sequence[str]) -> None:
    """``ConventionalRoutingTopology.SetupSubscription``: the type's exchanges, then ``endpoint <- type``."""
    setup_type_subscriptions(channel, event, parents)
    channel.exchange_bind(destination=endpoint, source=event, routing_key="")


# --- BrokerVerifier.ValidateDeliveryLimit (NServiceBus.RabbitMQ 10+, Administration/BrokerVerifier.cs) ----------

UNLIMITED = 100_000  # Queue.BigValueInsteadOfActuallyUnlimited


def _dotnet_escape(name: str) -> str:
    """Regex.Escape: backslash before \\ * + ? | { [ ( ) ^ $ . # and space; \\t \\n \\f \\r as letter escapes."""
    letters = {"\t": "t", "\n": "n", "\f": "f", "\r": "r"}
    return "".join("\\" + letters.get(c, c) if c in "\\*+?|{[()^$.# \t\n\f\r" else c for c in name)


def _limit(value: Any) -> int | None:
    return -1 if isinstance(value, str) and value.lower() == "unlimited" else value


def validate_delivery_limit(api: Any, vhost: str, queue_name: str, broker_version: tuple[int, ...]) -> str:
    """What the message pump's ``ValidateDeliveryLimit`` does at endpoint start, against ``api`` (ManagementApi).

    Returns "ok", "created policy" (it created ``nsb.<queue>.delivery-limit``) or raises ``RuntimeError`` with
    the transport's refusal. Waits for the queue's effective policy definition like ``GetQueueDetails``.
    """
    path = f"queues/{quote(vhost, safe='')}/{quote(queue_name, safe='')}"
    for _ in range(60):
        queue = api.request("GET", path)
        if queue.get("effective_policy_definition") is not None:
            break
        time.sleep(0.5)
    if queue.get("type") != "quorum":
        return "ok"
    argument = _limit((queue.get("arguments") or {}).get("x-delivery-limit"))
    from_policy = _limit((queue.get("effective_policy_definition") or {}).get("delivery-limit"))
    limit = _limit(queue.get("delivery_limit"))  # GetDeliveryLimit: 4.x reports it, 3.x: lowest of the two
    if limit is None:
        known = [v for v in (from_policy, argument) if v is not None]
        limit = max(0, min(known)) if known else UNLIMITED
    applied = queue.get("policy")
    transport_policy = bool(applied) and applied.startswith("nsb.") and applied.endswith(".delivery-limit")
    if limit == UNLIMITED:
        return "ok"
    if not (limit == -1 and transport_policy) and (argument is not None or from_policy is not None):
        raise RuntimeError(f"The delivery limit for '{queue_name}' is set to the non-default value of '{limit}'.")
    if broker_version < (4, 0, 0):
        raise RuntimeError("Cannot create unlimited delivery limit policies in RabbitMQ versions prior to 4.0.")
    if applied and not transport_policy:
        raise RuntimeError(f"'{queue_name}' queue because it already has a '{applied}' policy applied.")
    body = {"pattern": f"^{_dotnet_escape(queue_name)}$", "apply-to": "quorum_queues", "priority": 0,
            "definition": {"delivery-limit": UNLIMITED}}  # fmt: skip
    api.request("PUT", f"policies/{quote(vhost, safe='')}/{quote(f'nsb.{queue_name}.delivery-limit', safe='')}", body)
    return "created policy"


# --- a stack's topology declared as NServiceBus would (which names: the stack config; how: above) ---------


def endpoint_only_section(
    vhost: str,
    generation: str,
    topology: str,
    delivery_limit_policies: bool = False,
    park_unroutable: bool = True,
    policy_scope: str = "endpoint",
) -> dict[str, Any]:
    """The dev stack's ``nsb-delays:rabbitmq`` without the legacy timeout queues that ``endpoint create`` doesn't
    make; ``park_unroutable=False`` leaves out the parking objects, which NServiceBus never declares. One policy per
    queue, named as the transport names its own, unless ``policy_scope`` is ``stack``."""
    dev = read_stack_yaml("dev")[f"{NAMESPACE}:rabbitmq"]
    endpoints = [
        {key: value for key, value in endpoint.items() if key != "legacyTimeoutManager"}
        if isinstance(endpoint, dict)
        else endpoint
        for endpoint in dev["endpoints"]
    ]
    section: dict[str, Any] = {
        **dev,
        "vhost": vhost,
        "generation": generation,
        "routingTopology": topology,
        "endpoints": endpoints,
        DELIVERY_LIMIT_POLICIES_KEY: delivery_limit_policies,
        "parkUnroutable": park_unroutable,
        "policyScope": policy_scope,
    }
    return section


def endpoint_only_stack(
    vhost: str, generation: str, topology: str, delivery_limit_policies: bool = False, park_unroutable: bool = True
) -> StackConfig:
    """``endpoint_only_section`` parsed."""
    section = endpoint_only_section(vhost, generation, topology, delivery_limit_policies, park_unroutable)
    return parse_stack_config({"rabbitmq": section})


def declare_as_nservicebus(rabbitmq: LocalRabbitMq, stack: StackConfig, **options: Any) -> None:
    """The stack's delay graph and receiving/error/audit queues (each endpoint's of its queue type), and the legacy
    timeout queues of the endpoints that have them, declared over AMQP as NServiceBus does."""
    config = stack.rabbitmq
    assert config is not None
    connection = pika.BlockingConnection(connection_parameters(rabbitmq.amqp_url, config.vhost))
    try:
        channel = connection.channel()
        declare_delay_infrastructure(channel, config.generation, **options)
        shared = config.shared_queues
        for name in (shared.error_queue, shared.audit_queue):
            initialize_queue(channel, shared.routing_topology, name, shared.queue_type)
        for endpoint in config.endpoints:
            declare_endpoint(
                channel,
                config.generation,
                shared.routing_topology,
                endpoint.receiving_queues,
                (),
                queue_type=endpoint.queue_type,
            )
            if endpoint.legacy_timeout_manager:
                declare_legacy_timeout_queues(channel, shared.routing_topology, endpoint.endpoint, endpoint.queue_type)
    finally:
        if connection.is_open:
            connection.close()
