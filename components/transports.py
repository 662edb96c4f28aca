"""One component per transport: ``RabbitMqTransport`` and ``SqsTransport``, each a whole section of the stack config
(``nsb-delays:rabbitmq``, ``nsb-delays:sqs``) in snake_case, composed once, in the order the broker needs.

Each checks its section where it enters, by the stack config's own parser (``stack/parsing.py``: every problem at
once, each named by its input), and declares the lower-level components (``rabbitmq.py``, ``sqs.py``) as its children.
The project's program is these two components (``infra/program.py``); a YAML or TypeScript program declares the same
through the component provider (``provider.py``).

The children keep the names the program gave them when it declared them itself, with an alias to their former
parent, the stack: a stack deployed by that program sees no change (pulumi/pulumi ``sdk/python/lib/pulumi/resource.py``
``Alias``: ``parent=ROOT_STACK_RESOURCE``, "the prior name ... parented directly by the stack"). So their names are
the stack's: one transport of each kind per stack, as the stack config has one section of each.
"""

# No `from __future__ import annotations`: Pulumi's analyzer reads the annotations (args, outputs) as types.
import re
from collections.abc import Mapping
from typing import Any, ClassVar, Optional, TypeVar

import pulumi

from nsb_delays.components.model import sqs as sqs_model

# the model as the stack config's plan holds it (mypy reads nsb_delays.components and components as two packages)
from nsb_delays.components.model.rabbitmq.names import delivery_exchange_name, parking_name
from nsb_delays.components.model.settings import (
    DelayInfrastructureSettings,
    EndpointPoliciesSettings,
    EndpointSettings,
    EndpointUserSettings,
    SharedQueuesSettings,
)
from nsb_delays.stack.parsing import ConfigError, parse_rabbitmq_inputs, parse_sqs_inputs
from nsb_delays.stack.plan import RabbitMqConfig, RabbitMqPart, SqsConfig

from .args import (
    RabbitMqDelayInfrastructureArgs,
    RabbitMqEndpointArgs,
    RabbitMqEndpointPoliciesArgs,
    RabbitMqEndpointUserArgs,
    RabbitMqSharedQueuesArgs,
    RabbitMqTransportArgs,
    SqsEndpointArgs,
    SqsTransportArgs,
)
from .inputs import InputsRefused
from .model.settings import camel_case, values_of
from .rabbitmq import (
    TYPE_PREFIX,
    RabbitMqDelayInfrastructure,
    RabbitMqEndpoint,
    RabbitMqEndpointPolicies,
    RabbitMqEndpointUser,
    RabbitMqSharedQueues,
)
from .sqs import SqsEndpoint

A = TypeVar("A")
Passwords = Mapping[str, pulumi.Input[str]]

GRAPH_OUTPUTS = ("rabbitmqDeliveryExchange", "rabbitmqParkingExchange")
"""What a stack that declares the delay graph exports for the stacks of endpoints that reference it (``graphStack``)."""


def graph_outputs(plan: RabbitMqConfig) -> dict[str, str | None]:
    """The names a graph stack of ``plan``'s generation exports as ``GRAPH_OUTPUTS`` (parking: only with it)."""
    parking = parking_name(plan.generation) if plan.infrastructure.park_unroutable else None
    return dict(zip(GRAPH_OUTPUTS, (delivery_exchange_name(plan.generation), parking), strict=True))


def args_of(args_type: type[A], settings: object, **given: Any) -> A:
    """A lower component's args from its settings in the plan (its Args' keys are the settings' fields: generated from
    them), plus what only a program has (``given``: other resources' outputs, a secret)."""
    return args_type(**(values_of(settings) | given))


_INPUT_PATH = re.compile(r"[\w.\[\]]+")  # what a problem names first: endpoints[1].user.sends_to


def refused(component: str, name: str, error: ConfigError) -> InputsRefused:
    """The parser's problems as the engine shows bad inputs: each named by its input (in the engine's details, as the
    schema names it: ``endpoints[1].user.sendsTo``), no traceback."""
    count = len(error.problems)
    listed = "\n".join(f"  - {problem}" for problem in error.problems)
    details: list[pulumi.InputPropertyErrorDetails] = []
    for problem in error.problems:
        path = _INPUT_PATH.match(problem)
        details.append({"property_path": camel_case(path.group()) if path else "", "reason": problem})
    return InputsRefused(
        f"{component} {name!r}: {count} problem{'s' * (count != 1)} with its inputs:\n{listed}", details
    )


