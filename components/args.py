"""Each component's inputs, ``<Component>Args``: generated from the settings declared in
``components/model/settings.py`` by ``python -m nsb_delays.components.args_generator``; do not edit.

Pulumi's convention for Python components, ``Component(name, args: ComponentArgs, opts)``: Python programs pass
these dicts, and the component provider serves the same classes to every other language.
"""

# Generated: no `from __future__ import annotations` (Pulumi's analyzer reads the annotations as types).
from typing import NotRequired, TypedDict

import pulumi

from .model.rabbitmq.combined import PolicyScope
from .model.rabbitmq.names import Generation, QueueType, RoutingTopology


class RabbitMqDelayInfrastructureArgs(TypedDict):
    """The inputs of ``RabbitMqDelayInfrastructure``."""

    vhost: NotRequired[str]
    """The virtual host that holds the delay graph and the endpoints' queues. Default: `"/"`."""
    broker_version: NotRequired[str]
    """The RabbitMQ version the stack targets, `MAJOR.MINOR[.PATCH]` (at least `3.10`; quote it in YAML): decides `x-queue-type: classic` on classic queues and whether delivery-limit policies work. The program refuses a broker of another `MAJOR.MINOR` before it changes anything (`check_broker_version`). Default: `"4.3"`."""
    adopt_existing: NotRequired[bool]
    """Import the objects NServiceBus installers already declared instead of creating them. Default: `false`."""
    generation: NotRequired[Generation]
    """The delay graph: `v2` (quorum level queues, `nsb.v2.delay-level-NN`) or `v1` (classic lazy level queues, `nsb.delay-level-NN`). Default: `"v2"`."""
    park_unroutable: NotRequired[bool]
    """Park delayed messages that no binding routes in `nsb.v2.delay-unroutable` (v1: `nsb.delay-unroutable`), the delivery and endpoint exchanges' alternate exchange, instead of letting them stall their level. Default: `true`."""
    protect_delay_queues: NotRequired[bool]
    """Declare the 28 level queues and the parking queue with `protect` and `retainOnDelete`: `pulumi up` and `pulumi destroy` refuse to replace or delete them and their delayed messages. Default: `true`."""


class RabbitMqSharedQueuesArgs(TypedDict):
    """The inputs of ``RabbitMqSharedQueues``."""

    vhost: NotRequired[str]
    """The virtual host that holds the delay graph and the endpoints' queues. Default: `"/"`."""
    broker_version: NotRequired[str]
    """The RabbitMQ version the stack targets, `MAJOR.MINOR[.PATCH]` (at least `3.10`; quote it in YAML): decides `x-queue-type: classic` on classic queues and whether delivery-limit policies work. The program refuses a broker of another `MAJOR.MINOR` before it changes anything (`check_broker_version`). Default: `"4.3"`."""
    adopt_existing: NotRequired[bool]
    """Import the objects NServiceBus installers already declared instead of creating them. Default: `false`."""
    routing_topology: NotRequired[RoutingTopology]
    """The endpoints' routing topology: `conventional` (a fanout exchange per endpoint, bound to the delivery exchange) or `direct` (the queue bound to the delivery exchange itself). Default: `"conventional"`."""
    queue_type: NotRequired[QueueType]
    """The type of the endpoint, error and audit queues. Default: `"quorum"`."""
    retain_on_delete: NotRequired[bool]
    """Keep the endpoint, instance, legacy timeout, error and audit queues and their messages on the broker when Pulumi deletes them (Pulumi's `retainOnDelete`): removing an endpoint from the stack, or `pulumi destroy`, leaves its queues for you to drain. Default: `true`."""
    error_queue: NotRequired[str]
    """The error queue every endpoint may send to. Default: `"error"`."""
    audit_queue: NotRequired[str]
    """The audit queue every endpoint may send to. Default: `"audit"`."""


