"""The components as a Pulumi component provider, so C#, TypeScript, Go and YAML programs can use them.

``pulumi package add <path to components/>`` runs ``__main__.py`` beside ``PulumiPlugin.yaml``; the
schema is inferred from the ``args`` TypedDicts below. Each class here is the Python component with
the ``(name, args, opts)`` signature the provider host calls; resource type tokens are the same
(``nsb-delays:index:<ClassName>``). Inputs are plain values, not Outputs: they decide which
resources exist, so they must be known when the component is constructed.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import version
from typing import Any, NotRequired, Optional, TypedDict, get_type_hints

import pulumi
from pulumi import Inputs
from pulumi.provider import ConstructResult
from pulumi.provider.experimental.component import ComponentProvider
from pulumi.provider.server import ComponentInitError, main

from . import rabbitmq, sqs

PACKAGE = "nsb-delays"


class RabbitMqDelayInfrastructureArgs(TypedDict):
    generation: NotRequired[str]
    """Delay infrastructure generation: "v2" (quorum queues, default) or "v1" (classic lazy queues)."""
    vhost: NotRequired[str]
    """Virtual host (default "/")."""
    protect_delay_queues: NotRequired[bool]
    """Protect and retain the 28 level queues, which hold delayed messages (default true)."""
    park_unroutable: NotRequired[bool]
    """The parking exchange and queue as the delivery exchange's alternate exchange, by policy (default true)."""
    adopt_existing: NotRequired[bool]
    """Import the objects NServiceBus installers already declared instead of creating them."""
    broker_version: NotRequired[str]
    """RabbitMQ version of the broker, "MAJOR.MINOR" (default "4.0"): below 4.0 classic queues are declared
    without an explicit x-queue-type, as the broker keeps them."""


class RabbitMqEndpointArgs(TypedDict):
    endpoint: str
    """The endpoint's input queue name (its address)."""
    generation: NotRequired[str]
    """Delay infrastructure generation whose delivery exchange the endpoint binds to (default "v2")."""
    routing_topology: NotRequired[str]
    """"conventional" (default; fanout exchange per queue) or "direct"."""
    queue_type: NotRequired[str]
    """"quorum" (default) or "classic"."""
    vhost: NotRequired[str]
    """Virtual host (default "/")."""
    instance_discriminators: NotRequired[list[str]]
    """Instance discriminators: each adds a queue "<endpoint>-<discriminator>"."""
    legacy_timeout_manager: NotRequired[bool]
    """Also declare "<endpoint>.Timeouts" and "<endpoint>.TimeoutsDispatcher" for old endpoints."""
    delivery_limit_policies: NotRequired[bool]
    """NServiceBus's "nsb.<queue>.delivery-limit" policy per quorum receiving queue (default: brokerVersion >= 4.0)."""
    park_unroutable: NotRequired[bool]
    """Conventional topology: the parking exchange as each receiving queue's exchange's alternate (default true)."""
    adopt_existing: NotRequired[bool]
    """Import the endpoint's existing queues, exchange and bindings instead of creating them."""
    broker_version: NotRequired[str]
    """RabbitMQ version of the broker, "MAJOR.MINOR" (default "4.0"): below 4.0 classic queues are declared
    without an explicit x-queue-type, as the broker keeps them."""


class RabbitMqEndpointUserArgs(TypedDict):
    user: str
    """The RabbitMQ user name the endpoint logs in as."""
    password: str
    """Its password: pass a secret (it is stored as one either way)."""
    receiving_queues: list[str]
    """The endpoint's own queue(s): it consumes there, and delayed retries go there."""
    sends_to: NotRequired[list[str]]
    """Every queue it sends to, immediately or delayed."""
    publishes: NotRequired[list[str]]
    """Event exchanges it publishes to ("Namespace:TypeName"), base classes and interfaces included."""
    subscribes_to: NotRequired[list[str]]
    """Event exchanges it subscribes to, base classes and interfaces included."""
    management_api: NotRequired[bool]
    """Its broker checks use the management API (the NServiceBus default, true): the "management" tag."""
    routing_topology: NotRequired[str]
    """"conventional" (default) or "direct"."""
    generation: NotRequired[str]
    """Delay infrastructure generation it sends delayed messages through (default "v2")."""
    error_queue: NotRequired[str]
    """The error queue (default "error")."""
    audit_queue: NotRequired[str]
    """The audit queue (default "audit")."""
    vhost: NotRequired[str]
    """Virtual host (default "/")."""


class SqsEndpointArgs(TypedDict):
    endpoint: str
    """The endpoint's input queue name before prefix and sanitising."""
    queue_name_prefix: NotRequired[str]
    """Prepended unless the name already starts with it."""
    delayed_delivery: NotRequired[bool]
    """Create the "-delay.fifo" queue for delays over 900 s (default true)."""
    message_retention_seconds: NotRequired[int]
    """Input queue retention (default 345600); the delay queue keeps at least 345600."""
    encrypted: NotRequired[bool]
    """SQS-managed server-side encryption (default true)."""


def camel_case(key: str) -> str:
    """An input's name as the schema (and so the calling program) spells it."""
    head, *rest = key.split("_")
    return head + "".join(part.title() for part in rest)