class OnePerStack:
    """The transports of the running program: a second of a kind would give its children the first one's names."""

    seen: ClassVar[dict[str, object]] = {}

    @classmethod
    def claim(cls, component: str, name: str) -> None:
        run = pulumi.runtime.get_root_resource()
        if run is not None and cls.seen.get(component) is run:
            raise InputsRefused(
                f"{component} {name!r}: a stack declares one {component} (its children are named for the stack, as "
                "the stack config's one section names them); declare each vhost or account in a stack of its own"
            )
        cls.seen[component] = run


def child_options(parent: pulumi.Resource, depends_on: list[pulumi.Resource] | None = None) -> pulumi.ResourceOptions:
    """A lower component under its transport, known by its former place too: a child of the stack itself."""
    return pulumi.ResourceOptions(
        parent=parent, depends_on=depends_on, aliases=[pulumi.Alias(parent=pulumi.ROOT_STACK_RESOURCE)]
    )


class RabbitMqTransport(pulumi.ComponentResource):
    """A whole RabbitMQ stack from one section: the delay graph (or, with ``declares_graph`` false, another stack's,
    found by ``graph_stack``), the shared ``error`` and ``audit`` queues, every endpoint with its user, and the
    combined delivery-limit and parking policies of the endpoints, declared after the endpoints' queues.

    ``args`` is the ``nsb-delays:rabbitmq`` section in snake_case; an endpoint may be given by its name alone, and an
    endpoint's ``user`` gives its ``password`` (a secret) where a stack file names its config key."""

    rabbitmq_delivery_exchange: Optional[pulumi.Output[str]]  # noqa: UP045 (Pulumi's analyzer reads Optional)
    """The delivery exchange's name (a stack that declares the graph)."""
    rabbitmq_parking_exchange: Optional[pulumi.Output[str]]  # noqa: UP045
    """The parking exchange's name (a stack that declares the graph, with ``park_unroutable``)."""
    rabbitmq_delay_levels: Optional[pulumi.Output[list[str]]]  # noqa: UP045
    """The 28 level queues, level 27 first (a stack that declares the graph)."""
    rabbitmq_endpoint_queues: pulumi.Output[dict[str, list[str]]]
    """Each endpoint's receiving queues, by endpoint."""
    rabbitmq_endpoint_users: Optional[pulumi.Output[dict[str, str]]]  # noqa: UP045
    """Each endpoint user's name, by user (with endpoint users)."""

    def __init__(self, name: str, args: RabbitMqTransportArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        try:
            plan, passwords = parse_rabbitmq_inputs(args, pulumi.get_stack())
        except ConfigError as error:
            raise refused(type(self).__name__, name, error) from None
        self._declare(name, plan, passwords, opts)

    @classmethod
    def from_plan(
        cls, name: str, plan: RabbitMqConfig, passwords: Passwords, opts: pulumi.ResourceOptions | None = None
    ) -> "RabbitMqTransport":
        """The transport of a section already checked into its plan (the program's, with the whole stack config),
        each endpoint user's password by its key (``plan.password_keys``)."""
        transport = cls.__new__(cls)
        transport._declare(name, plan, passwords, opts)
        return transport

    def _declare(
        self, name: str, plan: RabbitMqConfig, passwords: Passwords, opts: pulumi.ResourceOptions | None
    ) -> None:
        OnePerStack.claim(type(self).__name__, name)
        super().__init__(f"{TYPE_PREFIX}{type(self).__name__}", name, None, opts)
        declared = _Declared(self, plan, passwords)
        for part in plan.parts:  # what the section declares, in its order: the plan's one list of it
            declared.part(part)
        outputs = declared.outputs()
        self.stack_outputs = outputs
        delivery, parking = GRAPH_OUTPUTS
        self.rabbitmq_delivery_exchange = outputs.get(delivery)
        self.rabbitmq_parking_exchange = outputs.get(parking)
        self.rabbitmq_delay_levels = outputs.get("rabbitmqDelayLevels")
        self.rabbitmq_endpoint_queues = pulumi.Output.from_input(outputs["rabbitmqEndpointQueues"])
        users_output = outputs.get("rabbitmqEndpointUsers")
        self.rabbitmq_endpoint_users = pulumi.Output.from_input(users_output) if users_output is not None else None
        self.register_outputs(outputs)


class _Declared:
    """A ``RabbitMqTransport``'s children as it declares them, part by part, each wired to what it needs from the
    parts before it: an endpoint to the delay graph's exchanges (outputs it waits for), the policies to the endpoints'
    queues, a user to its endpoint's."""

    def __init__(self, transport: RabbitMqTransport, plan: RabbitMqConfig, passwords: Passwords) -> None:
        self.transport = transport
        self.plan = plan
        self.passwords = passwords
        # each user's password key by the user's name (unique in a section), not by its place among the parts
        self.password_key = dict(zip((user.user for user in plan.users), plan.password_keys, strict=True))
        self.exchanges: dict[str, Any] = {}
        self.graph: list[pulumi.Resource] = []
        self.graph_outputs: dict[str, Any] = {}
        self.endpoints: dict[str, RabbitMqEndpoint] = {}
        self.receiving: dict[str, RabbitMqEndpoint] = {}  # each endpoint by each of its receiving queues
        self.users: dict[str, RabbitMqEndpointUser] = {}
        if not plan.placement.declares_graph and plan.placement.graph_stack is not None:
            # a read of another stack, not a part of this one: where the program before the transports declared it
            graph = pulumi.StackReference(plan.placement.graph_stack)
            delivery, parking = GRAPH_OUTPUTS  # a graph stack without parking exports none: the policies then refuse
            self.exchanges = {
                "delivery_exchange": graph.require_output(delivery),
                "parking_exchange": graph.get_output(parking),
            }
        # else the graph's exchanges by name: each component's default is its generation's name

    def part(self, part: RabbitMqPart) -> None:
        transport = self.transport
        if isinstance(part, DelayInfrastructureSettings):
            infrastructure = RabbitMqDelayInfrastructure(
                f"delays-{part.generation}",
                args_of(RabbitMqDelayInfrastructureArgs, part),
                opts=child_options(transport),
            )
            self.graph = [infrastructure]
            self.exchanges = {
                "delivery_exchange": infrastructure.delivery_exchange,
                "parking_exchange": infrastructure.parking_exchange,
            }
            delivery, parking = GRAPH_OUTPUTS
            self.graph_outputs = {
                delivery: infrastructure.delivery_exchange,
                parking: infrastructure.parking_exchange,
                "rabbitmqDelayLevels": infrastructure.level_names,
            }
        elif isinstance(part, SharedQueuesSettings):
            RabbitMqSharedQueues(
                "shared-queues", args_of(RabbitMqSharedQueuesArgs, part), opts=child_options(transport)
            )
        elif isinstance(part, EndpointSettings):
            endpoint = RabbitMqEndpoint(
                f"rabbitmq-{part.endpoint}",
                args_of(RabbitMqEndpointArgs, part, **self.exchanges),
                opts=child_options(transport, depends_on=self.graph),
            )
            self.endpoints[part.endpoint] = endpoint
            self.receiving |= dict.fromkeys(part.receiving_queues, endpoint)
        elif isinstance(part, EndpointPoliciesSettings):
            self.policies(part)
        else:
            self.users[part.user] = RabbitMqEndpointUser(
                f"rabbitmq-user-{part.user}",
                args_of(RabbitMqEndpointUserArgs, part, password=self.passwords[self.password_key[part.user]]),
                opts=child_options(transport, depends_on=self.endpoints_of(part)),
            )

    def endpoints_of(self, user: EndpointUserSettings) -> list[pulumi.Resource]:
        """The endpoints whose queues ``user`` receives from or sends to: it is created once they exist, so an endpoint
        that logs in as it finds them. Not every endpoint of the section: each endpoint's resources are a dependency of
        every user then, N×N of them in the stack's state."""
        queues = (*user.receiving_queues, *user.sends_to)  # error and audit: the shared queues', no endpoint's
        return list(dict.fromkeys(self.receiving[queue] for queue in queues if queue in self.receiving))

    def policies(self, part: EndpointPoliciesSettings) -> None:
        """The endpoints' combined policies, after the endpoints' queues: RabbitMQ 4.3 gives a quorum queue declared
        while its delivery-limit policy is being created the default limit of 20 for good (measured on 4.3.6: one
        queue of four, now and then). The periodic re-check that repaired that on 4.0 compares no integer limit any
        more (rabbitmq/rabbitmq-server v4.3.5 deps/rabbit/src/rabbit_quorum_queue.erl, maybe_apply_policies/2 and
        canonicalize_delivery_limit/1: ``is_integer(Value) orelse Value < 0``), and NServiceBus refuses to start on
        20. A policy created after its queues is applied to them when it is created."""
        RabbitMqEndpointPolicies(
            "endpoint-policies",
            args_of(
                RabbitMqEndpointPoliciesArgs,
                part,
                policy_group=self.plan.policy_group,
                parking_exchange=self.exchanges.get("parking_exchange"),
            ),
            opts=child_options(self.transport, depends_on=[*self.graph, *self.endpoints.values()]),
        )

    def outputs(self) -> dict[str, Any]:
        """The stack's outputs, as the program before the transports exported them."""
        outputs = dict(self.graph_outputs)
        if self.users:
            outputs["rabbitmqEndpointUsers"] = {user: component.user_name for user, component in self.users.items()}
        outputs["rabbitmqEndpointQueues"] = {name: c.receiving_queues for name, c in self.endpoints.items()}
        return outputs


class SqsTransport(pulumi.ComponentResource):
    """Every endpoint of one ``nsb-delays:sqs`` section: its input queue and, with delayed delivery, its
    ``-delay.fifo`` queue (``SqsEndpoint``). ``args`` is the section in snake_case; an endpoint may be given by its
    name alone."""

    sqs_queue_urls: pulumi.Output[dict[str, str]]
    """Each endpoint's input queue URL, by endpoint."""
    sqs_queue_arns: pulumi.Output[dict[str, str]]
    """Each endpoint's input queue ARN, by endpoint."""
    sqs_delay_queue_urls: pulumi.Output[dict[str, str]]
    """Each endpoint's delay queue URL, by endpoint (those with delayed delivery)."""
    sqs_delay_queue_arns: pulumi.Output[dict[str, str]]
    """Each endpoint's delay queue ARN, by endpoint (those with delayed delivery)."""

    def __init__(self, name: str, args: SqsTransportArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        try:
            plan = parse_sqs_inputs(args)
        except ConfigError as error:
            raise refused(type(self).__name__, name, error) from None
        self._declare(name, plan, opts)

    @classmethod
    def from_plan(cls, name: str, plan: SqsConfig, opts: pulumi.ResourceOptions | None = None) -> "SqsTransport":
        """The transport of a section already checked into its plan (the program's, with the whole stack config)."""
        transport = cls.__new__(cls)
        transport._declare(name, plan, opts)
        return transport

    def _declare(self, name: str, plan: SqsConfig, opts: pulumi.ResourceOptions | None) -> None:
        OnePerStack.claim(type(self).__name__, name)
        super().__init__(f"{TYPE_PREFIX}{type(self).__name__}", name, None, opts)
        endpoints = {
            settings.endpoint: SqsEndpoint(
                f"sqs-{sqs_model.sanitize_queue_name(settings.endpoint)}",
                args_of(SqsEndpointArgs, settings),
                opts=child_options(self),
            )
            for settings in plan.endpoints
        }
        self.stack_outputs: dict[str, Any] = {
            "sqsQueueUrls": {name: c.queue_url for name, c in endpoints.items()},
            "sqsQueueArns": {name: c.queue_arn for name, c in endpoints.items()},
            "sqsDelayQueueUrls": {name: c.delay_queue_url for name, c in endpoints.items() if c.delay_queue_url},
            "sqsDelayQueueArns": {name: c.delay_queue_arn for name, c in endpoints.items() if c.delay_queue_arn},
        }
        self.sqs_queue_urls = pulumi.Output.from_input(self.stack_outputs["sqsQueueUrls"])
        self.sqs_queue_arns = pulumi.Output.from_input(self.stack_outputs["sqsQueueArns"])
        self.sqs_delay_queue_urls = pulumi.Output.from_input(self.stack_outputs["sqsDelayQueueUrls"])
        self.sqs_delay_queue_arns = pulumi.Output.from_input(self.stack_outputs["sqsDelayQueueArns"])
        self.register_outputs(self.stack_outputs)
