"""A graph NServiceBus declared is adopted by a real ``pulumi up`` of the program without PRECONDITION_FAILED, and
vice versa.

RabbitMQ refuses a redeclaration whose arguments differ in value or type class
(``PRECONDITION_FAILED - inequivalent arg``), so each direction is a real equivalence check; the
string-TTL case shows the check bites.
"""

from __future__ import annotations

import pika
import pika.exceptions
import pytest

from nsb_delays.brokers.delivery import ArrivalCollector, DelayedPublisher, connection_parameters
from nsb_delays.brokers.management import ManagementApi
from nsb_delays.brokers.verify import verify_rabbitmq
from nsb_delays.components.model.rabbitmq.delivery_limits import delivery_limit_policy_name
from nsb_delays.components.model.rabbitmq.names import GENERATIONS, ROUTING_TOPOLOGIES, delay_level_name
from nsb_delays.infra.pulumi_engine import PulumiFailed
from nsb_delays.stack.config import StackConfig, parse_stack_config
from servers.rabbitmq import LocalRabbitMq
from tests.broker import nservicebus_declarations as nsb
from tests.broker.conftest import settled_queues
from tests.provisioning import pulumi_up

CASES = [(generation, topology) for generation in GENERATIONS for topology in ROUTING_TOPOLOGIES]


def without_statistics(definitions: dict) -> dict:
    return {key: sorted(map(repr, definitions[key])) for key in ("exchanges", "queues", "bindings", "policies")}


def start_endpoints(management: ManagementApi, stack: StackConfig, broker_version: tuple[int, ...]) -> set[str]:
    """Each receiving queue's message pump as it initializes (``ValidateDeliveryLimit``): what each one did."""
    config = stack.rabbitmq
    assert config is not None
    return {nsb.validate_delivery_limit(management, config.vhost, q, broker_version) for q in config.receiving_queues()}


def own_policies(stack: StackConfig, delivery_limit_policies: bool) -> dict[str, str | None]:
    """Version-specific: the policy each receiving queue has applied once the endpoints ran (none below 4.0): the
    stack's (NServiceBus's own name, or a combined one), or the transport's own where it created it."""
    assert stack.rabbitmq is not None
    declared = {q: p.name for p in stack.rabbitmq.topology.delivery_limit_policies for q in p.targets}
    queues = stack.rabbitmq.receiving_queues()
    own = {q: declared.get(q, delivery_limit_policy_name(q)) for q in queues}
    return {q: own[q] if delivery_limit_policies else None for q in queues}


@pytest.mark.parametrize(("generation", "topology"), CASES)
def test_program_adopts_what_nservicebus_declared(
    rabbitmq: LocalRabbitMq,
    management: ManagementApi,
    new_vhost,
    broker_version: tuple[int, ...],
    delivery_limit_policies: bool,
    generation: str,
    topology: str,
) -> None:
    """NServiceBus declares the graph; on 4.0 its endpoints, started with policymaker rights, add their
    delivery-limit policies (3.10 has no default limit: they create none). The program adopts all of it.
    Without parking, which NServiceBus never declares."""
    section = nsb.endpoint_only_section(
        new_vhost("nsb-first"), generation, topology, delivery_limit_policies, park_unroutable=False
    )
    stack = parse_stack_config({"rabbitmq": section})
    nsb.declare_as_nservicebus(rabbitmq, stack)
    started = start_endpoints(management, stack, broker_version)
    assert started == ({"created policy"} if delivery_limit_policies else {"ok"})
    settled_queues(management, stack.rabbitmq.vhost, own_policies(stack, delivery_limit_policies))
    assert verify_rabbitmq(management, stack.rabbitmq) == []  # the verifier accepts what NServiceBus made
    before = management.definitions(stack.rabbitmq.vhost)
    pulumi_up(rabbitmq.management_url, rabbitmq.username, rabbitmq.password, section)
    assert without_statistics(management.definitions(stack.rabbitmq.vhost)) == without_statistics(before)


@pytest.mark.parametrize(
    ("generation", "topology", "policy_scope"),
    [*((*case, "endpoint") for case in CASES), ("v2", "conventional", "stack")],
)
def test_nservicebus_adopts_what_the_program_declared(
    rabbitmq: LocalRabbitMq,
    management: ManagementApi,
    new_vhost,
    broker_version: tuple[int, ...],
    delivery_limit_policies: bool,
    generation: str,
    topology: str,
    policy_scope: str,
) -> None:
    """The program declares everything, policies included on 4.0 (one per queue, or the stack's combined ones, whose
    100000 the transport takes from any policy); NServiceBus's endpoints then declare and validate without a
    difference and without creating anything."""
    section = nsb.endpoint_only_section(
        new_vhost("program-first"), generation, topology, delivery_limit_policies, policy_scope=policy_scope
    )
    stack = parse_stack_config({"rabbitmq": section})
    pulumi_up(rabbitmq.management_url, rabbitmq.username, rabbitmq.password, section)
    settled_queues(management, stack.rabbitmq.vhost, own_policies(stack, delivery_limit_policies))
    before = management.definitions(stack.rabbitmq.vhost)
    nsb.declare_as_nservicebus(rabbitmq, stack)  # raises ChannelClosedByBroker(406, PRECONDITION_FAILED) on a mismatch
    assert start_endpoints(management, stack, broker_version) == {"ok"}
    assert without_statistics(management.definitions(stack.rabbitmq.vhost)) == without_statistics(before)
    # and the adopted graph delivers a message NServiceBus-style
    queue = stack.rabbitmq.receiving_queues()[0]
    with ArrivalCollector(rabbitmq.amqp_url, stack.rabbitmq.vhost, [queue]) as collector:
        with DelayedPublisher(rabbitmq.amqp_url, stack.rabbitmq.vhost, generation) as publisher:
            send = publisher.send(queue, 1)
        assert collector.wait_for([send.message_id], timeout=20)


def test_a_declaration_differing_only_in_ttl_type_is_refused(rabbitmq: LocalRabbitMq, new_vhost) -> None:
    """The control: the same graph with a string TTL (what the provider's ``arguments`` map would send)."""
    section = nsb.endpoint_only_section(new_vhost("string-ttl"), "v2", "conventional")
    stack = parse_stack_config({"rabbitmq": section})
    pulumi_up(rabbitmq.management_url, rabbitmq.username, rabbitmq.password, section)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        nsb.declare_as_nservicebus(rabbitmq, stack, ttl_as_string=True)
    assert refused.value.reply_code == 406 and "inequivalent arg 'x-message-ttl'" in refused.value.reply_text


def test_the_provider_reports_a_conflicting_existing_queue(rabbitmq: LocalRabbitMq, new_vhost) -> None:
    """NServiceBus declared the graph; creating a queue whose TTL differs is refused by the broker, not
    silently adopted."""
    section = nsb.endpoint_only_section(new_vhost("conflict"), "v1", "direct")
    stack = parse_stack_config({"rabbitmq": section})
    connection = pika.BlockingConnection(connection_parameters(rabbitmq.amqp_url, stack.rabbitmq.vhost))
    try:
        channel = connection.channel()
        level = delay_level_name(0, "v1")
        channel.queue_declare(level, durable=True, arguments={"x-message-ttl": 999, "x-queue-mode": "lazy"})
    finally:
        connection.close()
    with pytest.raises(PulumiFailed, match="inequivalent arg 'x-message-ttl'"):
        pulumi_up(rabbitmq.management_url, rabbitmq.username, rabbitmq.password, section)
