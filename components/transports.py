"""One component per transport: ``RabbitMqTransport`` and ``SqsTransport``, each a whole section of the stack config
(``nsb-delays:rabbitmq``, ``nsb-delays:sqs``) in snake_case, declared as many times as a program needs (a vhost
each, a broker each through its provider).

Each checks its section where it enters, by the section's own parser (``section/parsing.py``: every problem at
once, each named by its input), or takes it ``Checked`` from a program that parsed the stack file already; and
declares the lower-level components (``rabbitmq.py``, ``sqs.py``) as its children, handing each its part of the plan,
checked, and what they share (``SharedVhost``). Its children are named from its own name, as Pulumi's components do
(pulumi-awsx's ``Vpc``: ``${name}-…``), so two transports never share a name, and nothing lives outside the instance.

The project's program is these two components, named ``rabbitmq`` and ``sqs`` (``infra/program.py``); a YAML or
TypeScript program declares the same through the component provider (``provider.py``). Stacks deployed by the release
before named some children for the stack, one transport per stack: a transport of the program's name keeps those
names as aliases (``FORMER_NAMES``), so those stacks see no change.
"""

# No `from __future__ import annotations`: Pulumi's analyzer reads the annotations (args, outputs) as types.
import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Optional

import pulumi

from nsb_delays.components.model import sqs as sqs_model

# the model as the stack config's plan holds it (mypy reads nsb_delays.components and components as two packages)
from nsb_delays.components.model.rabbitmq.names import delivery_exchange_name, parking_name
from nsb_delays.components.model.settings import (
    DelayInfrastructureSettings,
    EndpointPoliciesSettings,
    EndpointSettings,
    SharedQueuesSettings,
)

from .args import RabbitMqTransportArgs, SqsEndpointArgs, SqsTransportArgs
from .inputs import Checked, InputsRefused, handed
from .model.settings import camel_case
from .rabbitmq import (
    TYPE_PREFIX,
    RabbitMqDelayInfrastructure,
    RabbitMqEndpoint,
    RabbitMqEndpointPolicies,
    RabbitMqEndpointUser,
    RabbitMqSharedQueues,
    SharedVhost,
    named,
)
from .section.parsing import ConfigError, parse_rabbitmq_inputs, parse_sqs_inputs
from .section.plan import PlannedUser, RabbitMqConfig, RabbitMqPart, SqsConfig
from .sqs import SqsEndpoint

Passwords = Mapping[str, pulumi.Input[str]]


class GraphOutputs(NamedTuple):
    """The outputs a stack that declares the delay graph exports for the stacks of endpoints that reference it
    (``graphStack``), by what each names."""

    delivery_exchange: str = "rabbitmqDeliveryExchange"
    parking_exchange: str = "rabbitmqParkingExchange"


GRAPH_OUTPUTS = GraphOutputs()

PROGRAM_NAMES = {"RabbitMqTransport": "rabbitmq", "SqsTransport": "sqs"}
"""The name the project's program gives each transport (``infra/program.py``), as the release before did."""

FORMER_NAMES = {"graph": "delays-{generation}", "shared queues": "shared-queues", "policies": "endpoint-policies"}
"""The children the release before named for the stack (one transport per stack), by what they are: a
``RabbitMqTransport`` of the program's name keeps them as aliases. Its endpoints and users kept their names
(``rabbitmq-<endpoint>``, ``rabbitmq-user-<user>``), as do the SQS transport's (``sqs-<queue>``)."""


def graph_outputs(plan: RabbitMqConfig) -> dict[str, str | None]:
    """The names a graph stack of ``plan``'s generation exports as ``GRAPH_OUTPUTS`` (parking: only with it)."""
    parking = parking_name(plan.generation) if plan.infrastructure.park_unroutable else None
    return {
        GRAPH_OUTPUTS.delivery_exchange: delivery_exchange_name(plan.generation),
        GRAPH_OUTPUTS.parking_exchange: parking,
    }


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


