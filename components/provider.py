"""The components as a Pulumi component provider, so C#, TypeScript, Go and YAML programs can use them.

Pulumi's own component provider (``pulumi.provider.experimental``) serves the Python classes as they are: it infers
the schema from each component's ``args`` TypedDict (``components/args.py``) and constructs the same class a Python
program does. Project code here does only what that host cannot: it reports a component's refusal of an input as a
bad input (``NsbDelaysProvider.construct``), and it starts from an installed package rather than a plugin directory
(``serve``, run by ``nsb-delays pulumi-plugin``), which the Python language host built here cannot start.
"""

from importlib.metadata import version

import pulumi
from pulumi import Inputs
from pulumi.provider import ConstructResult
from pulumi.provider.experimental.component import ComponentProvider
from pulumi.provider.server import ComponentInitError, main

from .model.settings import PACKAGE
from .rabbitmq import (
    RabbitMqDelayInfrastructure,
    RabbitMqEndpoint,
    RabbitMqEndpointPolicies,
    RabbitMqEndpointUser,
    RabbitMqSharedQueues,
)
from .sqs import SqsEndpoint
from .transports import RabbitMqTransport, SqsTransport

COMPONENTS: list[type[pulumi.ComponentResource]] = [
    RabbitMqTransport,
    SqsTransport,
    RabbitMqDelayInfrastructure,
    RabbitMqSharedQueues,
    RabbitMqEndpoint,
    RabbitMqEndpointPolicies,
    RabbitMqEndpointUser,
    SqsEndpoint,
]


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