class RabbitMqEndpointArgs(TypedDict):
    """The inputs of ``RabbitMqEndpoint``."""

    endpoint: str
    """The endpoint's name and its input queue's (its address); dotted names work."""
    vhost: NotRequired[str]
    """The virtual host that holds the delay graph and the endpoints' queues. Default: `"/"`."""
    broker_version: NotRequired[str]
    """The RabbitMQ version the stack targets, `MAJOR.MINOR[.PATCH]` (at least `3.10`; quote it in YAML): decides `x-queue-type: classic` on classic queues and whether delivery-limit policies work. The program refuses a broker of another `MAJOR.MINOR` before it changes anything (`check_broker_version`). Default: `"4.3"`."""
    adopt_existing: NotRequired[bool]
    """Import the objects NServiceBus installers already declared instead of creating them. Default: `false`."""
    delivery_limit_policies: NotRequired[bool]
    """Give each quorum receiving queue the delivery limit NServiceBus.RabbitMQ 10+ wants (100000) by policy; false when the policies are managed elsewhere. Default: true from `brokerVersion` 4.0, false below."""
    generation: NotRequired[Generation]
    """The delay graph: `v2` (quorum level queues, `nsb.v2.delay-level-NN`) or `v1` (classic lazy level queues, `nsb.delay-level-NN`). Default: `"v2"`."""
    routing_topology: NotRequired[RoutingTopology]
    """The endpoints' routing topology: `conventional` (a fanout exchange per endpoint, bound to the delivery exchange) or `direct` (the queue bound to the delivery exchange itself). Default: `"conventional"`."""
    queue_type: NotRequired[QueueType]
    """The type of the endpoint, error and audit queues. Default: `"quorum"`."""
    retain_on_delete: NotRequired[bool]
    """Keep the endpoint, instance, legacy timeout, error and audit queues and their messages on the broker when Pulumi deletes them (Pulumi's `retainOnDelete`): removing an endpoint from the stack, or `pulumi destroy`, leaves its queues for you to drain. Default: `true`."""
    park_unroutable: NotRequired[bool]
    """Park delayed messages that no binding routes in `nsb.v2.delay-unroutable` (v1: `nsb.delay-unroutable`), the delivery and endpoint exchanges' alternate exchange, instead of letting them stall their level. Default: `true`."""
    instance_discriminators: NotRequired[list[str]]
    """Adds a queue `<endpoint>-<discriminator>` with its own delivery binding for each. Default: `[]`."""
    legacy_timeout_manager: NotRequired[bool]
    """Adds the legacy timeout manager's queues `<endpoint>.Timeouts` and `<endpoint>.TimeoutsDispatcher`. Default: `false`."""
    policy_scope: NotRequired[PolicyScope]
    """Who declares the endpoint's parking and delivery-limit policies: `stack`, a few combined policies for all the stack's endpoints (`RabbitMqEndpointPolicies`); or `endpoint`, one per queue or exchange, named as NServiceBus names its own (`nsb.<queue>.delivery-limit`). One per object makes every policy change cost the broker a match of every object of the vhost. Default: `"stack"`."""
    transport_version: NotRequired[str]
    """The NServiceBus.RabbitMQ release the endpoint runs, `MAJOR.MINOR.PATCH` (quote it in YAML): `nsb-delays preflight` and the policy pack judge its start-up by that release's checks (10.0.0 to 10.1.4 refuse the delivery-limit policies' 100000). Default: the newest release this version of nsb-delays knows, `"11.2.1"`."""
    disabled_broker_requirement_checks: NotRequired[list[str]]
    """The checks the endpoint turns off at start, as its `DisabledBrokerRequirementChecks` says (NServiceBus.RabbitMQ 10.1 and later): `Version310OrNewer`, `StreamsEnabled`. On RabbitMQ 3.10 to 3.12 an endpoint user without the administrator tag needs `StreamsEnabled` off (only administrators may read the feature flags there). `nsb-delays preflight` judges the endpoint's start by it. Default: `[]`."""
    validate_delivery_limits: NotRequired[bool]
    """The endpoint's `ValidateDeliveryLimits` (NServiceBus.RabbitMQ 10 and later): whether it checks each receiving queue's delivery limit at start. `nsb-delays preflight` judges the endpoint's start by it. Default: `true`."""
    delivery_exchange: NotRequired[pulumi.Input[str]]
    """The delivery exchange of the stack's `RabbitMqDelayInfrastructure` (its `deliveryExchange` output): the endpoint's delivery bindings then wait for that exchange and are replaced with it. Default: the generation's name, with no dependency."""
    parking_exchange: NotRequired[pulumi.Input[str]]
    """The parking exchange of the stack's `RabbitMqDelayInfrastructure` (its `parkingExchange` output): the endpoint's alternate-exchange policies then wait for that exchange and are replaced with it. Default: the generation's name, with no dependency."""


