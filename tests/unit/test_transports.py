"""The program registers, for every stack file of the repository and the docs, exactly what the program before issue 39
registered (``program_recordings.json``): the same resources, names, inputs, options, parents and dependencies, but
for one deliberate change since (an endpoint user's dependencies: its endpoints', not every endpoint's). The
transports themselves are new: each component they compose is compared as the child of the stack it was, and must carry
the alias that tells the engine so (``as_before_the_transports``)."""

from __future__ import annotations

from typing import Any

import pulumi
import pytest
from pulumi_policy.deserialize import SPECIAL_SECRET_SIG, SPECIAL_SIG_KEY

from nsb_delays.components.inputs import InputsRefused
from nsb_delays.components.model.settings import PACKAGE
from nsb_delays.components.provider import COMPONENTS, NsbDelaysProvider
from nsb_delays.components.recording import RecordedResource, by_type, record
from nsb_delays.components.resource_types import RABBITMQ_USER
from nsb_delays.components.transports import RabbitMqTransport, SqsTransport
from nsb_delays.infra.program import SECRET_PLACEHOLDER, declare, record_stack
from tests.unit.program_recordings import StackText, comparable, kept_recordings, parsed, record_program, summary

KEPT = kept_recordings()


def differences(kept: list[list[str]], now: list[list[str]]) -> str:
    gone = [f"  - {entry}" for entry in kept if entry not in now]
    new = [f"  + {entry}" for entry in now if entry not in kept]
    return "\n".join([*gone, *new][:20])


@pytest.mark.parametrize("kept", KEPT, ids=[kept["label"] for kept in KEPT])
def test_the_program_registers_what_it_registered_before_the_transports(kept: dict[str, Any]) -> None:
    recorded = record_program(StackText(kept["label"], kept["stack"], kept["text"]), before_the_transports=True)
    if "refused" in kept:
        assert recorded.get("refused") == kept["refused"]
        return
    assert recorded["resources"] == kept["resources"], differences(kept["resources"], recorded["resources"])


# --- the transports as a user's program declares them --------------------------------------------------------------

SECTION = """
config:
  nsb-delays:rabbitmq:
    brokerVersion: "4.3"
    endpoints:
      - Sales
      - name: Billing
        instanceDiscriminators: [blue]
        user: {passwordKey: billingPassword, sendsTo: [Sales]}
  nsb-delays:billingPassword: {secure: v1:YmlsbGluZw==}
  nsb-delays:sqs:
    queueNamePrefix: prod-
    endpoints: [Sales, {name: Billing, delayedDelivery: false, maxMessageSize: 262144}]
"""


def registered(resources: list[RecordedResource]) -> list[list[str]]:
    return summary(comparable(resources))


def test_a_yaml_or_typescript_program_declares_what_the_program_declares_for_the_same_section() -> None:
    """The provider maps camelCase inputs (whole numbers sent as floats) to the transports' Args: the same
    registrations as the program's for the stack file with the same sections."""
    provider = NsbDelaysProvider(COMPONENTS, PACKAGE, None, "0.1.0")

    def program() -> None:  # an Output belongs to the recording's event loop: made inside it
        rabbitmq = {
            "brokerVersion": "4.3",
            "endpoints": [
                {"name": "Sales"},
                {"name": "Billing", "instanceDiscriminators": ["blue"],
                 "user": {"password": pulumi.Output.secret(SECRET_PLACEHOLDER), "sendsTo": ["Sales"]}},
            ],
        }  # fmt: skip
        sqs = {"queueNamePrefix": "prod-", "endpoints": [{"name": "Sales"},
               {"name": "Billing", "delayedDelivery": False, "maxMessageSize": 262144.0}]}  # fmt: skip
        for component, name, inputs in (("RabbitMqTransport", "rabbitmq", rabbitmq), ("SqsTransport", "sqs", sqs)):
            args = provider.map_inputs(inputs, provider._component_defs[component])
            provider._components[component](name, args)

    from_the_provider = record(program, stack="team")
    from_the_program = record_stack(parsed(StackText("section", "team", SECTION)), stack="team")
    assert registered(from_the_provider) == registered(from_the_program)


