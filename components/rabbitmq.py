"""Pulumi ComponentResources that declare the model's RabbitMQ topology through pulumi-rabbitmq.

Each takes ``(name, args: <Component>Args, opts)`` (Pulumi's convention; ``components/args.py``), turns ``args`` into
its settings (``components/model/settings.py``) and declares what they say. Thin adapters: every name, argument and
key comes from the model, every provider encoding from ``components.encoding``: a queue's arguments as a broker of
``broker_version`` stores them (``rmq.queue_arguments_as_stored``), in the field a provider read gives them back in.
"""

# No `from __future__ import annotations`: Pulumi's analyzer reads the annotations (args, outputs) as types.
from collections.abc import Mapping
from typing import Any, Optional, Self

import pulumi
import pulumi_rabbitmq as rabbitmq

from .args import (
    RabbitMqDelayInfrastructureArgs,
    RabbitMqEndpointArgs,
    RabbitMqEndpointPoliciesArgs,
    RabbitMqEndpointUserArgs,
    RabbitMqSharedQueuesArgs,
)
from .encoding import arguments_json, binding_import_id, import_id, policy_definition, queue_arguments_field
from .inputs import Checked, refusals_as_input_errors, settings_of_args
from .model.rabbitmq.arguments import queue_arguments_as_stored
from .model.rabbitmq.graph import ALTERNATE_EXCHANGE_POLICY_KEY
from .model.rabbitmq.names import delivery_exchange_name, endpoint_binding_key, parking_name
from .model.rabbitmq.objects import BindingSpec, ExchangeSpec, PolicySpec, QueueSpec, Topology
from .model.rabbitmq.versions import BrokerVersion
from .model.settings import (
    PACKAGE,
    DelayInfrastructureSettings,
    EndpointPoliciesSettings,
    EndpointSettings,
    EndpointUserSettings,
    SharedQueuesSettings,
)

TYPE_PREFIX = f"{PACKAGE}:index:"
Spec = ExchangeSpec | QueueSpec | BindingSpec | PolicySpec
# where, and on which broker
Placement = DelayInfrastructureSettings | SharedQueuesSettings | EndpointSettings | EndpointPoliciesSettings


def queue_settings(queue: QueueSpec, broker_version: BrokerVersion) -> rabbitmq.QueueSettingsArgs:
    """Durability plus the arguments as the broker stores them, in the field ``queue_arguments_field`` picks."""
    arguments = queue_arguments_as_stored(queue.arguments, broker_version)
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


class SharedVhost:
    """What the components of one transport share in its vhost, held by the transport (a lower component used on its
    own holds its own): the order of its policy changes, and the exchanges and queues its children declared so far,
    by name, for the policies of a later child to wait for.

    Each policy waits for the one declared before it in the vhost, one policy change at a time: on each change the
    broker reads the vhost's policies, then recomputes and writes the policy of every exchange and queue
    (rabbitmq-server ``deps/rabbit/src/rabbit_policy.erl``, ``update_matched_objects``: ``list(VHost)``, then
    ``rabbit_db_policy:update``), so two changes at once can each write a result computed without the other.
    Measured on a three-node RabbitMQ 4.0.5 cluster: of four ``pulumi up`` of the dev stack into new vhosts, one left
    exchange ``Billing`` without its alternate-exchange policy although the policy existed (``rabbitmqctl
    list_exchanges name policy``: none); with the chain, 12 of 12 left none."""

    def __init__(self) -> None:
        self.last_policy: rabbitmq.Policy | None = None
        self.objects: dict[str, rabbitmq.Exchange | rabbitmq.Queue] = {}


