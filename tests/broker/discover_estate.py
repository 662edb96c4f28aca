"""An estate NServiceBus endpoints with installers on declared, for ``nsb-delays discover`` to read back.

Three endpoints as a stack names them (``declared_section``): Billing with an instance queue and the legacy timeout
queues, Sales, Shipping on classic queues, each quorum receiving queue with the delivery-limit policy its endpoint
creates at start on RabbitMQ 4.x; in the conventional topology Billing and Shipping subscribe to an event
each and Sales publishes a third that nobody subscribes to; in the direct topology both subscribe through
``amq.topic``. Declared over AMQP as NServiceBus declares them (``nservicebus_declarations``, an oracle independent of
the model), beside a queue and an exchange of other software.
"""

from __future__ import annotations

from typing import Any

import pika

from nsb_delays.brokers.delivery import connection_parameters
from nsb_delays.brokers.management import ManagementApi
from nsb_delays.components.model.permissions import BASE_EVENT_EXCHANGE, TOPIC_EXCHANGE
from nsb_delays.components.model.rabbitmq.delivery_limits import DELIVERY_LIMIT_POLICY_MINIMUM_BROKER_VERSION
from nsb_delays.stack.config import StackConfig, parse_stack_config
from nsb_delays.stack.discovery import SECRET_PLACEHOLDER
from servers.rabbitmq import LocalRabbitMq
from tests.broker import nservicebus_declarations as nsb

IEVENT = "NServiceBus:IEvent"
ORDER_PLACED, ORDER_BILLED, ORDER_CANCELLED = (
    "MyCo.Events:OrderPlaced",
    "MyCo.Events:OrderBilled",
    "MyCo.Events:OrderCancelled",
)
PARENTS = (BASE_EVENT_EXCHANGE, IEVENT)  # each event's base class chain ends at System:Object; IEvent is an interface
SUBSCRIPTIONS = {"Billing": ORDER_PLACED, "Shipping": ORDER_BILLED}
DIRECT_KEYS = {
    "Billing": "MyCo.Events.OrderPlaced",
    "Shipping": "MyCo.Events.OrderBilled",
}  # DefaultRoutingKeyConvention
OTHER_QUEUE, OTHER_EXCHANGE = "reports.daily", "crm.feed"


def login(rabbitmq: LocalRabbitMq) -> list[str]:
    """The command line's management options for the test broker's administrator."""
    return ["--management-url", rabbitmq.management_url, "--username", rabbitmq.username,
            "--password", rabbitmq.password]  # fmt: skip


def declared_section(vhost: str, topology: str, broker_version: tuple[int, ...]) -> dict[str, Any]:
    """The stack the estate is: what ``discover`` must write, key for key."""

    def user(endpoint: str) -> dict[str, Any]:
        entry: dict[str, Any] = {"passwordKey": f"{endpoint.lower()}Password"}
        if endpoint in SUBSCRIPTIONS:
            subscribed = [TOPIC_EXCHANGE] if topology == "direct" else sorted([SUBSCRIPTIONS[endpoint], IEVENT])
            entry["subscribesTo"] = subscribed
        return entry

    # NServiceBus.RabbitMQ 10+ endpoints create their own delivery-limit policies when they start on 4.x
    own_policies = {"policyScope": "endpoint"} if broker_version >= DELIVERY_LIMIT_POLICY_MINIMUM_BROKER_VERSION else {}
    return own_policies | {
        "vhost": vhost,
        "brokerVersion": ".".join(map(str, broker_version[:2])),
        "generation": "v2",
        "routingTopology": topology,
        "queueType": "quorum",
        "endpoints": [
            {
                "name": "Billing",
                "instanceDiscriminators": ["blue"],
                "legacyTimeoutManager": True,
                "user": user("Billing"),
            },
            {"name": "Sales", "user": user("Sales")},
            {"name": "Shipping", "queueType": "classic", "user": user("Shipping")},
        ],
    }


def parsed(section: dict[str, Any], stack: str = "stack") -> StackConfig:
    """``section`` parsed, each endpoint user's password key holding a secret's shape."""
    keys = [e["user"]["passwordKey"] for e in section["endpoints"] if isinstance(e, dict) and "user" in e]
    return parse_stack_config({"rabbitmq": section, **{key: dict(SECRET_PLACEHOLDER) for key in keys}}, stack)


def declare_estate(
    rabbitmq: LocalRabbitMq, management: ManagementApi, section: dict[str, Any], broker_version: tuple[int, ...]
) -> None:
    """The graph, the endpoints, their subscriptions and a publication as NServiceBus makes them, each receiving
    queue's message pump started (``ValidateDeliveryLimit``: its own policy on 4.x), and two objects of other
    software."""
    config = parsed(section)
    nsb.declare_as_nservicebus(rabbitmq, config)
    for queue in config.rabbitmq.receiving_queues() if config.rabbitmq else ():
        nsb.validate_delivery_limit(management, section["vhost"], queue, broker_version)
    connection = pika.BlockingConnection(connection_parameters(rabbitmq.amqp_url, section["vhost"]))
    try:
        channel = connection.channel()
        if section["routingTopology"] == "conventional":
            for endpoint, event in SUBSCRIPTIONS.items():
                nsb.subscribe(channel, endpoint, event, PARENTS)
            nsb.setup_type_subscriptions(channel, ORDER_CANCELLED, PARENTS)  # Sales publishes it
        else:
            for endpoint, key in DIRECT_KEYS.items():
                channel.queue_bind(endpoint, TOPIC_EXCHANGE, key)  # DirectRoutingTopology.SetupSubscription
        channel.queue_declare(OTHER_QUEUE, durable=True)
        channel.exchange_declare(OTHER_EXCHANGE, "topic", durable=True)
    finally:
        connection.close()