class RabbitMqEndpointPoliciesArgs(TypedDict):
    """The inputs of ``RabbitMqEndpointPolicies``."""

    vhost: NotRequired[str]
    """The virtual host that holds the delay graph and the endpoints' queues. Default: `"/"`."""
    broker_version: NotRequired[str]
    """The RabbitMQ version the stack targets, `MAJOR.MINOR[.PATCH]` (at least `3.10`; quote it in YAML): decides `x-queue-type: classic` on classic queues and whether delivery-limit policies work. The program refuses a broker of another `MAJOR.MINOR` before it changes anything (`check_broker_version`). Default: `"4.3"`."""
    adopt_existing: NotRequired[bool]
    """Import the objects NServiceBus installers already declared instead of creating them. Default: `false`."""
    delivery_limit_policies: NotRequired[bool]
    """Give each quorum receiving queue the delivery limit NServiceBus.RabbitMQ 10+ wants (100000) by policy; false when the policies are managed elsewhere. Default: true from `brokerVersion` 4.0, false below."""
    generation: NotRequired[Generation]
    """The delay graph: `v2` (quorum level queues, `nsb.v2.delay-level-NN`) or `v1` (classic lazy level queues, `nsb.delay-level-NN`). Default: `"v2"`."""
    policy_group: NotRequired[str]
    """Names the stack's combined policies, `nsb-delays.<policyGroup>.<kind>.<bucket>`: give each stack that shares a vhost its own. Default: the Pulumi stack's name."""
    delivery_limit_queues: NotRequired[list[str]]
    """The quorum receiving queues that get delivery limit 100000 (NServiceBus.RabbitMQ 10+ wants it). Default: `[]`."""
    parked_exchanges: NotRequired[list[str]]
    """The endpoint exchanges that get the parking exchange as their alternate exchange. Default: `[]`."""
    parking_exchange: NotRequired[pulumi.Input[str]]
    """The parking exchange of the stack's `RabbitMqDelayInfrastructure` (its `parkingExchange` output): the parking policies then wait for that exchange and are replaced with it. Default: the generation's name, with no dependency."""


class RabbitMqEndpointUserArgs(TypedDict):
    """The inputs of ``RabbitMqEndpointUser``."""

    user: str
    """The RabbitMQ user name the endpoint logs in as."""
    receiving_queues: list[str]
    """The endpoint's own queues: it consumes there, and delayed retries go there."""
    vhost: NotRequired[str]
    """The virtual host that holds the delay graph and the endpoints' queues. Default: `"/"`."""
    generation: NotRequired[Generation]
    """The delay graph: `v2` (quorum level queues, `nsb.v2.delay-level-NN`) or `v1` (classic lazy level queues, `nsb.delay-level-NN`). Default: `"v2"`."""
    routing_topology: NotRequired[RoutingTopology]
    """The endpoints' routing topology: `conventional` (a fanout exchange per endpoint, bound to the delivery exchange) or `direct` (the queue bound to the delivery exchange itself). Default: `"conventional"`."""
    error_queue: NotRequired[str]
    """The error queue every endpoint may send to. Default: `"error"`."""
    audit_queue: NotRequired[str]
    """The audit queue every endpoint may send to. Default: `"audit"`."""
    sends_to: NotRequired[list[str]]
    """Queues it sends to, immediately or delayed (error and audit are implied). Default: `[]`."""
    publishes: NotRequired[list[str]]
    """Event exchanges it publishes to, as NServiceBus names them (`Namespace:TypeName`), base classes and interfaces included. Default: `[]`."""
    subscribes_to: NotRequired[list[str]]
    """Event exchanges it subscribes to, named as for `publishes`. Default: `[]`."""
    management_api: NotRequired[bool]
    """Give the `management` tag, for NServiceBus's broker checks at start-up. Default: `true`."""
    password: pulumi.Input[str]
    """Its password: pass a secret (it is stored as one anyway)."""


