"""What a user's program adds to break one mandatory rule of the pack, for ``pulumi preview --policy-pack``.

Each case declares real pulumi-rabbitmq resources beside the components' (``user_program/__main__.py``);
``rule`` is the pack's rule that must refuse it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pulumi
import pulumi_rabbitmq as rabbitmq

from nsb_delays.components.encoding import arguments_json
from nsb_delays.components.model.rabbitmq.graph import ALTERNATE_EXCHANGE_ARGUMENT, delay_levels
from nsb_delays.components.model.rabbitmq.names import delay_level_name, delivery_exchange_name


@dataclass(frozen=True)
class Case:
    rule: str
    declare: Callable[[str], None]
    pack_config: dict[str, object] | None = None  # --policy-pack-config, when the rule needs one


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
        source=delivery_exchange_name("v2"),
        vhost=vhost,
        destination="Ghost",
        destination_type="exchange",
        routing_key="#.Ghost",
    )


def lone_level_with_wrong_ttl(vhost: str) -> None:
    """A level queue of its own in another vhost: its TTL is wrong, and the chain around it is missing."""
    rabbitmq.VHost("other", name="other")
    level = next(q for q in delay_levels("v2").queues if q.name == delay_level_name(3, "v2"))
    arguments = dict(level.arguments) | {"x-message-ttl": 31000}
    rabbitmq.Queue(
        "stray-level",
        name=delay_level_name(3, "v2"),
        vhost="other",
        settings=rabbitmq.QueueSettingsArgs(durable=True, arguments_json=arguments_json(arguments)),
        opts=pulumi.ResourceOptions(protect=True),
    )


def ttl_in_the_string_map(vhost: str) -> None:
    rabbitmq.Queue(
        "reports",
        name="Reports",
        vhost=vhost,
        settings=rabbitmq.QueueSettingsArgs(durable=True, arguments={"x-message-ttl": "60000"}),
    )


def fanout_level_exchange(vhost: str) -> None:
    """A level exchange declared as NServiceBus does not, in a vhost of its own (no duplicate of the components')."""
    rabbitmq.Exchange(
        "stray-level-exchange",
        name=delay_level_name(5, "v2"),
        vhost="other",
        settings=rabbitmq.ExchangeSettingsArgs(type="fanout", durable=True),
    )


def level_binding_with_a_catch_all_key(vhost: str) -> None:
    level = delay_level_name(3, "v2")
    rabbitmq.Binding(
        "stray-level-binding",
        source=level,
        vhost="other",
        destination=level,
        destination_type="queue",
        routing_key="#",
    )


def delivery_binding_without_the_wildcard(vhost: str) -> None:
    rabbitmq.Binding(
        "sales-exact-key",
        source=delivery_exchange_name("v2"),
        vhost=vhost,
        destination="Sales",
        destination_type="exchange",
        routing_key="Sales",
    )


def alternate_exchange_as_argument(vhost: str) -> None:
    rabbitmq.Exchange(
        "level-with-alternate",
        name=delay_level_name(7, "v2"),
        vhost="other",
        settings=rabbitmq.ExchangeSettingsArgs(
            type="topic", durable=True, arguments={ALTERNATE_EXCHANGE_ARGUMENT: "nsb-delays.unroutable"}
        ),
    )


def delivery_limit_policy_over_sales(vhost: str) -> None:
    rabbitmq.Policy(
        "sales-limit",
        name="sales-limit",
        vhost=vhost,
        policy=rabbitmq.PolicyPolicyArgs(
            pattern="^Sales$", priority=10, apply_to="queues", definition={"delivery-limit": "5"}
        ),
    )


def administrator_user(vhost: str) -> None:
    rabbitmq.User(
        "ops-user", name="ops", password=pulumi.Output.secret("never-sent-by-a-preview"), tags=["administrator"]
    )


def everything_for_sales(vhost: str) -> None:
    """``.*`` for a user in the vhost where the user's program declares the delay graph."""
    rabbitmq.Permissions(
        "sales-everything",
        user="Sales",
        vhost=vhost,
        permissions=rabbitmq.PermissionsPermissionsArgs(configure=".*", write=".*", read=".*"),
    )


def master_located_queue(vhost: str) -> None:
    """RabbitMQ 4.3 refuses the deprecated x-queue-master-locator (denied by default from 4.3.0)."""
    rabbitmq.Queue(
        "located",
        name="located",
        vhost=vhost,
        settings=rabbitmq.QueueSettingsArgs(
            durable=True, arguments={"x-queue-type": "classic", "x-queue-master-locator": "min-masters"}
        ),
    )


CASES: dict[str, Case] = {
    "empty-password": Case("rabbitmq-user-password-secret", empty_password_user),
    "ttl-policy": Case("delay-queue-broker-policy", ttl_policy_over_the_levels),
    "duplicate-queue": Case("unique-physical-names", second_sales_queue),
    "binding-to-nobody": Case("endpoint-destinations-exist", delivery_binding_to_nobody),
    "stray-level-ttl": Case("delay-level-queue-arguments", lone_level_with_wrong_ttl),
    "stray-level-chain": Case("delay-level-chain-complete", lone_level_with_wrong_ttl),
    "ttl-as-string": Case("queue-arguments-typed", ttl_in_the_string_map),
    "fanout-level": Case("delay-exchange-settings", fanout_level_exchange),
    "catch-all-level-binding": Case("delay-level-binding-keys", level_binding_with_a_catch_all_key),
    "delivery-key-without-wildcard": Case("endpoint-delivery-binding", delivery_binding_without_the_wildcard),
    "alternate-exchange-argument": Case("exchange-alternate-by-policy", alternate_exchange_as_argument),
    "delivery-limit-policy": Case("endpoint-queue-delivery-limit", delivery_limit_policy_over_sales),
    "administrator-user": Case("rabbitmq-user-no-broad-tags", administrator_user),
    "everything-for-sales": Case("rabbitmq-user-no-wildcard-permissions", everything_for_sales),
    "master-locator-on-4.3": Case(
        "refused-by-broker-version",
        master_located_queue,
        {"refused-by-broker-version": {"brokerVersion": "4.3"}},
    ),
}
