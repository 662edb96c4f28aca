"""What RabbitMQ 4.3 refuses that 4.0 took, on the real brokers, checked against the model's facts
(``rmq.QUEUE_ARGUMENT_REFUSALS``, ``rmq.POLICY_KEY_REFUSALS``) that the policy pack's ``refused-by-broker-version``
rule applies to a stack's ``brokerVersion``.

Kept on 4.0 (``also_on_rabbitmq_4_0``): 4.0.5 takes ``x-queue-version: 1`` and the deprecated (x-)queue-master-locator,
4.3.6 refuses them, so the expectations differ between the two.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pika
import pika.exceptions
import pytest

from nsb_delays.brokers.management import ManagementApi, ManagementError
from nsb_delays.components.model.rabbitmq.versions import POLICY_KEY_REFUSALS, QUEUE_ARGUMENT_REFUSALS, refusals_of
from servers.rabbitmq import LocalRabbitMq
from tests.conftest import also_on_rabbitmq_4_0

ARGUMENTS = [
    {"x-queue-version": 1},
    {"x-queue-version": 2},
    {"x-queue-master-locator": "min-masters"},
    {"x-queue-mode": "lazy"},  # the v1 graph's level queues: still taken by 4.3
]


def broker_refuses_declaring(rabbitmq: LocalRabbitMq, vhost: str, arguments: dict[str, Any]) -> bool:
    connection = pika.BlockingConnection(pika.URLParameters(rabbitmq.vhost_amqp_url(vhost)))
    try:
        connection.channel().queue_declare("declared", durable=True, arguments=arguments)
    except (pika.exceptions.ChannelClosedByBroker, pika.exceptions.ConnectionClosedByBroker):
        return True
    finally:
        if connection.is_open:
            connection.close()
    return False


@also_on_rabbitmq_4_0
@pytest.mark.parametrize(
    "arguments", ARGUMENTS, ids=lambda arguments: "-".join(f"{k}={v}" for k, v in arguments.items())
)
def test_the_model_knows_which_queue_arguments_each_broker_refuses(
    rabbitmq: LocalRabbitMq,
    new_vhost: Callable[[str], str],
    broker_version: tuple[int, ...],
    arguments: dict[str, Any],
) -> None:
    """Version-specific: 4.3 refuses x-queue-version 1 and x-queue-master-locator; 3.10 and 4.0 take all four."""
    refused = refusals_of(QUEUE_ARGUMENT_REFUSALS, arguments, broker_version)
    assert broker_refuses_declaring(rabbitmq, new_vhost("refusals"), arguments) == bool(refused)
    assert bool(refused) == (broker_version >= (4, 3, 0) and arguments != ARGUMENTS[1] and arguments != ARGUMENTS[3])


@also_on_rabbitmq_4_0
def test_the_model_knows_which_policy_keys_each_broker_refuses(
    management: ManagementApi, new_vhost: Callable[[str], str], broker_version: tuple[int, ...]
) -> None:
    """Version-specific: 4.3 refuses a policy with queue-master-locator; 3.10 and 4.0 take it."""
    vhost = new_vhost("policy-refusals")
    definition = {"queue-master-locator": "min-masters"}
    refused = refusals_of(POLICY_KEY_REFUSALS, definition, broker_version)
    body = {"pattern": "^located$", "apply-to": "queues", "priority": 0, "definition": definition}
    try:
        management.request("PUT", f"policies/{vhost}/located", body)
        taken = True
    except ManagementError as error:
        assert "queue-master-locator" in str(error)
        taken = False
    assert taken == (not refused) == (broker_version < (4, 3, 0))
