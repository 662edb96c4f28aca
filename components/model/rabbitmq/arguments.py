"""Queue arguments as the broker takes, stores and compares them: types, the implicit queue type, and the one
comparison of an expected set with a declared or live one (the policy pack and ``verify`` both use it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from .names import QUEUE_TYPE_ARGUMENT
from .objects import Arguments, ArgumentValue
from .versions import BrokerVersion

__all__ = [
    "BOOLEAN_QUEUE_ARGUMENTS",
    "IMPLICIT_QUEUE_TYPE",
    "INTEGER_QUEUE_ARGUMENTS",
    "QUEUE_TYPE_STORED_FROM",
    "ArgumentDifference",
    "argument_differences",
    "broker_stores_queue_type",
    "listed_queue_type",
    "queue_arguments_as_stored",
    "same_argument",
]


# Queue arguments the broker reads as numbers or booleans; a string value is refused or misread.
INTEGER_QUEUE_ARGUMENTS = (
    "x-message-ttl",
    "x-expires",
    "x-max-length",
    "x-max-length-bytes",
    "x-max-priority",
    "x-delivery-limit",
    "x-quorum-initial-group-size",
    "x-quorum-target-group-size",
    "x-stream-max-segment-size-bytes",
)
BOOLEAN_QUEUE_ARGUMENTS = ("x-single-active-consumer",)
IMPLICIT_QUEUE_TYPE = "classic"  # what a queue declared without x-queue-type becomes (the node-wide default)
# rabbitmq/rabbitmq-server deps/rabbit/src/rabbit_amqqueue.erl, augment_declare_args: from v4.0.0 (commit
# f90a4e16d3, "DQT: fall back to node-wide default", PR #12109) a queue declared without x-queue-type gets the
# default type written into its arguments; up to v3.13.7 (the last open-source 3.13 tag) only when the vhost's
# metadata names a default_queue_type, which vhosts made without one (3.10's, the tests') lack.
QUEUE_TYPE_STORED_FROM = (4, 0, 0)


def listed_queue_type(queue: Mapping[str, object]) -> str:
    """A queue's type from its record in the management API's listing (``/api/queues``): ``classic``, ``quorum``,
    ``stream`` or another type's word.

    rabbitmq/rabbitmq-server deps/rabbitmq_management_agent/src/rabbit_mgmt_format.erl ``queue/2`` lists a queue's
    ``arguments`` as declared, then what its type's ``format/2`` adds (``rabbit_queue_type:format/2``): ``type``,
    the type's short alias (``rabbit_classic_queue:format/2``: ``rabbit_queue_type:short_alias_of``). On 3.10
    (``rabbit_amqqueue:format/1``) ``type`` comes with the queue's statistics (``i(type, _)`` of
    ``rabbit_amqqueue_process``, ``rabbit_quorum_queue``, ``rabbit_stream_queue``), absent while none were
    emitted. So: ``type`` when listed, else the declared ``x-queue-type``, else the implicit classic (3.x stores
    no type for a queue declared without one: ``QUEUE_TYPE_STORED_FROM``)."""
    listed = queue.get("type")
    arguments = queue.get("arguments")
    declared = arguments.get(QUEUE_TYPE_ARGUMENT) if isinstance(arguments, Mapping) else None
    return str(listed or declared or IMPLICIT_QUEUE_TYPE)


def broker_stores_queue_type(broker_version: BrokerVersion) -> bool:
    """Whether the broker writes the default ``x-queue-type`` into a queue declared without one."""
    return broker_version >= QUEUE_TYPE_STORED_FROM


def queue_arguments_as_stored(arguments: Arguments, broker_version: BrokerVersion) -> dict[str, ArgumentValue]:
    """NServiceBus's arguments for a queue as a broker of ``broker_version`` stores them: the queue type explicit
    where the broker writes it.

    Where NServiceBus leaves the type to the broker (v1 level queues, classic endpoint queues),
    RabbitMQ 4.x (and a 3.13 build with the backport, in no open-source tag) writes
    ``x-queue-type: classic`` into the queue's arguments (see ``QUEUE_TYPE_STORED_FROM``; measured on
    4.0.5, while 3.10.8 keeps the arguments as declared).
    A provider read returns it, so a declaration without it would differ on every plan and replace
    the queue (a protected level queue: every ``pulumi up`` refused). On an older ``broker_version``
    the read gives back NServiceBus's arguments unchanged, so they are declared as they are: a v1
    graph NServiceBus declared on 3.10 is then adopted with no difference. RabbitMQ treats
    declarations with and without the explicit default as equivalent (measured on 3.10.8 and
    4.0.5), so NServiceBus and the program accept each other's queues either way.
    """
    if QUEUE_TYPE_ARGUMENT in arguments or not broker_stores_queue_type(broker_version):
        return dict(arguments)
    return {**arguments, QUEUE_TYPE_ARGUMENT: IMPLICIT_QUEUE_TYPE}


@dataclass(frozen=True)
class ArgumentDifference:
    key: str
    kind: Literal["missing", "unexpected", "different"]
    expected: object  # None when unexpected
    actual: object  # None when missing


def same_argument(actual: object, expected: object) -> bool:
    """Equal value *and* type: the broker refuses ``"1000"`` or ``1000.0`` where NServiceBus declared ``1000``."""
    return type(actual) is type(expected) and actual == expected


def argument_differences(expected: Mapping[str, object], actual: Mapping[str, object]) -> list[ArgumentDifference]:
    """Every key where ``actual`` differs from ``expected`` in presence, value or type, sorted by key.

    ``x-queue-type: classic`` on one side only is no difference: it is the implicit type a broker from 4.0
    writes into a queue declared without it, and RabbitMQ takes both declarations as equivalent."""
    if expected.keys() == actual.keys() and all(same_argument(actual[k], v) for k, v in expected.items()):
        return []  # the usual answer, without sorting every key
    differences = []
    for key in sorted(set(expected) | set(actual)):
        if key not in actual or key not in expected:
            present = expected.get(key, actual.get(key))
            if key == QUEUE_TYPE_ARGUMENT and present == IMPLICIT_QUEUE_TYPE:
                continue
            kind: Literal["missing", "unexpected"] = "missing" if key not in actual else "unexpected"
            differences.append(ArgumentDifference(key, kind, expected.get(key), actual.get(key)))
        elif not same_argument(actual[key], expected[key]):
            differences.append(ArgumentDifference(key, "different", expected[key], actual[key]))
    return differences
