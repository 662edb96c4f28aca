"""Bare pulumi-rabbitmq resources: a delivery-limit policy as NServiceBus names it, or objects whose names hold
``@`` or ``/``, in the vhost the stack's config gives (``case:vhost``)."""

import pulumi
import pulumi_rabbitmq as rabbitmq

config = pulumi.Config("case")
vhost = config.require("vhost")
name = config.require("name")

if name == "policy":
    rabbitmq.Policy(
        "sales-delivery-limit",
        name="nsb.Sales.delivery-limit",
        vhost=vhost,
        policy=rabbitmq.PolicyPolicyArgs(
            pattern="^Sales$",
            priority=config.get_int("priority") or 0,
            apply_to="queues",
            definition={"delivery-limit": "100000"},
        ),
    )
elif name == "at-sign":
    rabbitmq.Queue("at", name="Sales@eu", vhost=vhost, settings=rabbitmq.QueueSettingsArgs(durable=True))
elif name == "slash":
    queue = rabbitmq.Queue("slash", name="team/Sales", vhost=vhost, settings=rabbitmq.QueueSettingsArgs(durable=True))
    rabbitmq.Binding(
        "bind",
        source="amq.direct",
        destination=queue.name,
        destination_type="queue",
        routing_key="team/Sales",
        vhost=vhost,
    )