class SqsEndpointArgs(TypedDict):
    """The inputs of ``SqsEndpoint``."""

    endpoint: str
    """The endpoint's name, sanitised into an SQS queue name."""
    queue_name_prefix: NotRequired[str]
    """Prepended to every queue name unless the name already starts with it. Default: `""`."""
    delayed_delivery: NotRequired[bool]
    """Declare the endpoint's `-delay.fifo` queue for the SQS transport's delayed delivery. Default: `true`."""
    message_retention_seconds: NotRequired[int]
    """The input queue's retention, 61 to 1,209,600 seconds; the delay queue keeps at least 345,600. Default: `345600`."""
    encrypted: NotRequired[bool]
    """SQS-managed server-side encryption (SSE-SQS) on every queue. Default: `true`."""
    max_message_size: NotRequired[int]
    """The largest message, in bytes, SQS accepts into the input and the delay queue (`MaximumMessageSize`), 1,024 to 1,048,576. NServiceBus.AmazonSQS sends bodies up to 1,048,576 bytes inline (through S3 only above that): below that, SQS refuses the larger ones. Default: `1048576`."""


class RabbitMqTransportUserArgs(TypedDict):
    """An endpoint's least-privilege RabbitMQ user (`user` of an entry of `RabbitMqTransport`'s `endpoints`)."""

    password: pulumi.Input[str]
    """Its password: pass a secret (it is stored as one anyway). A stack file names the config key that holds it (`passwordKey`); a program gives the secret itself."""
    name: NotRequired[str]
    """The RabbitMQ user name the endpoint logs in as. Default: the endpoint's name."""
    sends_to: NotRequired[list[str]]
    """Queues it sends to, immediately or delayed (error and audit are implied). Default: `[]`."""
    publishes: NotRequired[list[str]]
    """Event exchanges it publishes to, as NServiceBus names them (`Namespace:TypeName`), base classes and interfaces included. Default: `[]`."""
    subscribes_to: NotRequired[list[str]]
    """Event exchanges it subscribes to, named as for `publishes`. Default: `[]`."""
    management_api: NotRequired[bool]
    """Give the `management` tag, for NServiceBus's broker checks at start-up. Default: `true`."""


class RabbitMqTransportEndpointArgs(TypedDict):
    """An endpoint of `RabbitMqTransport` (an entry of its `endpoints`); in Python also its name alone."""

    name: str
    """The endpoint's name and its input queue's (its address); dotted names work."""
    queue_type: NotRequired[QueueType]
    """The type of the endpoint, error and audit queues. Default: the section's `queueType`."""
    retain_on_delete: NotRequired[bool]
    """Keep the endpoint, instance, legacy timeout, error and audit queues and their messages on the broker when Pulumi deletes them (Pulumi's `retainOnDelete`): removing an endpoint from the stack, or `pulumi destroy`, leaves its queues for you to drain. Default: the section's `retainOnDelete`."""
    instance_discriminators: NotRequired[list[str]]
    """Adds a queue `<endpoint>-<discriminator>` with its own delivery binding for each. Default: `[]`."""
    legacy_timeout_manager: NotRequired[bool]
    """Adds the legacy timeout manager's queues `<endpoint>.Timeouts` and `<endpoint>.TimeoutsDispatcher`. Default: `false`."""
    transport_version: NotRequired[str]
    """The NServiceBus.RabbitMQ release the endpoint runs, `MAJOR.MINOR.PATCH` (quote it in YAML): `nsb-delays preflight` and the policy pack judge its start-up by that release's checks (10.0.0 to 10.1.4 refuse the delivery-limit policies' 100000). Default: the section's `transportVersion`."""
    disabled_broker_requirement_checks: NotRequired[list[str]]
    """The checks the endpoint turns off at start, as its `DisabledBrokerRequirementChecks` says (NServiceBus.RabbitMQ 10.1 and later): `Version310OrNewer`, `StreamsEnabled`. On RabbitMQ 3.10 to 3.12 an endpoint user without the administrator tag needs `StreamsEnabled` off (only administrators may read the feature flags there). `nsb-delays preflight` judges the endpoint's start by it. Default: the section's `disabledBrokerRequirementChecks`."""
    validate_delivery_limits: NotRequired[bool]
    """The endpoint's `ValidateDeliveryLimits` (NServiceBus.RabbitMQ 10 and later): whether it checks each receiving queue's delivery limit at start. `nsb-delays preflight` judges the endpoint's start by it. Default: the section's `validateDeliveryLimits`."""
    user: NotRequired[RabbitMqTransportUserArgs]
    """A least-privilege RabbitMQ user for this endpoint, with the keys below."""