class Declared:
    """The resources one component declares for a model ``Topology``, keyed by physical name, as children of the
    component, with the options of where they go (vhost, broker version, adoption) and what they keep.

    A binding takes its source and destination from the ``name`` outputs of the exchanges/queues it
    joins (declared here, or given in ``exchange_names`` as another component's outputs), so the engine records
    them as *property* dependencies: it creates the binding after its ends, deletes it first, and when an end is
    replaced (deleted and re-declared, which drops its bindings on the broker) replaces the binding with it. A plain
    ``depends_on`` would not do that (pulumi/pulumi ``pkg/resource/deploy/step_generator.go``,
    ``calculateDependentReplacements`` only follows property dependencies). With ``adopt_existing``
    every object is imported (``import_``) instead of created: ``pulumi up`` then takes over what
    NServiceBus installers declared, and fails rather than replace anything whose properties differ;
    the parking objects, which only this project declares, are created. Queues that keep delayed messages are
    protected and retained with ``protect_delay_queues``; queues that receive messages are retained on delete with
    ``retain_on_delete``, and then never replaced (a change of their settings is ignored: see ``queue``).
    """

    def __init__(
        self,
        component: pulumi.ComponentResource,
        name: str,
        where: Placement,
        *,
        protect_delay_queues: bool = False,
        retain_on_delete: bool = False,
        exchange_names: Mapping[str, pulumi.Input[str]] | None = None,
        shared: SharedVhost | None = None,
    ) -> None:
        self.component = component
        self.shared = shared if shared is not None else SharedVhost()
        self.name = name
        self.vhost = where.vhost
        self.broker_version = where.broker_version
        self.adopt_existing = where.adopt_existing
        self.protect_delay_queues = protect_delay_queues
        self.retain_on_delete = retain_on_delete
        self.names: dict[str, pulumi.Input[str]] = dict(exchange_names or {})
        self.exchanges: dict[str, rabbitmq.Exchange] = {}
        self.queues: dict[str, rabbitmq.Queue] = {}
        self.bindings: list[rabbitmq.Binding] = []
        self.policies: dict[str, rabbitmq.Policy] = {}

    def declare(self, topology: Topology) -> Self:
        """Every object of ``topology``, each constructed here, from the arguments its kind's method gives: the engine
        keeps each resource's stack trace in the stack's state (``stackTrace``), and every frame above a resource is
        written once per resource, so no call sits between this loop and the resource."""
        for exchange in topology.exchanges:
            declared = rabbitmq.Exchange(**self.exchange(exchange))
            self.exchanges[exchange.name] = self.shared.objects[exchange.name] = declared
            self.names[exchange.name] = declared.name
        for queue in topology.queues:
            self.queues[queue.name] = self.shared.objects[queue.name] = rabbitmq.Queue(**self.queue(queue))
        for binding in topology.bindings:
            self.bindings.append(rabbitmq.Binding(**self.binding(binding)))
        for policy in topology.policies:
            self.policies[policy.name] = self.shared.last_policy = rabbitmq.Policy(**self.policy(policy))
        return self

    def options(self, spec: Spec, physical_id: str, **options: Any) -> pulumi.ResourceOptions:
        """Each child's options: imported when adopting what NServiceBus declared (what only we declare, parking,
        is created even then)."""
        adopted = physical_id if self.adopt_existing and spec.nservicebus_declares else None
        return pulumi.ResourceOptions(parent=self.component, import_=adopted, **options)

    def exchange(self, exchange: ExchangeSpec) -> dict[str, Any]:
        return {
            "resource_name": f"{self.name}-{exchange.name}",
            "name": exchange.name,
            "vhost": self.vhost,
            "settings": rabbitmq.ExchangeSettingsArgs(
                type=exchange.type, durable=exchange.durable, auto_delete=exchange.auto_delete
            ),
            "opts": self.options(exchange, import_id(exchange.name, self.vhost)),
        }

    def queue(self, queue: QueueSpec) -> dict[str, Any]:
        """A named queue is replaced delete-first (the bridge's ``nameRequiresDeleteBeforeReplace``): its bindings
        go, a retained original stays, and the new declaration is refused (inequivalent arg). So a retained queue is
        never replaced: its settings are ignored once it exists, and ``verify`` reports a change as drift."""
        guard = queue.keeps_messages and self.protect_delay_queues
        kept = queue.receives_messages and self.retain_on_delete
        return {
            "resource_name": f"{self.name}-{queue.name}",
            "name": queue.name,
            "vhost": self.vhost,
            "settings": queue_settings(queue, self.broker_version),
            "opts": self.options(
                queue,
                import_id(queue.name, self.vhost),
                protect=guard,
                retain_on_delete=guard or kept,
                ignore_changes=["settings"] if kept else None,
            ),
        }

    def binding(self, binding: BindingSpec) -> dict[str, Any]:
        destination = (
            self.queues[binding.destination].name
            if binding.destination_type == "queue" and binding.destination in self.queues
            else self.names.get(binding.destination, binding.destination)
        )
        return {
            "resource_name": f"{self.name}-{binding.source}-to-{binding.destination_type}-{binding.destination}",
            "source": self.names.get(binding.source, binding.source),
            "destination": destination,
            "destination_type": binding.destination_type,
            "routing_key": binding.routing_key,
            "vhost": self.vhost,
            "opts": self.options(binding, binding_import_id(binding, self.vhost)),
        }

    def policy(self, policy: PolicySpec) -> dict[str, Any]:
        """Declared after the objects it applies to (on RabbitMQ 4.3, a quorum queue declared while its delivery-limit
        policy is created may keep the default limit: ``RabbitMqTransport``), each named once, and after the vhost's
        policy before it (``SharedVhost``)."""
        targets = [self.shared.objects.get(name) for name in policy.targets]
        definition: dict[str, pulumi.Input[str]] = {**policy_definition(policy.definition)}
        alternate = definition.get(ALTERNATE_EXCHANGE_POLICY_KEY)
        if isinstance(alternate, str) and alternate in self.names:
            definition[ALTERNATE_EXCHANGE_POLICY_KEY] = self.names[alternate]  # waits for the parking exchange
        previous = self.shared.last_policy
        waits_for = [*(target for target in targets if target is not None), *([previous] if previous else [])]
        return {
            "resource_name": f"{self.name}-{policy.name}",
            "name": policy.name,
            "vhost": self.vhost,
            "policy": rabbitmq.PolicyPolicyArgs(
                pattern=policy.pattern, priority=policy.priority, apply_to=policy.apply_to, definition=definition
            ),
            "opts": self.options(policy, import_id(policy.name, self.vhost), depends_on=waits_for),
        }