class RabbitMqTransport(pulumi.ComponentResource):
    """A whole RabbitMQ section in one vhost: the delay graph (or, with ``declares_graph`` false, another stack's,
    found by ``graph_stack``), the shared ``error`` and ``audit`` queues, every endpoint with its user, and the
    combined delivery-limit and parking policies of the endpoints, declared after the endpoints' queues. Its children
    are named ``<name>-…``: declare one per vhost or broker (a broker through its provider: ``opts``).

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
        """``args`` handed ``Checked`` by a program carry the section's plan (``RabbitMqConfig``) and ``passwords``,
        each endpoint user's password by its ``password_key``."""
        if isinstance(args, Checked) and isinstance(args.settings, RabbitMqConfig):
            plan, passwords = args.settings, args["passwords"]
        else:
            try:
                plan, passwords = parse_rabbitmq_inputs(args, pulumi.get_stack())
            except ConfigError as error:
                raise refused(type(self).__name__, name, error) from None
        super().__init__(f"{TYPE_PREFIX}{type(self).__name__}", name, None, opts)
        declared = _Declared(self, name, plan, passwords)
        for part in plan.parts:  # what the section declares, in its order: the plan's one list of it
            declared.part(part)
        outputs = declared.outputs()
        self.stack_outputs = outputs
        self.rabbitmq_delivery_exchange = outputs.get(GRAPH_OUTPUTS.delivery_exchange)
        self.rabbitmq_parking_exchange = outputs.get(GRAPH_OUTPUTS.parking_exchange)
        self.rabbitmq_delay_levels = outputs.get("rabbitmqDelayLevels")
        self.rabbitmq_endpoint_queues = pulumi.Output.from_input(outputs["rabbitmqEndpointQueues"])
        users_output = outputs.get("rabbitmqEndpointUsers")
        self.rabbitmq_endpoint_users = pulumi.Output.from_input(users_output) if users_output is not None else None
        self.register_outputs(outputs)


class _Declared:
    """A ``RabbitMqTransport``'s children as it declares them, in the plan's order, each handed its settings and wired
    to what it uses of the children before it: an endpoint to the delay graph's exchanges (outputs it takes, so its
    delivery bindings wait for them), the combined policies to the queues and exchanges they apply to, a user to the
    queues it uses. Nothing else waits: an endpoint does not wait for the whole graph."""

    def __init__(self, transport: RabbitMqTransport, name: str, plan: RabbitMqConfig, passwords: Passwords) -> None:
        self.transport = transport
        self.name = name
        self.plan = plan
        self.passwords = passwords
        self.shared = SharedVhost()
        self.exchanges: dict[str, Any] = {}
        self.graph_outputs: dict[str, Any] = {}
        self.endpoints: dict[str, RabbitMqEndpoint] = {}
        self.users: dict[str, RabbitMqEndpointUser] = {}
        self.endpoint_queues: dict[str, pulumi.Resource] = {}  # each endpoint's receiving queues, by name
        if not plan.placement.declares_graph and plan.placement.graph_stack is not None:
            self.referenced_graph(plan.placement.graph_stack)
        # else the graph's exchanges by name until the graph is declared: each endpoint's default is its generation's

    def part(self, part: RabbitMqPart) -> None:
        """One part of the plan: its component, constructed here (the engine keeps each resource's stack trace in the
        state: ``Declared.declare``)."""
        if isinstance(part, DelayInfrastructureSettings):
            graph = RabbitMqDelayInfrastructure(*self.handed(f"delays-{part.generation.value}", part, former="graph"))
            self.exchanges = {"delivery_exchange": graph.delivery_exchange, "parking_exchange": graph.parking_exchange}
            self.graph_outputs = {
                GRAPH_OUTPUTS.delivery_exchange: graph.delivery_exchange,
                GRAPH_OUTPUTS.parking_exchange: graph.parking_exchange,
                "rabbitmqDelayLevels": graph.level_names,
            }
        elif isinstance(part, SharedQueuesSettings):
            RabbitMqSharedQueues(*self.handed("shared-queues", part, former="shared queues"))
        elif isinstance(part, EndpointSettings):
            endpoint = RabbitMqEndpoint(*self.handed(part.endpoint, part, self.exchanges))
            self.endpoints[part.endpoint] = endpoint
            self.endpoint_queues |= {queue: endpoint.resources.queues[queue] for queue in part.receiving_queues}
        elif isinstance(part, EndpointPoliciesSettings):
            RabbitMqEndpointPolicies(*self.policies(part))
        else:
            self.users[part.settings.user] = RabbitMqEndpointUser(*self.user(part))

    def handed(
        self,
        suffix: str,
        settings: object,
        inputs: Mapping[str, Any] | None = None,
        former: str | None = None,
        depends_on: Sequence[pulumi.Resource] | None = None,
    ) -> tuple[str, Any, pulumi.ResourceOptions]:
        """A child's name, ``<transport>-<suffix>``, its ``settings`` handed checked, and its options: under the
        program's name, it is also known by the name the release before gave it (``FORMER_NAMES[former]``)."""
        aliases = None
        if former is not None and self.name == PROGRAM_NAMES["RabbitMqTransport"]:
            was = FORMER_NAMES[former].format(generation=self.plan.generation.value)
            aliases = [pulumi.Alias(name=was)]
        options = pulumi.ResourceOptions(parent=self.transport, aliases=aliases, depends_on=depends_on)
        return f"{self.name}-{suffix}", Checked(settings, inputs, self.shared), options

    def referenced_graph(self, graph_stack: str) -> None:
        """Another stack's graph, by its outputs, each checked once for all the endpoints: a read of that stack, not
        a child of this transport (``StackReference`` names it by the stack it reads)."""
        graph = pulumi.StackReference(graph_stack)
        generation = self.plan.generation
        # a graph stack without parking exports none: the policies then refuse
        self.exchanges = {
            key: named(output, expected, key)
            for key, output, expected in (
                (
                    "delivery_exchange",
                    graph.require_output(GRAPH_OUTPUTS.delivery_exchange),
                    delivery_exchange_name(generation),
                ),
                ("parking_exchange", graph.get_output(GRAPH_OUTPUTS.parking_exchange), parking_name(generation)),
            )
        }

    def policies(self, settings: EndpointPoliciesSettings) -> tuple[str, Any, pulumi.ResourceOptions]:
        """The endpoints' combined policies, each after the queues or exchanges it applies to (``SharedVhost``):
        RabbitMQ 4.3 gives a quorum queue declared while its delivery-limit policy is being created the default limit
        of 20 for good (measured on 4.3.6: one queue of four, now and then). The periodic re-check that repaired that
        on 4.0 compares no integer limit any more (rabbitmq/rabbitmq-server v4.3.5 deps/rabbit/src/
        rabbit_quorum_queue.erl, maybe_apply_policies/2 and canonicalize_delivery_limit/1: ``is_integer(Value) orelse
        Value < 0``), and NServiceBus refuses to start on 20. A policy created after its queues is applied to them
        when it is created."""
        named_for = dataclasses.replace(settings, policy_group=self.plan.policy_group)
        parking = (
            {"parking_exchange": self.exchanges["parking_exchange"]} if "parking_exchange" in self.exchanges else {}
        )
        return self.handed("endpoint-policies", named_for, parking, former="policies")

    def user(self, planned: PlannedUser) -> tuple[str, Any, pulumi.ResourceOptions]:
        """Created once the endpoints' queues it receives from or sends to exist (each a dependency of its own, not
        every resource of their endpoints), so an endpoint that logs in as it finds them. Error and audit are the
        shared queues', declared before any endpoint."""
        user = planned.settings
        queues = dict.fromkeys((*user.receiving_queues, *user.sends_to))
        waits_for = [self.endpoint_queues[queue] for queue in queues if queue in self.endpoint_queues]
        password = {"password": self.passwords[planned.password_key]}
        return self.handed(f"user-{user.user}", user, password, depends_on=waits_for)

    def outputs(self) -> dict[str, Any]:
        """The stack's outputs, as the program before the transports exported them."""
        outputs = dict(self.graph_outputs)
        if self.users:
            outputs["rabbitmqEndpointUsers"] = {user: component.user_name for user, component in self.users.items()}
        outputs["rabbitmqEndpointQueues"] = {name: c.receiving_queues for name, c in self.endpoints.items()}
        return outputs


