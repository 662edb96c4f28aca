"""A user's program: the components as a team writes them, then the case the stack config names (if any)."""

import pulumi

from nsb_delays.components import RabbitMqDelayInfrastructure, RabbitMqEndpoint
from tests.engine import policy_cases

config = pulumi.Config("case")
vhost = config.get("vhost") or "/"
delays = RabbitMqDelayInfrastructure("delays", {"generation": "v2", "vhost": vhost, "broker_version": "3.10"})
for name in config.get_object("endpoints") or ["Sales", "Billing"]:
    RabbitMqEndpoint(
        f"endpoint-{name}",
        {
            "endpoint": name,
            "vhost": vhost,
            "delivery_limit_policies": False,
            "delivery_exchange": delays.delivery_exchange,
            "broker_version": "3.10",
        },
        opts=pulumi.ResourceOptions(depends_on=[delays]),
    )
case = config.get("name")
if case:
    policy_cases.CASES[case].declare(vhost)
pulumi.export("deliveryExchange", delays.delivery_exchange)