USERS = """
config:
  nsb-delays:rabbitmq:
    endpoints:
      - {name: Sales, user: {passwordKey: salesPassword, sendsTo: [Billing, error]}}
      - {name: Billing, instanceDiscriminators: [blue], user: {passwordKey: billingPassword}}
      - Shipping
  nsb-delays:salesPassword: {secure: v1:c2FsZXM=}
  nsb-delays:billingPassword: {secure: v1:YmlsbGluZw==}
"""


def test_an_endpoint_user_depends_on_the_endpoints_whose_queues_it_uses_not_on_every_endpoint() -> None:
    """Exactly the resources of its own endpoint and of the endpoints it sends to (their queues exist before it can log
    in); error is a shared queue, no endpoint's. Not every endpoint's: N users × N endpoints of them in a stack's
    state, as the program before the transports registered."""
    resources = record_stack(parsed(StackText("users", "team", USERS)), stack="team")
    names = {r.urn: r.name for r in resources}
    parents = {r.urn: r.parent for r in resources}

    def under(endpoints: set[str]) -> set[str]:
        return {r.urn for r in resources if r.custom and names.get(parents[r.urn] or "") in endpoints}

    users = {r.name: set(r.dependencies) for r in resources if r.type == "nsb-delays:index:RabbitMqEndpointUser"}
    assert users == {
        "rabbitmq-user-Sales": under({"rabbitmq-Sales", "rabbitmq-Billing"}),
        "rabbitmq-user-Billing": under({"rabbitmq-Billing"}),
    }
    assert all(users.values()) and under({"rabbitmq-Shipping"}), "resources to depend on, and some not depended on"


def test_each_endpoint_user_gets_its_own_password_from_a_stack_file_or_the_components_inputs() -> None:
    """By the key its ``passwordKey`` names, or from its own ``password`` input: never another user's. An endpoint
    without a user between them moves no user's password onto the next one."""
    by_key = {"salesPassword": "sales-secret", "billingPassword": "billing-secret"}
    from_the_stack = record(lambda: declare(parsed(StackText("users", "team", USERS)), by_key), stack="team")

    def from_inputs() -> None:
        endpoints = [{"name": "Sales", "user": {"password": "sales-secret"}}, "Shipping",
                     {"name": "Billing", "user": {"password": "billing-secret"}}]  # fmt: skip
        RabbitMqTransport("rabbitmq", {"endpoints": endpoints})

    from_the_inputs = record(from_inputs, stack="team")
    for resources in (from_the_stack, from_the_inputs):
        passwords = {user.inputs["name"]: user.inputs["password"] for user in by_type(resources, RABBITMQ_USER)}
        assert passwords == {
            "Sales": {SPECIAL_SIG_KEY: SPECIAL_SECRET_SIG, "value": "sales-secret"},
            "Billing": {SPECIAL_SIG_KEY: SPECIAL_SECRET_SIG, "value": "billing-secret"},
        }


def test_a_bad_section_is_refused_with_every_input_named_before_anything_is_declared() -> None:
    sink: list[RecordedResource] = []
    args: Any = {
        "broker_version": 4.3,
        "endpoints": ["Sales", {"name": "Billing", "user": {"sends_to": ["Nowhere"]}}, {"name": "Sales"}],
    }
    with pytest.raises(InputsRefused) as refused:
        record(lambda: RabbitMqTransport("rabbitmq", args), sink=sink)
    assert str(refused.value).splitlines()[1:] == [
        "  - broker_version: expected a string such as '3.10' or '4.0', got float (quote it: YAML reads 4.3 as a "
        "number, 3.10 as 3.1)",
        "  - endpoints[1].user: missing required key 'password' (its password: a Pulumi secret)",
        "  - endpoints: queue 'Sales' is declared 2 times (duplicate endpoint or queue)",
    ]
    assert str(refused.value).startswith("RabbitMqTransport 'rabbitmq': 3 problems with its inputs:")
    assert sink == []
    with pytest.raises(InputsRefused, match=r"endpoints\[0\] \('A'\): maximum message size 5 bytes"):
        record(lambda: SqsTransport("sqs", {"endpoints": [{"name": "A", "max_message_size": 5}]}))


def test_a_stack_declares_one_transport_of_each_kind() -> None:
    def program() -> None:
        RabbitMqTransport("a", {"endpoints": ["Sales"]})
        RabbitMqTransport("b", {"vhost": "other", "endpoints": ["Billing"]})

    with pytest.raises(InputsRefused, match="a stack declares one RabbitMqTransport"):
        record(program)