class SqsTransport(pulumi.ComponentResource):
    """Every endpoint of one ``nsb-delays:sqs`` section: its input queue and, with delayed delivery, its
    ``-delay.fifo`` queue (``SqsEndpoint``), named ``<name>-<queue>``. ``args`` is the section in snake_case; an
    endpoint may be given by its name alone."""

    sqs_queue_urls: pulumi.Output[dict[str, str]]
    """Each endpoint's input queue URL, by endpoint."""
    sqs_queue_arns: pulumi.Output[dict[str, str]]
    """Each endpoint's input queue ARN, by endpoint."""
    sqs_delay_queue_urls: pulumi.Output[dict[str, str]]
    """Each endpoint's delay queue URL, by endpoint (those with delayed delivery)."""
    sqs_delay_queue_arns: pulumi.Output[dict[str, str]]
    """Each endpoint's delay queue ARN, by endpoint (those with delayed delivery)."""

    def __init__(self, name: str, args: SqsTransportArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        """``args`` handed ``Checked`` by a program carry the section's plan (``SqsConfig``)."""
        if isinstance(args, Checked) and isinstance(args.settings, SqsConfig):
            plan = args.settings
        else:
            try:
                plan = parse_sqs_inputs(args)
            except ConfigError as error:
                raise refused(type(self).__name__, name, error) from None
        super().__init__(f"{TYPE_PREFIX}{type(self).__name__}", name, None, opts)
        endpoints = {
            settings.endpoint: SqsEndpoint(
                f"{name}-{sqs_model.sanitize_queue_name(settings.endpoint)}",
                handed(SqsEndpointArgs, settings),
                opts=pulumi.ResourceOptions(parent=self),
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