class RabbitMqTransportArgs(TypedDict):
    """The inputs of ``RabbitMqTransport``: the `nsb-delays:rabbitmq` section of a stack file, in snake_case."""

    vhost: NotRequired[str]
    """The virtual host that holds the delay graph and the endpoints' queues. Default: `"/"`."""
    broker_version: NotRequired[str]
    """The RabbitMQ version the stack targets, `MAJOR.MINOR[.PATCH]` (at least `3.10`; quote it in YAML): decides `x-queue-type: classic` on classic queues and whether delivery-limit policies work. The program refuses a broker of another `MAJOR.MINOR` before it changes anything (`check_broker_version`). Default: `"4.3"`."""
    adopt_existing: NotRequired[bool]
    """Import the objects NServiceBus installers already declared instead of creating them. Default: `false`."""
    generation: NotRequired[Generation]
    """The delay graph: `v2` (quorum level queues, `nsb.v2.delay-level-NN`) or `v1` (classic lazy level queues, `nsb.delay-level-NN`). Default: `"v2"`."""
    park_unroutable: NotRequired[bool]
    """Park delayed messages that no binding routes in `nsb.v2.delay-unroutable` (v1: `nsb.delay-unroutable`), the delivery and endpoint exchanges' alternate exchange, instead of letting them stall their level. Default: `true`."""
    protect_delay_queues: NotRequired[bool]
    """Declare the 28 level queues and the parking queue with `protect` and `retainOnDelete`: `pulumi up` and `pulumi destroy` refuse to replace or delete them and their delayed messages. Default: `true`."""
    routing_topology: NotRequired[RoutingTopology]
    """The endpoints' routing topology: `conventional` (a fanout exchange per endpoint, bound to the delivery exchange) or `direct` (the queue bound to the delivery exchange itself). Default: `"conventional"`."""
    queue_type: NotRequired[QueueType]
    """The type of the endpoint, error and audit queues. Default: `"quorum"`."""
    retain_on_delete: NotRequired[bool]
    """Keep the endpoint, instance, legacy timeout, error and audit queues and their messages on the broker when Pulumi deletes them (Pulumi's `retainOnDelete`): removing an endpoint from the stack, or `pulumi destroy`, leaves its queues for you to drain. Default: `true`."""
    error_queue: NotRequired[str]
    """The error queue every endpoint may send to. Default: `"error"`."""
    audit_queue: NotRequired[str]
    """The audit queue every endpoint may send to. Default: `"audit"`."""
    delivery_limit_policies: NotRequired[bool]
    """Give each quorum receiving queue the delivery limit NServiceBus.RabbitMQ 10+ wants (100000) by policy; false when the policies are managed elsewhere. Default: true from `brokerVersion` 4.0, false below."""
    policy_scope: NotRequired[PolicyScope]
    """Who declares the endpoint's parking and delivery-limit policies: `stack`, a few combined policies for all the stack's endpoints (`RabbitMqEndpointPolicies`); or `endpoint`, one per queue or exchange, named as NServiceBus names its own (`nsb.<queue>.delivery-limit`). One per object makes every policy change cost the broker a match of every object of the vhost. Default: `"stack"`."""
    transport_version: NotRequired[str]
    """The NServiceBus.RabbitMQ release the endpoint runs, `MAJOR.MINOR.PATCH` (quote it in YAML): `nsb-delays preflight` and the policy pack judge its start-up by that release's checks (10.0.0 to 10.1.4 refuse the delivery-limit policies' 100000). Default: the newest release this version of nsb-delays knows, `"11.2.1"`."""
    disabled_broker_requirement_checks: NotRequired[list[str]]
    """The checks the endpoint turns off at start, as its `DisabledBrokerRequirementChecks` says (NServiceBus.RabbitMQ 10.1 and later): `Version310OrNewer`, `StreamsEnabled`. On RabbitMQ 3.10 to 3.12 an endpoint user without the administrator tag needs `StreamsEnabled` off (only administrators may read the feature flags there). `nsb-delays preflight` judges the endpoint's start by it. Default: `[]`."""
    validate_delivery_limits: NotRequired[bool]
    """The endpoint's `ValidateDeliveryLimits` (NServiceBus.RabbitMQ 10 and later): whether it checks each receiving queue's delivery limit at start. `nsb-delays preflight` judges the endpoint's start by it. Default: `true`."""
    policy_group: NotRequired[str]
    """Names the stack's combined policies, `nsb-delays.<policyGroup>.<kind>.<bucket>`: give each stack that shares a vhost its own. Default: the Pulumi stack's name."""
    declares_graph: NotRequired[bool]
    """Declare the delay graph (with parking) and the error and audit queues in this stack; false in a stack of endpoints whose graph another stack of the same vhost declares. Default: `true`."""
    graph_stack: NotRequired[str]
    """With `declaresGraph: false`, the stack that declares the graph, as Pulumi names it (`org/project/stack`): the endpoints take its outputs `rabbitmqDeliveryExchange` and `rabbitmqParkingExchange` (a Pulumi `StackReference`) and wait for them. Default: none: the graph's exchanges by their names."""
    endpoints: NotRequired[list[RabbitMqTransportEndpointArgs]]
    """The endpoints: each a name, or a mapping with `name` and the keys below."""


