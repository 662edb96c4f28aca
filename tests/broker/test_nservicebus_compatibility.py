"""A graph NServiceBus declared is adopted by the program's resources without PRECONDITION_FAILED, and vice versa.

RabbitMQ refuses a redeclaration whose arguments differ in value or type class
(``PRECONDITION_FAILED - inequivalent arg``), so each direction is a real equivalence check; the
string-TTL case shows the check bites.
"""

from __future__ import annotations

import pika
import pika.exceptions
import pytest

from nsb_delays.brokers.delivery import ArrivalCollector, DelayedPublisher, connection_parameters
from nsb_delays.brokers.engine_emulation import ApplyError, PulumiEngineEmulation
from nsb_delays.brokers.local import LocalRabbitMq
from nsb_delays.brokers.management import ManagementApi
from nsb_delays.brokers.verify import verify_rabbitmq
from nsb_delays.components.model import rabbitmq as rmq
from nsb_delays.infra.config import StackConfig
from nsb_delays.infra.recording import record_stack
from nsb_delays.infra.stack_topology import receiving_queues
from tests.broker import nservicebus_declarations as nsb
from tests.broker.conftest import settled_queues

CASES = [(generation, topology) for generation in rmq.GENERATIONS for topology in rmq.ROUTING_TOPOLOGIES]


def without_statistics(definitions: dict) -> dict:
    return {key: sorted(map(repr, definitions[key])) for key in ("exchanges", "queues", "bindings", "policies")}


def start_endpoints(management: ManagementApi, stack: StackConfig, broker_version: tuple[int, ...]) -> set[str]:
    """Each receiving queue's message pump as it initializes (``ValidateDeliveryLimit``): what each one did."""
    config = stack.rabbitmq
    assert config is not None
    return {nsb.validate_delivery_limit(management, config.vhost, q, broker_version) for q in receiving_queues(config)}


def own_policies(stack: StackConfig, delivery_limit_policies: bool) -> dict[str, str | None]:
    """Version-specific: the policy each receiving queue has applied once the endpoints ran (none below 4.0)."""
    assert stack.rabbitmq is not None
    queues = receiving_queues(stack.rabbitmq)
    return {q: rmq.delivery_limit_policy_name(q) if delivery_limit_policies else None for q in queues}


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
    delivery-limit policies (3.10 has no default limit: they create none). The program adopts all of it."""
    stack = nsb.endpoint_only_stack(new_vhost("nsb-first"), generation, topology, delivery_limit_policies)
    nsb.declare_as_nservicebus(rabbitmq, stack)
    started = start_endpoints(management, stack, broker_version)
    assert started == ({"created policy"} if delivery_limit_policies else {"ok"})
    settled_queues(management, stack.rabbitmq.vhost, own_policies(stack, delivery_limit_policies))
    assert verify_rabbitmq(management, stack.rabbitmq) == []  # the verifier accepts what NServiceBus made
    before = management.definitions(stack.rabbitmq.vhost)
    PulumiEngineEmulation.connect(rabbitmq.management_url).up(record_stack(stack))
    assert without_statistics(management.definitions(stack.rabbitmq.vhost)) == without_statistics(before)


@pytest.mark.parametrize(("generation", "topology"), CASES)
def test_nservicebus_adopts_what_the_program_declared(
    rabbitmq: LocalRabbitMq,
    management: ManagementApi,
    new_vhost,
    broker_version: tuple[int, ...],
    delivery_limit_policies: bool,
    generation: str,
    topology: str,
) -> None:
    """The program declares everything, policies included on 4.0; NServiceBus's endpoints then declare and
    validate without a difference and without creating anything."""
    stack = nsb.endpoint_only_stack(new_vhost("program-first"), generation, topology, delivery_limit_policies)
    PulumiEngineEmulation.connect(rabbitmq.management_url).up(record_stack(stack))
    settled_queues(management, stack.rabbitmq.vhost, own_policies(stack, delivery_limit_policies))
    before = management.definitions(stack.rabbitmq.vhost)
    nsb.declare_as_nservicebus(rabbitmq, stack)  # raises ChannelClosedByBroker(406, PRECONDITION_FAILED) on a mismatch
    assert start_endpoints(management, stack, broker_version) == {"ok"}
    assert without_statistics(management.definitions(stack.rabbitmq.vhost)) == without_statistics(before)
    # and the adopted graph delivers a message NServiceBus-style
    queue = receiving_queues(stack.rabbitmq)[0]
    with ArrivalCollector(rabbitmq.amqp_url, stack.rabbitmq.vhost, [queue]) as collector:
        with DelayedPublisher(rabbitmq.amqp_url, stack.rabbitmq.vhost, generation) as publisher:
            send = publisher.send(queue, 1)
        assert collector.wait_for([send.message_id], timeout=20)


def test_a_declaration_differing_only_in_ttl_type_is_refused(rabbitmq: LocalRabbitMq, new_vhost) -> None:
    """The control: the same graph with a string TTL (what the provider's ``arguments`` map would send)."""
    stack = nsb.endpoint_only_stack(new_vhost("string-ttl"), "v2", "conventional")
    PulumiEngineEmulation.connect(rabbitmq.management_url).up(record_stack(stack))
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        nsb.declare_as_nservicebus(rabbitmq, stack, ttl_as_string=True)
    assert refused.value.reply_code == 406 and "inequivalent arg 'x-message-ttl'" in refused.value.reply_text


def test_the_provider_reports_a_conflicting_existing_queue(rabbitmq: LocalRabbitMq, new_vhost) -> None:
    """NServiceBus declared the graph; creating a queue whose TTL differs is refused by the broker, not
    silently adopted."""
    stack = nsb.endpoint_only_stack(new_vhost("conflict"), "v1", "direct")
    connection = pika.BlockingConnection(connection_parameters(rabbitmq.amqp_url, stack.rabbitmq.vhost))
    try:
        channel = connection.channel()
        level = rmq.delay_level_name(0, "v1")
        channel.queue_declare(level, durable=True, arguments={"x-message-ttl": 999, "x-queue-mode": "lazy"})
    finally:
        connection.close()
    with pytest.raises(ApplyError, match="inequivalent arg 'x-message-ttl'"):
        PulumiEngineEmulation.connect(rabbitmq.management_url).up(record_stack(stack))