def named(given: pulumi.Input[str], expected: str, input_name: str) -> pulumi.Output[str]:
    """``given`` (another component's output, another stack's) once it is known to name ``expected``: a wrong exchange
    is refused rather than bound."""

    def check(value: str) -> str:
        if value != expected:
            raise ValueError(f"{input_name} is {value!r}, but this endpoint's generation delivers through {expected!r}")
        return value

    return pulumi.Output.from_input(given).apply(check)


def shared_of(args: Mapping[str, Any]) -> SharedVhost | None:
    """What the component's transport shares among its children, when a transport handed it its args."""
    return args.shared if isinstance(args, Checked) else None


def given_exchange(args: Mapping[str, Any], key: str, expected: str) -> pulumi.Input[str]:
    """The exchange ``args[key]`` gives, checked to be ``expected`` unless a transport handed it (its own graph's, or
    another stack's that it checked once for all its endpoints)."""
    return args[key] if isinstance(args, Checked) else named(args[key], expected, key)


class RabbitMqDelayInfrastructure(pulumi.ComponentResource):
    """The 28 delay levels, the delivery exchange and their bindings, exactly as NServiceBus declares them,
    and (``park_unroutable``, default) the parking exchange and queue with the policy that makes the
    parking exchange the delivery exchange's alternate exchange (Particular/NServiceBus.RabbitMQ#1407).

    Level queues hold delayed messages for up to 4.25 years, the parking queue what could not be
    delivered, and any change to them replaces (deletes) them, so they are protected and retained on
    delete unless ``protect_delay_queues`` is false.
    """

    delivery_exchange: pulumi.Output[str]
    """The delivery exchange's name: give it to each ``RabbitMqEndpoint`` (``deliveryExchange``)."""
    parking_exchange: Optional[pulumi.Output[str]]  # noqa: UP045 (Pulumi's analyzer reads Optional)
    """The parking exchange's name (with ``parkUnroutable``): give it to each ``RabbitMqEndpoint``."""
    level_names: pulumi.Output[list[str]]
    """The 28 level queues, level 27 first."""
    generation: pulumi.Output[str]

    def __init__(
        self, name: str, args: RabbitMqDelayInfrastructureArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        component = type(self).__name__
        settings = settings_of_args(DelayInfrastructureSettings, component, name, args)
        super().__init__(f"{TYPE_PREFIX}{component}", name, None, opts)
        topology = settings.topology()
        self.resources = Declared(
            self,
            name,
            settings,
            protect_delay_queues=settings.protect_delay_queues,
            shared=shared_of(args),
        ).declare(topology)
        parking = self.resources.exchanges.get(parking_name(settings.generation))
        self.delivery_exchange = self.resources.exchanges[delivery_exchange_name(settings.generation)].name
        self.parking_exchange = parking.name if parking else None
        self.level_names = pulumi.Output.from_input([q.name for q in topology.queues if q.holds_delayed_messages])
        self.generation = pulumi.Output.from_input(settings.generation.value)
        self.register_outputs(
            {
                "deliveryExchange": self.delivery_exchange,
                "parkingExchange": self.parking_exchange,
                "levelNames": self.level_names,
                "generation": self.generation,
            }
        )


class RabbitMqEndpoint(pulumi.ComponentResource):
    """What ``rabbitmq-transport endpoint create`` makes when installers are off.

    The endpoint queue (and instance queues), for conventional topology the fanout exchange of the
    same name bound to it, the ``#.<endpoint>`` delivery binding for each receiving queue, with
    ``legacy_timeout_manager`` the ``.Timeouts``/``.TimeoutsDispatcher`` queues, and for quorum
    receiving queues NServiceBus's ``nsb.<queue>.delivery-limit`` policy (by default when ``broker_version`` is
    4.0 or later; ``delivery_limit_policies`` false when policies are managed elsewhere).
    In the conventional topology with ``park_unroutable`` (default) each receiving queue's exchange gets
    the parking exchange as alternate exchange by policy: a delayed message routed to the exchange of a
    deleted queue is parked instead of stalling its level. With ``retain_on_delete`` (default) its queues and their
    messages stay on the broker when Pulumi deletes them.
    """

    queue_name: pulumi.Output[str]
    """The endpoint's input queue."""
    receiving_queues: pulumi.Output[list[str]]
    """Every queue bound to the delivery exchange: the endpoint's and its instances'."""
    delivery_binding_key: pulumi.Output[str]
    """``#.<endpoint>``."""
    transport_version: pulumi.Output[str]
    """The NServiceBus.RabbitMQ release the endpoint runs: the policy pack judges the stack's delivery-limit policies
    by it."""

    def __init__(self, name: str, args: RabbitMqEndpointArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        component = type(self).__name__
        extras = ("delivery_exchange", "parking_exchange")
        settings = settings_of_args(EndpointSettings, component, name, args, extras, EndpointSettings.check)
        super().__init__(f"{TYPE_PREFIX}{component}", name, None, opts)
        expected = (delivery_exchange_name(settings.generation), parking_name(settings.generation))
        given = {
            exchange: given_exchange(args, key, exchange)
            for key, exchange in zip(extras, expected, strict=True)
            if args.get(key) is not None
        }
        self.resources = Declared(
            self,
            name,
            settings,
            retain_on_delete=settings.retain_on_delete,
            exchange_names=given,
            shared=shared_of(args),
        ).declare(settings.topology())
        self.queue_name = self.resources.queues[settings.endpoint].name
        self.receiving_queues = pulumi.Output.from_input(list(settings.receiving_queues))
        self.delivery_binding_key = pulumi.Output.from_input(endpoint_binding_key(settings.endpoint))
        self.transport_version = pulumi.Output.from_input(str(settings.transport_version))
        self.register_outputs(
            {
                "queueName": self.queue_name,
                "receivingQueues": self.receiving_queues,
                "deliveryBindingKey": self.delivery_binding_key,
                "transportVersion": self.transport_version,
            }
        )


class RabbitMqEndpointPolicies(pulumi.ComponentResource):
    """The parking and delivery-limit policies of a stack's endpoints (those with ``policy_scope`` ``stack``, the
    default), as a few combined policies, ``nsb-delays.<policyGroup>.<kind>.<bucket>``, each matching up to 4 KiB of
    names (``model.combined_policies``): every policy change costs the broker a match of every object in the vhost,
    so one policy per object makes a large stack's ``pulumi up`` quadratic. The objects get the same definitions as
    one policy each would give them: delivery limit 100000 on ``delivery_limit_queues``, the parking exchange as
    alternate exchange on ``parked_exchanges``.
    """

    policy_names: pulumi.Output[list[str]]
    """The combined policies' names."""

    def __init__(
        self, name: str, args: RabbitMqEndpointPoliciesArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        component = type(self).__name__
        settings = settings_of_args(EndpointPoliciesSettings, component, name, args, ("parking_exchange",))
        super().__init__(f"{TYPE_PREFIX}{component}", name, None, opts)
        parking = parking_name(settings.generation)
        given = args.get("parking_exchange")
        self.resources = Declared(
            self,
            name,
            settings,
            exchange_names={parking: given_exchange(args, "parking_exchange", parking)} if given is not None else None,
            shared=shared_of(args),
        ).declare(settings.topology(pulumi.get_stack()))
        self.policy_names = pulumi.Output.from_input(list(self.resources.policies))
        self.register_outputs({"policyNames": self.policy_names})


class RabbitMqSharedQueues(pulumi.ComponentResource):
    """The ``error`` and ``audit`` queues every endpoint sends to: declared once per broker/vhost, retained on delete
    with ``retain_on_delete`` (default)."""

    error_queue: pulumi.Output[str]
    audit_queue: pulumi.Output[str]

    def __init__(self, name: str, args: RabbitMqSharedQueuesArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        component = type(self).__name__
        settings = settings_of_args(SharedQueuesSettings, component, name, args)
        super().__init__(f"{TYPE_PREFIX}{component}", name, None, opts)
        self.resources = Declared(
            self,
            name,
            settings,
            retain_on_delete=settings.retain_on_delete,
            shared=shared_of(args),
        ).declare(settings.topology())
        self.error_queue = self.resources.queues[settings.error_queue].name
        self.audit_queue = self.resources.queues[settings.audit_queue].name
        self.register_outputs({"errorQueue": self.error_queue, "auditQueue": self.audit_queue})


class RabbitMqEndpointUser(pulumi.ComponentResource):
    """The RabbitMQ user an installer-less endpoint logs in as, with the least it needs and nothing more:
    its tags, its ``configure``/``write``/``read`` permissions in ``vhost`` and one topic permission per delay
    exchange (``model.permissions.endpoint_user_grants``: the calls each right is for, cited to NServiceBus).

    ``password`` should be a Pulumi secret (``pulumi.Config().require_secret(...)``); it is made one here anyway.
    """

    user_name: pulumi.Output[str]
    tags: pulumi.Output[list[str]]

    def __init__(self, name: str, args: RabbitMqEndpointUserArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        component = type(self).__name__
        settings = settings_of_args(EndpointUserSettings, component, name, args, ("password",))
        with refusals_as_input_errors(component, name):
            if args.get("password") is None:
                raise ValueError("password: missing (required)")
            grants = settings.grants()  # refuses what a permission's regular expression cannot hold
        super().__init__(f"{TYPE_PREFIX}{component}", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        account = rabbitmq.User(
            f"{name}-user",
            name=grants.user,
            password=pulumi.Output.secret(args["password"]),
            tags=list(grants.tags),
            opts=child,
        )
        rabbitmq.Permissions(
            f"{name}-permissions",
            user=account.name,
            vhost=settings.vhost,
            permissions=rabbitmq.PermissionsPermissionsArgs(
                configure=grants.configure, write=grants.write, read=grants.read
            ),
            opts=child,
        )
        rabbitmq.TopicPermissions(
            f"{name}-topic-permissions",
            user=account.name,
            vhost=settings.vhost,
            permissions=[
                rabbitmq.TopicPermissionsPermissionArgs(exchange=t.exchange, write=t.write, read=t.read)
                for t in grants.topic
            ],
            opts=child,
        )
        self.user_name = account.name
        self.tags = pulumi.Output.from_input(list(grants.tags))
        self.register_outputs({"userName": self.user_name, "tags": self.tags})
