"""The Python twin of ``../yaml/Pulumi.yaml``: the same components, names and arguments, in Python."""

import pulumi

from nsb_delays.components import (
    QueueType,
    RabbitMqDelayInfrastructure,
    RabbitMqEndpoint,
    RabbitMqEndpointPolicies,
    RabbitMqSharedQueues,
    RoutingTopology,
)

config = pulumi.Config()
vhost = config.require("vhost")
broker_version = config.require("brokerVersion")
delivery_limit_policies = config.require_bool("deliveryLimitPolicies")

delays = RabbitMqDelayInfrastructure("delays", {"vhost": vhost, "broker_version": broker_version})
RabbitMqSharedQueues("shared", {"vhost": vhost, "broker_version": broker_version})
RabbitMqEndpoint(
    "sales",
    {
        "endpoint": "Sales",
        "vhost": vhost,
        "instance_discriminators": ["blue"],
        "legacy_timeout_manager": True,
        "delivery_limit_policies": delivery_limit_policies,
        "broker_version": broker_version,
        "delivery_exchange": delays.delivery_exchange,
        "parking_exchange": delays.parking_exchange,
    },
)
RabbitMqEndpoint(
    "billing",
    {
        "endpoint": "Billing",
        "vhost": vhost,
        "routing_topology": RoutingTopology.DIRECT,
        "queue_type": QueueType.CLASSIC,
        "delivery_limit_policies": delivery_limit_policies,
        "broker_version": broker_version,
        "delivery_exchange": delays.delivery_exchange,
    },
)
RabbitMqEndpointPolicies(
    "policies",
    {
        "policy_group": "components",
        "vhost": vhost,
        "delivery_limit_policies": delivery_limit_policies,
        "broker_version": broker_version,
        "delivery_limit_queues": ["Sales", "Sales-blue"],
        "parked_exchanges": ["Sales", "Sales-blue"],
        "parking_exchange": delays.parking_exchange,
    },
)
pulumi.export("deliveryExchange", delays.delivery_exchange)
pulumi.export("levelNames", delays.level_names)
