"""The program registers, for every stack file of the repository and the docs, what the release before issue 51
registered (``program_recordings.json``): the same resources, inputs, options, parents and outputs, each under the
name a stack deployed by that release knows it by (a renamed child by its alias), and waiting for no more than it did
(an endpoint no longer waits for the delay graph's every resource, a user for its endpoints' every resource)."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_rabbitmq as rabbitmq
import pytest
from pulumi_policy.deserialize import SPECIAL_SECRET_SIG, SPECIAL_SIG_KEY

from nsb_delays.components.inputs import InputsRefused
from nsb_delays.components.model.settings import PACKAGE
from nsb_delays.components.provider import COMPONENTS, NsbDelaysProvider
from nsb_delays.components.recording import RecordedResource, by_type, record
from nsb_delays.components.resource_types import RABBITMQ_USER
from nsb_delays.components.transports import RabbitMqTransport, SqsTransport
from nsb_delays.infra.program import SECRET_PLACEHOLDER, declare, record_stack
from tests.unit.program_recordings import (
    StackText,
    comparable,
    kept_recordings,
    parsed,
    record_program,
    summary,
    waits_for,
)

KEPT = kept_recordings()


def differences(kept: list[list[Any]], now: list[list[Any]]) -> str:
    gone = [f"  - {entry[:3]}" for entry in kept if entry[:3] not in [n[:3] for n in now]]
    new = [f"  + {entry[:3]}" for entry in now if entry[:3] not in [k[:3] for k in kept]]
    return "\n".join([*gone, *new][:20])


@pytest.mark.parametrize("kept", KEPT, ids=[kept["label"] for kept in KEPT])
def test_the_program_registers_what_the_release_before_registered_waiting_for_no_more(kept: dict[str, Any]) -> None:
    recorded = record_program(StackText(kept["label"], kept["stack"], kept["text"]))
    if "refused" in kept:
        assert recorded.get("refused") == kept["refused"]
        return
    now, before = recorded["resources"], kept["resources"]
    assert [entry[:3] for entry in now] == [entry[:3] for entry in before], differences(before, now)
    waited_before, waited_now = waits_for(before), waits_for(now)
    wider = {resource: sorted(waited_now[resource] - waited_before[resource]) for resource in waited_now}
    assert {resource: more for resource, more in wider.items() if more} == {}


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


def test_an_endpoint_user_depends_on_the_endpoint_queues_it_uses_and_nothing_else() -> None:
    """Exactly its own endpoint's queues and the endpoint queues it sends to (they exist before it can log in); error is
    a shared queue, declared before any endpoint. Not every resource of those endpoints, nor every endpoint's: N users ×
    N endpoints of them in a stack's state, as the program before the transports registered."""
    resources = record_stack(parsed(StackText("users", "team", USERS)), stack="team")
    queues = {r.inputs["name"]: r.urn for r in by_type(resources, "rabbitmq:index/queue:Queue")}
    users = {r.name: set(r.dependencies) for r in resources if r.type == "nsb-delays:index:RabbitMqEndpointUser"}
    assert users == {
        "rabbitmq-user-Sales": {queues["Sales"], queues["Billing"]},
        "rabbitmq-user-Billing": {queues["Billing"], queues["Billing-blue"]},
    }


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


def two_transports() -> None:
    """Two transports of each kind in one program: two vhosts of one broker, and a second broker through a provider
    of its own."""
    RabbitMqTransport("team-a", {"vhost": "a", "endpoints": ["Sales", {"name": "Billing", "user": {"password": "pa"}}]})
    other = rabbitmq.Provider("other-broker", endpoint="http://other:15672", username="u", password="p")
    options = pulumi.ResourceOptions(providers=[other])
    RabbitMqTransport("team-b", {"vhost": "b", "endpoints": ["Sales", "Shipping"]}, opts=options)
    SqsTransport("queues-a", {"endpoints": ["Sales"]})
    SqsTransport("queues-b", {"queue_name_prefix": "b-", "endpoints": ["Sales"]})


def test_two_transports_of_each_kind_in_one_program_name_everything_from_their_own_names() -> None:
    resources = record(two_transports)
    assert len({r.urn for r in resources}) == len(resources)
    parents = {r.urn: r for r in resources}

    def transport_of(resource: RecordedResource) -> str:
        while resource.parent in parents:
            resource = parents[resource.parent]
        return resource.name

    below = [r for r in resources if r.parent in parents]
    assert below and all(r.name.startswith(f"{transport_of(r)}-") for r in below)
    vhosts = {(transport_of(r), r.inputs["vhost"]) for r in below if "vhost" in r.inputs}
    assert vhosts == {("team-a", "a"), ("team-b", "b")}


def test_each_transport_keeps_its_vhosts_order_and_broker_to_itself() -> None:
    """Each policy waits for the policy before it in its own transport's vhost and for the objects it applies to, all
    of that transport; each resource of the second broker's transport goes through that broker's provider."""
    resources = record(two_transports)
    by_urn = {r.urn: r for r in resources}

    def transport_of(urn: str) -> str:
        resource = by_urn[urn]
        while resource.parent in by_urn:
            resource = by_urn[resource.parent]
        return resource.name

    policies = list(by_type(resources, "rabbitmq:index/policy:Policy"))
    assert {transport_of(p.urn) for p in policies} == {"team-a", "team-b"}
    for policy in policies:
        assert policy.dependencies and {transport_of(urn) for urn in policy.dependencies} == {transport_of(policy.urn)}
    rabbitmq_resources = [r for r in resources if r.custom and r.type.startswith("rabbitmq:index/")]
    providers = {(transport_of(r.urn), r.provider.rpartition("::")[0].rpartition("::")[2] if r.provider else None)
                 for r in rabbitmq_resources}  # fmt: skip
    assert providers == {("team-a", None), ("team-b", "other-broker")}


def test_a_transport_can_be_declared_again_in_another_recording() -> None:
    """No state outside the instance: the same transport in two programs of one process registers the same."""
    first, second = record(two_transports), record(two_transports)
    assert registered(first) == registered(second)
