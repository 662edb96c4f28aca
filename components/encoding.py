"""How pulumi-rabbitmq carries the model's values, so that what the program declares is what a provider read
returns: which field holds a queue's arguments, policy definitions as strings, and the ids ``pulumi import`` takes.

Facts of terraform-provider-rabbitmq (bridged by pulumi-rabbitmq), not of RabbitMQ or NServiceBus: the model does
not know them. No Pulumi import, so the policy pack and the renderers can read them too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Literal
from urllib.parse import quote_plus

from .model.rabbitmq.objects import Arguments, ArgumentValue, BindingSpec

QueueArgumentsField = Literal["none", "arguments", "arguments_json"]


def queue_arguments_field(arguments: Arguments) -> QueueArgumentsField:
    """Which pulumi-rabbitmq ``QueueSettings`` field carries these arguments so that a read gives them back.

    terraform-provider-rabbitmq v1.10.1 (``rabbitmq/resource_queue.go``, ``ReadQueue`` and
    ``nonStringInArguments``) reads a queue's arguments into ``arguments_json`` only when the state
    already holds ``arguments_json`` or some value is not a string; otherwise into the string map
    ``arguments``. On ``pulumi import`` the state is empty, so an all-string set (an endpoint quorum
    queue's ``{"x-queue-type": "quorum"}``) comes back as ``arguments``: declaring it as
    ``arguments_json`` would make the import differ and fail. Any non-string value (a level queue's
    integer TTL) must go through ``arguments_json`` anyway: the ``arguments`` map sends strings only.
    No arguments: neither field (a read of ``{}`` is an empty map, which equals an absent one).
    """
    if not arguments:
        return "none"
    if all(isinstance(value, str) for value in arguments.values()):
        return "arguments"
    return "arguments_json"


def arguments_json(arguments: Mapping[str, ArgumentValue]) -> str:
    """Deterministic JSON (sorted keys, no spaces) so diffs and tests are stable; ints stay ints."""
    return json.dumps(dict(arguments), sort_keys=True, separators=(",", ":"))


def policy_definition(definition: Mapping[str, int | str]) -> dict[str, str]:
    """A policy definition as pulumi-rabbitmq takes it: a map of strings.

    terraform-provider-rabbitmq ``rabbitmq/resource_policy.go``: ``putPolicy`` sends a value that
    parses as an int64 as that integer, so ``"100000"`` reaches the broker as 100000; ``ReadPolicy``
    reads a number back with ``strconv.FormatFloat(v, 'f', -1, 64)``, i.e. ``"100000"`` again, so
    import and refresh see no difference.
    """
    return {key: str(value) for key, value in definition.items()}


def import_id(name: str, vhost: str) -> str:
    """The ``pulumi import`` id of an exchange, queue or policy: ``name@vhost`` (``nsb.v2.delay-level-27@/``)."""
    return f"{name}@{vhost}"


def binding_properties_key(routing_key: str) -> str:
    """The management API's ``properties_key`` of a binding without arguments (checked on RabbitMQ 3.10).

    Form-encoded: letters, digits and ``_.-`` stay, a space becomes ``+``, everything else ``%XX``
    (``~`` included); the empty key is ``~``.
    """
    return quote_plus(routing_key, safe="").replace("~", "%7E") if routing_key else "~"


def binding_import_id(binding: BindingSpec, vhost: str) -> str:
    """``vhost/source/destination/destination_type/properties_key``, vhost with ``%`` and ``/`` escaped."""
    escaped_vhost = vhost.replace("%", "%25").replace("/", "%2F")
    key = binding_properties_key(binding.routing_key)
    return f"{escaped_vhost}/{binding.source}/{binding.destination}/{binding.destination_type}/{key}"