def python_arguments(args_type: type, args: Any) -> dict[str, Any]:
    """The inputs as the Python component takes them: whole numbers for ``int`` inputs, and a refusal naming
    the input for a number where the schema says string.

    Inputs from other languages travel as a protobuf ``Struct``, whose numbers are all doubles, and
    the provider host hands them on as floats (``86400.0``); the model refuses a float retention. A
    string can arrive as a number too: Pulumi YAML turns every config value that parses as a number into
    one, whatever the config's declared type (pulumi/pulumi-yaml ``pkg/server/server.go`` ``Run``), so
    ``brokerVersion: ${brokerVersion}`` with ``"3.10"`` in the stack's config reaches here as ``3.1``.
    """
    hints = get_type_hints(args_type)
    converted = dict(args)
    for key, value in args.items():
        hint = hints.get(key)
        if hint is int and isinstance(value, float) and value.is_integer():
            converted[key] = int(value)
        elif hint is str and isinstance(value, int | float) and not isinstance(value, bool):
            raise pulumi.InputPropertyError(
                camel_case(key),
                "a number where a string belongs. Pulumi YAML turns a config value that looks like a number into "
                'one: write the value in the program ("3.10"), or in a form that is not a number (a broker version '
                'with its patch level: "3.10.0")',
            )
    return converted


@contextmanager
def refusals_as_input_errors(component: str, name: str) -> Iterator[None]:
    """The model's refusal of an input (a ``ValueError`` naming it and the rule) as the engine shows a bad input:
    one line, no Python traceback (``pulumi.provider.server`` ``Construct`` reports ``InputPropertiesError``
    as invalid arguments and anything else as an unexpected exception with its stack)."""
    try:
        yield
    except ValueError as error:
        raise pulumi.InputPropertiesError(f"{component} {name!r}: {error}") from None


class RabbitMqDelayInfrastructure(rabbitmq.RabbitMqDelayInfrastructure):
    """The 28 NServiceBus delay levels, the delivery exchange and their bindings."""

    delivery_exchange: pulumi.Output[str]
    level_names: pulumi.Output[list[str]]
    generation: pulumi.Output[str]

    def __init__(self, name: str, args: RabbitMqDelayInfrastructureArgs, opts: pulumi.ResourceOptions | None = None):
        with refusals_as_input_errors(type(self).__name__, name):
            super().__init__(name, opts=opts, **python_arguments(RabbitMqDelayInfrastructureArgs, args))


class RabbitMqEndpoint(rabbitmq.RabbitMqEndpoint):
    """An endpoint's queues, its fanout exchange (conventional) and its "#.<endpoint>" delivery binding."""

    queue_name: pulumi.Output[str]
    receiving_queues: pulumi.Output[list[str]]
    delivery_binding_key: pulumi.Output[str]

    def __init__(self, name: str, args: RabbitMqEndpointArgs, opts: pulumi.ResourceOptions | None = None):
        with refusals_as_input_errors(type(self).__name__, name):
            super().__init__(name, opts=opts, **python_arguments(RabbitMqEndpointArgs, args))


class RabbitMqEndpointUser(rabbitmq.RabbitMqEndpointUser):
    """The user an installer-less endpoint logs in as, with the least permissions and topic permissions it needs."""

    user_name: pulumi.Output[str]
    tags: pulumi.Output[list[str]]

    def __init__(self, name: str, args: RabbitMqEndpointUserArgs, opts: pulumi.ResourceOptions | None = None):
        with refusals_as_input_errors(type(self).__name__, name):
            super().__init__(name, opts=opts, **python_arguments(RabbitMqEndpointUserArgs, args))


class SqsEndpoint(sqs.SqsEndpoint):
    """An endpoint's SQS input queue and its "-delay.fifo" queue."""

    queue_name: pulumi.Output[str]
    queue_url: pulumi.Output[str]
    queue_arn: pulumi.Output[str]
    delay_queue_name: Optional[pulumi.Output[str]]  # noqa: UP045 (the schema analyzer reads Optional)
    delay_queue_url: Optional[pulumi.Output[str]]  # noqa: UP045
    delay_queue_arn: Optional[pulumi.Output[str]]  # noqa: UP045

    def __init__(self, name: str, args: SqsEndpointArgs, opts: pulumi.ResourceOptions | None = None):
        with refusals_as_input_errors(type(self).__name__, name):
            super().__init__(name, opts=opts, **python_arguments(SqsEndpointArgs, args))


COMPONENTS = [RabbitMqDelayInfrastructure, RabbitMqEndpoint, RabbitMqEndpointUser, SqsEndpoint]


class NsbDelaysProvider(ComponentProvider):
    """The SDK's component provider, with bad inputs reported as bad inputs.

    ``ComponentProvider.construct`` wraps whatever a component's ``__init__`` raises in ``ComponentInitError``,
    which ``pulumi.provider.server`` ``Construct`` reports as an unexpected exception with its Python stack. An
    input error is unwrapped here, so the engine shows it as one: the input's name and the rule, no traceback.
    """

    def construct(
        self, name: str, resource_type: str, inputs: Inputs, options: pulumi.ResourceOptions | None = None
    ) -> ConstructResult:
        try:
            return super().construct(name, resource_type, inputs, options)
        except ComponentInitError as error:
            if isinstance(error.inner, pulumi.InputPropertyError | pulumi.InputPropertiesError):
                raise error.inner from None
            raise


def serve(arguments: list[str]) -> None:
    """Serve the components to the engine (what ``component_provider_host`` does, with ``NsbDelaysProvider``)."""
    main(NsbDelaysProvider(COMPONENTS, PACKAGE, None, version(PACKAGE)), arguments)
