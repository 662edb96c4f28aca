"""The project's program before the transports (``git show c263ed0:infra/program.py``), as much of it as a RabbitMQ
stack runs: it composed the lower-level components itself (``declare_graph``, ``declare_rabbitmq``); it read the
config as the program still does (``read_pulumi_config``). Its SQS part is left out: the engine built for the tests
has no AWS provider."""

from typing import Any, cast

import pulumi

from nsb_delays.components.args import (
    RabbitMqDelayInfrastructureArgs,
    RabbitMqEndpointArgs,
    RabbitMqEndpointPoliciesArgs,
    RabbitMqEndpointUserArgs,
    RabbitMqSharedQueuesArgs,
)
from nsb_delays.components.model.settings import values_of
from nsb_delays.components.rabbitmq import (
    RabbitMqDelayInfrastructure,
    RabbitMqEndpoint,
    RabbitMqEndpointPolicies,
    RabbitMqEndpointUser,
    RabbitMqSharedQueues,
)
from nsb_delays.infra.program import read_pulumi_config
from nsb_delays.stack.config import RabbitMqConfig

Passwords = dict[str, pulumi.Output[str]]
GRAPH_OUTPUTS = ("rabbitmqDeliveryExchange", "rabbitmqParkingExchange")


def declare_graph(config: RabbitMqConfig) -> tuple[dict[str, Any], list[pulumi.Resource], dict[str, Any]]:
    if config.placement.declares_graph:
        infrastructure = RabbitMqDelayInfrastructure(
            f"delays-{config.generation}",
            cast(RabbitMqDelayInfrastructureArgs, values_of(config.infrastructure)),
        )
        RabbitMqSharedQueues("shared-queues", cast(RabbitMqSharedQueuesArgs, values_of(config.shared_queues)))
        exchanges = {
            "delivery_exchange": infrastructure.delivery_exchange,
            "parking_exchange": infrastructure.parking_exchange,
        }
        outputs = dict(zip(GRAPH_OUTPUTS, exchanges.values(), strict=True))
        return exchanges, [infrastructure], outputs | {"rabbitmqDelayLevels": infrastructure.level_names}
    if config.placement.graph_stack is None:
        return {}, [], {}
    graph = pulumi.StackReference(config.placement.graph_stack)
    delivery, parking = GRAPH_OUTPUTS
    return {"delivery_exchange": graph.require_output(delivery), "parking_exchange": graph.get_output(parking)}, [], {}


def declare_rabbitmq(config: RabbitMqConfig, passwords: Passwords) -> dict[str, Any]:
    exchanges, graph, outputs = declare_graph(config)
    endpoints = {
        settings.endpoint: RabbitMqEndpoint(
            f"rabbitmq-{settings.endpoint}",
            cast(RabbitMqEndpointArgs, values_of(settings) | exchanges),
            opts=pulumi.ResourceOptions(depends_on=graph),
        )
        for settings in config.endpoints
    }
    if config.policies.delivery_limit_queues or config.policies.parked_exchanges:
        RabbitMqEndpointPolicies(
            "endpoint-policies",
            cast(
                RabbitMqEndpointPoliciesArgs,
                values_of(config.policies)
                | {"policy_group": config.policy_group, "parking_exchange": exchanges.get("parking_exchange")},
            ),
            opts=pulumi.ResourceOptions(depends_on=[*graph, *endpoints.values()]),
        )
    users = {
        settings.user: RabbitMqEndpointUser(
            f"rabbitmq-user-{settings.user}",
            cast(RabbitMqEndpointUserArgs, values_of(settings) | {"password": passwords[password_key]}),
            opts=pulumi.ResourceOptions(depends_on=list(endpoints.values())),
        )
        for settings, password_key in zip(config.users, config.password_keys, strict=True)
    }
    if users:
        outputs["rabbitmqEndpointUsers"] = {name: c.user_name for name, c in users.items()}
    return outputs | {
        "rabbitmqEndpointQueues": {name: component.receiving_queues for name, component in endpoints.items()},
    }


config, passwords = read_pulumi_config()  # the config as the program reads it, then and now
assert config.rabbitmq is not None, "a stack of this program has a nsb-delays:rabbitmq section"
for key, value in declare_rabbitmq(config.rabbitmq, passwords).items():
    pulumi.export(key, value)
