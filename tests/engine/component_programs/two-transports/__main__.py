"""Three transports in one program: ``orders`` and ``shipping`` in two vhosts of the default provider's broker,
``other`` in a vhost of another broker, through its own provider."""

import pulumi
import pulumi_rabbitmq as rabbitmq

from nsb_delays.components import RabbitMqTransport

config = pulumi.Config()
broker_version = config.require("brokerVersion")
orders = RabbitMqTransport(
    "orders",
    {
        "vhost": config.require("ordersVhost"),
        "broker_version": broker_version,
        "endpoints": ["Sales", {"name": "Billing", "instance_discriminators": ["blue"]}],
    },
)
shipping = RabbitMqTransport(
    "shipping",
    {"vhost": config.require("shippingVhost"), "broker_version": broker_version, "endpoints": ["Shipping"]},
)
other_broker = rabbitmq.Provider(
    "other-broker",
    endpoint=config.require("otherEndpoint"),
    username=config.require("otherUsername"),
    password=config.require_secret("otherPassword"),
)
other = RabbitMqTransport(
    "other",
    {"vhost": config.require("otherVhost"), "broker_version": broker_version, "endpoints": ["Sales", "Shipping"]},
    opts=pulumi.ResourceOptions(provider=other_broker),
)
for name, transport in (("orders", orders), ("shipping", shipping), ("other", other)):
    pulumi.export(f"{name}EndpointQueues", transport.rabbitmq_endpoint_queues)
