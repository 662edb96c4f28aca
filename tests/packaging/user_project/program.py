"""A user's Pulumi program, tested the way Pulumi's docs test one: under ``pulumi.runtime.set_mocks``.

It lives beside the user's own ``components/`` and ``pipeline/`` packages (run from this directory, so they
are first on sys.path) and uses nsb-delays from the installed wheel. It prints one JSON document: where
each import resolved, what the program registered, and the policy pack's verdict on it.
"""

import json
import sys

import pulumi

import components  # the user's own package
import nsb_delays.components
import nsb_delays.pipeline
import pipeline  # the user's own package
from components import RabbitMqEndpoint as UserRabbitMqEndpoint
from nsb_delays.components import RabbitMqDelayInfrastructure, RabbitMqEndpoint, RabbitMqEndpointPolicies, SqsEndpoint


class Mocks(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.registered: list[dict[str, object]] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        self.registered.append({"type": args.typ, "name": args.name, "inputs": dict(args.inputs)})
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs):
        return {}


mocks = Mocks()
pulumi.runtime.set_mocks(mocks, project="user-project", stack="dev", preview=False)


@pulumi.runtime.test
def program() -> None:
    delays = RabbitMqDelayInfrastructure("delays", {"generation": "v2", "vhost": "/"})
    RabbitMqEndpoint(
        "sales",
        {
            "endpoint": "Sales",
            "routing_topology": "conventional",
            "queue_type": "quorum",
            "delivery_exchange": delays.delivery_exchange,
        },
    )
    SqsEndpoint("sales-sqs", {"endpoint": "Sales", "queue_name_prefix": "prod-"})


program()
mine = UserRabbitMqEndpoint("mine")


def policy_verdict() -> list[str]:
    """The CrossGuard pack's rules, with the pack's offline runner, over the same declarations plus one
    unencrypted SQS endpoint (which the mandatory rule `sqs-queue-encrypted` must catch)."""
    from nsb_delays.components.recording import record
    from nsb_delays.policies.offline import policy_resources, run_policies

    def declare() -> None:
        delays = RabbitMqDelayInfrastructure("delays", {"generation": "v2", "vhost": "/"})
        RabbitMqEndpoint("sales", {"endpoint": "Sales", "delivery_exchange": delays.delivery_exchange})
        policies = {"delivery_limit_queues": ["Sales"], "parked_exchanges": ["Sales"]}
        RabbitMqEndpointPolicies("policies", {**policies, "parking_exchange": delays.parking_exchange})
        SqsEndpoint("sales-sqs", {"endpoint": "Sales", "queue_name_prefix": "prod-"})
        SqsEndpoint("plain-sqs", {"endpoint": "Plain", "queue_name_prefix": "prod-", "encrypted": False})

    return sorted({violation.policy for violation in run_policies(policy_resources(record(declare)))})


json.dump(
    {
        "files": {
            "components": components.__file__,
            "pipeline": pipeline.__file__,
            "nsb_delays.components": nsb_delays.components.__file__,
            "nsb_delays.pipeline": nsb_delays.pipeline.__file__,
            "RabbitMqEndpoint": sys.modules[RabbitMqEndpoint.__module__].__file__,
        },
        "user_owner": [components.OWNER, pipeline.OWNER, mine.name],
        "namespace_path": list(sys.modules["nsb_delays"].__path__),
        "registered": mocks.registered,
        "violations": policy_verdict(),
    },
    sys.stdout,
)
