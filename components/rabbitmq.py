"""Pulumi ComponentResources that declare the model's RabbitMQ topology through pulumi-rabbitmq.

Thin adapters: every name, argument and key comes from ``components.model.rabbitmq``. Each queue's
arguments go in the field a provider read gives them back in (``model.queue_arguments_field``):
``arguments_json`` when a value is not a string (the ``arguments`` map sends every value as a string,
and RabbitMQ refuses a string ``x-message-ttl``), the string map ``arguments`` when all are strings,
so that ``pulumi import`` and ``pulumi refresh`` find exactly what the program declares. The queue
type is explicit where the broker (``broker_version``, default 4.0) writes the default into a queue's
arguments (``model.queue_arguments_as_stored``): RabbitMQ 4.x, see ``model.QUEUE_TYPE_STORED_FROM``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pulumi
import pulumi_rabbitmq as rabbitmq

from .encoding import arguments_json, binding_import_id, import_id, policy_definition, queue_arguments_field
from .model import rabbitmq as model
from .model.settings import DelayInfrastructureSettings, EndpointSettings, EndpointUserSettings, SharedQueuesSettings

TYPE_PREFIX = "nsb-delays:index:"


def queue_settings(
    queue: model.QueueSpec, broker_version: str = model.DEFAULT_BROKER_VERSION
) -> rabbitmq.QueueSettingsArgs:
    """Durability plus ``model.queue_arguments_as_stored`` in the field ``model.queue_arguments_field`` picks."""
    arguments = model.queue_arguments_as_stored(queue.arguments, broker_version)
    field = queue_arguments_field(arguments)
    if field == "arguments_json":
        return rabbitmq.QueueSettingsArgs(
            durable=queue.durable, auto_delete=queue.auto_delete, arguments_json=arguments_json(arguments)
        )
    if field == "arguments":
        return rabbitmq.QueueSettingsArgs(
            durable=queue.durable,
            auto_delete=queue.auto_delete,
            arguments={key: str(value) for key, value in arguments.items()},
        )
    return rabbitmq.QueueSettingsArgs(durable=queue.durable, auto_delete=queue.auto_delete)


class _Declared:
    """The resources one component declared for a model ``Topology``, keyed by physical name."""

    def __init__(self) -> None:
        self.exchanges: dict[str, rabbitmq.Exchange] = {}
        self.queues: dict[str, rabbitmq.Queue] = {}
        self.bindings: list[rabbitmq.Binding] = []
        self.policies: dict[str, rabbitmq.Policy] = {}


def declare_topology(
    component: pulumi.ComponentResource,
    name: str,
    topology: model.Topology,
    *,
    vhost: str,
    protect_delay_queues: bool = True,
    existing_exchanges: Mapping[str, rabbitmq.Exchange] | None = None,
    adopt_existing: bool = False,
    broker_version: str = model.DEFAULT_BROKER_VERSION,
) -> _Declared:
    """Declare every exchange, queue, binding and policy of ``topology`` as children of ``component``.

    A binding takes its source and destination from the ``name`` outputs of the exchanges/queues it
    joins (declared here or passed in), so the engine records them as *property* dependencies: it
    creates the binding after its ends, deletes it first, and when an end is replaced (deleted and
    re-declared, which drops its bindings on the broker) replaces the binding with it. A plain
    ``depends_on`` would not do that (pulumi/pulumi ``pkg/resource/deploy/step_generator.go``,
    ``calculateDependentReplacements`` only follows property dependencies). With ``adopt_existing``
    every object is imported (``import_``) instead of created: ``pulumi up`` then takes over what
    NServiceBus installers declared, and fails rather than replace anything whose properties differ;
    the parking objects, which only this project declares, are created.
    """
    declared = _Declared()

    def adopt(
        spec: model.ExchangeSpec | model.QueueSpec | model.BindingSpec | model.PolicySpec, physical_id: str
    ) -> str | None:
        """Import what NServiceBus declared; what only we declare (parking) is created, even when adopting."""
        return physical_id if adopt_existing and spec.nservicebus_declares else None

    for exchange in topology.exchanges:
        declared.exchanges[exchange.name] = rabbitmq.Exchange(
            f"{name}-{exchange.name}",
            name=exchange.name,
            vhost=vhost,
            settings=rabbitmq.ExchangeSettingsArgs(
                type=exchange.type, durable=exchange.durable, auto_delete=exchange.auto_delete
            ),
            opts=pulumi.ResourceOptions(parent=component, import_=adopt(exchange, import_id(exchange.name, vhost))),
        )
    for queue in topology.queues:
        guard = queue.keeps_messages and protect_delay_queues
        declared.queues[queue.name] = rabbitmq.Queue(
            f"{name}-{queue.name}",
            name=queue.name,
            vhost=vhost,
            settings=queue_settings(queue, broker_version),
            opts=pulumi.ResourceOptions(
                parent=component,
                protect=guard,
                retain_on_delete=guard,
                import_=adopt(queue, import_id(queue.name, vhost)),
            ),
        )
    known_exchanges: dict[str, rabbitmq.Exchange] = {**(existing_exchanges or {}), **declared.exchanges}
    for binding in topology.bindings:
        source = known_exchanges.get(binding.source)
        destination: rabbitmq.Exchange | rabbitmq.Queue | None = (
            declared.queues.get(binding.destination)
            if binding.destination_type == "queue"
            else known_exchanges.get(binding.destination)
        )
        declared.bindings.append(
            rabbitmq.Binding(
                f"{name}-{binding.source}-to-{binding.destination_type}-{binding.destination}",
                source=source.name if source else binding.source,
                destination=destination.name if destination else binding.destination,
                destination_type=binding.destination_type,
                routing_key=binding.routing_key,
                vhost=vhost,
                opts=pulumi.ResourceOptions(
                    parent=component, import_=adopt(binding, binding_import_id(binding, vhost))
                ),
            )
        )
    for policy in topology.policies:
        target_resource = declared.queues.get(policy.target) or known_exchanges.get(policy.target)
        alternate = known_exchanges.get(str(policy.definition.get(model.ALTERNATE_EXCHANGE_POLICY_KEY, "")))
        declared.policies[policy.name] = rabbitmq.Policy(
            f"{name}-{policy.name}",
            name=policy.name,
            vhost=vhost,
            policy=rabbitmq.PolicyPolicyArgs(
                pattern=policy.pattern,
                priority=policy.priority,
                apply_to=policy.apply_to,
                definition=policy_definition(policy.definition),
            ),
            opts=pulumi.ResourceOptions(
                parent=component,
                depends_on=[resource for resource in (target_resource, alternate) if resource],
                import_=adopt(policy, import_id(policy.name, vhost)),
            ),
        )
    return declared


class RabbitMqDelayInfrastructure(pulumi.ComponentResource):
    """The 28 delay levels, the delivery exchange and their bindings, exactly as NServiceBus declares them,
    and (``park_unroutable``, default) the parking exchange and queue with the policy that makes the
    parking exchange the delivery exchange's alternate exchange (Particular/NServiceBus.RabbitMQ#1407).

    Level queues hold delayed messages for up to 4.25 years, the parking queue what could not be
    delivered, and any change to them replaces (deletes) them, so they are protected and retained on
    delete unless ``protect_delay_queues=False``.
    """

    delivery_exchange: pulumi.Output[str]
    level_names: pulumi.Output[list[str]]
    generation: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        *,
        generation: str = model.DEFAULT_GENERATION,
        vhost: str = "/",
        protect_delay_queues: bool = True,
        park_unroutable: bool = True,
        adopt_existing: bool = False,
        broker_version: str = model.DEFAULT_BROKER_VERSION,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(f"{TYPE_PREFIX}RabbitMqDelayInfrastructure", name, None, opts)
        topology = DelayInfrastructureSettings(generation, park_unroutable).topology()
        self.resources = declare_topology(
            self,
            name,
            topology,
            vhost=vhost,
            protect_delay_queues=protect_delay_queues,
            adopt_existing=adopt_existing,
            broker_version=broker_version,
        )
        delivery = model.delivery_exchange_name(generation)
        self.delivery_exchange_resource = self.resources.exchanges[delivery]
        self.parking_exchange_resource = self.resources.exchanges.get(model.parking_name(generation))
        self.delivery_exchange = self.delivery_exchange_resource.name
        self.level_names = pulumi.Output.from_input([q.name for q in topology.queues if q.holds_delayed_messages])
        self.generation = pulumi.Output.from_input(generation)
        self.register_outputs(
            {"deliveryExchange": self.delivery_exchange, "levelNames": self.level_names, "generation": self.generation}
        )


class RabbitMqEndpoint(pulumi.ComponentResource):
    """What ``rabbitmq-transport endpoint create`` makes when installers are off.

    The endpoint queue (and instance queues), for conventional topology the fanout exchange of the
    same name bound to it, the ``#.<endpoint>`` delivery binding for each receiving queue, with
    ``legacy_timeout_manager`` the ``.Timeouts``/``.TimeoutsDispatcher`` queues, and for quorum
    receiving queues NServiceBus's ``nsb.<queue>.delivery-limit`` policy (by default when ``broker_version`` is
    4.0 or later; ``delivery_limit_policies=False`` when policies are managed elsewhere).
    In the conventional topology with ``park_unroutable`` (default) each receiving queue's exchange gets
    the parking exchange as alternate exchange by policy: a delayed message routed to the exchange of a
    deleted queue is parked instead of stalling its level.
    """

    queue_name: pulumi.Output[str]
    receiving_queues: pulumi.Output[list[str]]
    delivery_binding_key: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        *,
        endpoint: str,
        generation: str = model.DEFAULT_GENERATION,
        routing_topology: str = "conventional",
        queue_type: str = "quorum",
        vhost: str = "/",
        instance_discriminators: Sequence[str] = (),
        legacy_timeout_manager: bool = False,
        delivery_limit_policies: bool | None = None,
        park_unroutable: bool = True,
        delivery_exchange: rabbitmq.Exchange | None = None,
        parking_exchange: rabbitmq.Exchange | None = None,
        adopt_existing: bool = False,
        broker_version: str = model.DEFAULT_BROKER_VERSION,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(f"{TYPE_PREFIX}RabbitMqEndpoint", name, None, opts)
        topology = EndpointSettings(
            endpoint,
            generation=generation,
            routing_topology=routing_topology,
            queue_type=queue_type,
            instance_discriminators=tuple(instance_discriminators),
            legacy_timeout_manager=legacy_timeout_manager,
            delivery_limit_policies=delivery_limit_policies,
            park_unroutable=park_unroutable,
            broker_version=broker_version,
        ).topology()
        existing = {
            name: resource
            for name, resource in (
                (model.delivery_exchange_name(generation), delivery_exchange),
                (model.parking_name(generation), parking_exchange),
            )
            if resource is not None
        }
        self.resources = declare_topology(
            self,
            name,
            topology,
            vhost=vhost,
            existing_exchanges=existing,
            adopt_existing=adopt_existing,
            broker_version=broker_version,
        )
        self.queue_name = self.resources.queues[endpoint].name
        self.receiving_queues = pulumi.Output.from_input(
            [b.destination for b in topology.bindings if b.role == "endpoint-delivery"]
        )
        self.delivery_binding_key = pulumi.Output.from_input(model.endpoint_binding_key(endpoint))
        self.register_outputs(
            {
                "queueName": self.queue_name,
                "receivingQueues": self.receiving_queues,
                "deliveryBindingKey": self.delivery_binding_key,
            }
        )


class RabbitMqSharedQueues(pulumi.ComponentResource):
    """The ``error`` and ``audit`` queues every endpoint sends to: declared once per broker/vhost."""

    error_queue: pulumi.Output[str]
    audit_queue: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        *,
        routing_topology: str = "conventional",
        queue_type: str = "quorum",
        error_queue: str = model.DEFAULT_ERROR_QUEUE,
        audit_queue: str = model.DEFAULT_AUDIT_QUEUE,
        vhost: str = "/",
        adopt_existing: bool = False,
        broker_version: str = model.DEFAULT_BROKER_VERSION,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(f"{TYPE_PREFIX}RabbitMqSharedQueues", name, None, opts)
        topology = SharedQueuesSettings(routing_topology, queue_type, error_queue, audit_queue).topology()
        self.resources = declare_topology(
            self, name, topology, vhost=vhost, adopt_existing=adopt_existing, broker_version=broker_version
        )
        self.error_queue = self.resources.queues[error_queue].name
        self.audit_queue = self.resources.queues[audit_queue].name
        self.register_outputs({"errorQueue": self.error_queue, "auditQueue": self.audit_queue})


class RabbitMqEndpointUser(pulumi.ComponentResource):
    """The RabbitMQ user an installer-less endpoint logs in as, with the least it needs and nothing more:
    its tags, its ``configure``/``write``/``read`` permissions in ``vhost`` and one topic permission per delay
    exchange (``model.permissions.endpoint_user_grants``: the calls each right is for, cited to NServiceBus).

    ``password`` should be a Pulumi secret (``pulumi.Config().require_secret(...)``); it is made one here anyway.
    """

    user_name: pulumi.Output[str]
    tags: pulumi.Output[list[str]]

    def __init__(
        self,
        name: str,
        *,
        user: str,
        password: pulumi.Input[str],
        receiving_queues: Sequence[str],
        sends_to: Sequence[str] = (),
        publishes: Sequence[str] = (),
        subscribes_to: Sequence[str] = (),
        management_api: bool = True,
        routing_topology: str = "conventional",
        generation: str = model.DEFAULT_GENERATION,
        error_queue: str = model.DEFAULT_ERROR_QUEUE,
        audit_queue: str = model.DEFAULT_AUDIT_QUEUE,
        vhost: str = "/",
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(f"{TYPE_PREFIX}RabbitMqEndpointUser", name, None, opts)
        grants = EndpointUserSettings(
            user,
            tuple(receiving_queues),
            tuple(sends_to),
            tuple(publishes),
            tuple(subscribes_to),
            management_api,
            routing_topology,
            generation,
            error_queue,
            audit_queue,
        ).grants(vhost)
        child = pulumi.ResourceOptions(parent=self)
        account = rabbitmq.User(
            f"{name}-user",
            name=grants.user,
            password=pulumi.Output.secret(password),
            tags=list(grants.tags),
            opts=child,
        )
        rabbitmq.Permissions(
            f"{name}-permissions",
            user=account.name,
            vhost=vhost,
            permissions=rabbitmq.PermissionsPermissionsArgs(
                configure=grants.configure, write=grants.write, read=grants.read
            ),
            opts=child,
        )
        rabbitmq.TopicPermissions(
            f"{name}-topic-permissions",
            user=account.name,
            vhost=vhost,
            permissions=[
                rabbitmq.TopicPermissionsPermissionArgs(exchange=t.exchange, write=t.write, read=t.read)
                for t in grants.topic
            ],
            opts=child,
        )
        self.user_name = account.name
        self.tags = pulumi.Output.from_input(list(grants.tags))
        self.register_outputs({"userName": self.user_name, "tags": self.tags})
