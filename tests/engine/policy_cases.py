"""What a user's program adds to break one mandatory rule of the pack, for ``pulumi preview --policy-pack``.

Each case declares real pulumi-rabbitmq resources beside the components' (``user_program/__main__.py``);
``rule`` is the pack's rule that must refuse it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pulumi
import pulumi_rabbitmq as rabbitmq

from nsb_delays.components.model import rabbitmq as rmq
from nsb_delays.components.rabbitmq import arguments_json


@dataclass(frozen=True)
class Case:
    rule: str
    declare: Callable[[str], None]


def empty_password_user(vhost: str) -> None:
    """Only an empty password: pulumi_rabbitmq's ``User`` always lists ``password`` in
    ``additional_secret_outputs`` (``user.py``, ``_internal_init``), so a plain-text one is a secret anyway."""
    rabbitmq.User("sales-user", name="sales", password="", tags=[])


def ttl_policy_over_the_levels(vhost: str) -> None:
    rabbitmq.Policy(
        "catch-all-ttl",
        name="catch-all-ttl",
        vhost=vhost,
        policy=rabbitmq.PolicyPolicyArgs(
            pattern=".*", priority=0, apply_to="queues", definition={"message-ttl": "60000"}
        ),
    )


def second_sales_queue(vhost: str) -> None:
    rabbitmq.Queue("sales-again", name="Sales", vhost=vhost, settings=rabbitmq.QueueSettingsArgs(durable=True))


def delivery_binding_to_nobody(vhost: str) -> None:
    rabbitmq.Binding(
        "ghost-delivery",
        source=rmq.delivery_exchange_name("v2"),
        vhost=vhost,
        destination="Ghost",
        destination_type="exchange",
        routing_key="#.Ghost",
    )


def lone_level_with_wrong_ttl(vhost: str) -> None:
    """A level queue of its own in another vhost: its TTL is wrong, and the chain around it is missing."""
    rabbitmq.VHost("other", name="other")
    level = next(q for q in rmq.delay_levels("v2").queues if q.name == rmq.delay_level_name(3, "v2"))
    arguments = dict(level.arguments) | {"x-message-ttl": 31000}
    rabbitmq.Queue(
        "stray-level",
        name=rmq.delay_level_name(3, "v2"),
        vhost="other",
        settings=rabbitmq.QueueSettingsArgs(durable=True, arguments_json=arguments_json(arguments)),
        opts=pulumi.ResourceOptions(protect=True),
    )


CASES: dict[str, Case] = {
    "empty-password": Case("rabbitmq-user-password-secret", empty_password_user),
    "ttl-policy": Case("delay-queue-broker-policy", ttl_policy_over_the_levels),
    "duplicate-queue": Case("unique-physical-names", second_sales_queue),
    "binding-to-nobody": Case("endpoint-destinations-exist", delivery_binding_to_nobody),
    "stray-level-ttl": Case("delay-level-queue-arguments", lone_level_with_wrong_ttl),
    "stray-level-chain": Case("delay-level-chain-complete", lone_level_with_wrong_ttl),
}