class SqsTransportEndpointArgs(TypedDict):
    """An endpoint of `SqsTransport` (an entry of its `endpoints`); in Python also its name alone."""

    name: str
    """The endpoint's name, sanitised into an SQS queue name."""
    delayed_delivery: NotRequired[bool]
    """Declare the endpoint's `-delay.fifo` queue for the SQS transport's delayed delivery. Default: `true`."""
    message_retention_seconds: NotRequired[int]
    """The input queue's retention, 61 to 1,209,600 seconds; the delay queue keeps at least 345,600. Default: the section's `messageRetentionSeconds`."""
    max_message_size: NotRequired[int]
    """The largest message, in bytes, SQS accepts into the input and the delay queue (`MaximumMessageSize`), 1,024 to 1,048,576. NServiceBus.AmazonSQS sends bodies up to 1,048,576 bytes inline (through S3 only above that): below that, SQS refuses the larger ones. Default: the section's `maxMessageSize`."""


class SqsTransportArgs(TypedDict):
    """The inputs of ``SqsTransport``: the `nsb-delays:sqs` section of a stack file, in snake_case."""

    queue_name_prefix: NotRequired[str]
    """Prepended to every queue name unless the name already starts with it. Default: `""`."""
    message_retention_seconds: NotRequired[int]
    """The input queue's retention, 61 to 1,209,600 seconds; the delay queue keeps at least 345,600. Default: `345600`."""
    encrypted: NotRequired[bool]
    """SQS-managed server-side encryption (SSE-SQS) on every queue. Default: `true`."""
    max_message_size: NotRequired[int]
    """The largest message, in bytes, SQS accepts into the input and the delay queue (`MaximumMessageSize`), 1,024 to 1,048,576. NServiceBus.AmazonSQS sends bodies up to 1,048,576 bytes inline (through S3 only above that): below that, SQS refuses the larger ones. Default: `1048576`."""
    endpoints: NotRequired[list[SqsTransportEndpointArgs]]
    """The endpoints: each a name, or a mapping with `name` and the keys below."""
