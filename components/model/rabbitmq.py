"""The RabbitMQ delay topology NServiceBus declares, as plain data.

Every name, argument (with its exact Python type) and routing-key rule lives here once; the Pulumi
components, renderers, verifier, policy pack and pipeline read it from here. Source:
NServiceBus.Transport.RabbitMQ ``DelayInfrastructure.cs`` and the routing topologies (see
``shared/reference/nservicebus-facts.md`` section 1).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

ArgumentValue = str | int
Arguments = Mapping[str, ArgumentValue]

LEVEL_COUNT = 28
MAX_LEVEL = LEVEL_COUNT - 1
MAX_DELAY_SECONDS = (1 << LEVEL_COUNT) - 1  # 268,435,455 s, about 8.5 years
ROUTING_KEY_PREFIX_LENGTH = 2 * LEVEL_COUNT  # "N." per level: the destination starts at index 56
MAX_ROUTING_KEY_BYTES = 255  # AMQP 0-9-1 shortstr
MAX_DESTINATION_BYTES = MAX_ROUTING_KEY_BYTES - ROUTING_KEY_PREFIX_LENGTH  # 199
DELAY_HEADER = "NServiceBus.Transport.RabbitMQ.DelayInSeconds"
MINIMUM_BROKER_VERSION = (3, 10, 0)
REQUIRED_FEATURE_FLAGS = ("quorum_queue", "stream_queue")
FEATURE_FLAG_FIX = "rabbitmqctl enable_feature_flag {flag}"

GenerationName = Literal["v1", "v2"]
RoutingTopology = Literal["conventional", "direct"]
QueueType = Literal["quorum", "classic"]
GENERATIONS: tuple[GenerationName, ...] = ("v1", "v2")
ROUTING_TOPOLOGIES: tuple[RoutingTopology, ...] = ("conventional", "direct")
QUEUE_TYPES: tuple[QueueType, ...] = ("quorum", "classic")
DEFAULT_GENERATION: GenerationName = "v2"
DEFAULT_ERROR_QUEUE = "error"
DEFAULT_AUDIT_QUEUE = "audit"
LEGACY_TIMEOUT_QUEUE_SUFFIXES = (".Timeouts", ".TimeoutsDispatcher")
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


@dataclass(frozen=True)
class Generation:
    """One generation of the delay infrastructure: its names and the arguments of its level queues."""

    name: GenerationName
    level_prefix: str
    delivery_exchange: str
    queue_arguments: Mapping[str, str]  # every argument except TTL and dead-letter exchange
    unroutable: str  # ours, not NServiceBus's: the parking exchange and queue of this graph (#1407)


GENERATION_SPECS: Mapping[GenerationName, Generation] = {
    "v1": Generation("v1", "nsb.delay-level-", "nsb.delay-delivery", {"x-queue-mode": "lazy"}, "nsb.delay-unroutable"),
    "v2": Generation(
        "v2",
        "nsb.v2.delay-level-",
        "nsb.v2.delay-delivery",
        {
            "x-queue-type": "quorum",
            "x-dead-letter-strategy": "at-least-once",
            "x-overflow": "reject-publish",
        },
        "nsb.v2.delay-unroutable",
    ),
}


class DelayError(ValueError):
    """A delay that the infrastructure cannot express."""


def generation_spec(generation: str) -> Generation:
    try:
        return GENERATION_SPECS[generation]  # type: ignore[index]
    except KeyError:
        raise ValueError(f"unknown generation {generation!r}: expected one of {', '.join(GENERATIONS)}") from None


def _check_level(level: int) -> int:
    if not 0 <= level <= MAX_LEVEL:
        raise ValueError(f"delay level {level} is outside 0..{MAX_LEVEL}")
    return level


def delay_level_name(level: int, generation: str = DEFAULT_GENERATION) -> str:
    """Exchange and queue of a level share this name: ``nsb.v2.delay-level-05``."""
    return f"{generation_spec(generation).level_prefix}{_check_level(level):02d}"


def delivery_exchange_name(generation: str = DEFAULT_GENERATION) -> str:
    return generation_spec(generation).delivery_exchange


def parking_name(generation: str = DEFAULT_GENERATION) -> str:
    """The parking exchange and queue of a graph (``nsb.v2.delay-unroutable``): see ``parking_topology``."""
    return generation_spec(generation).unroutable


def parse_delay_level_name(name: str) -> tuple[GenerationName, int] | None:
    """The generation and level of a delay-level exchange/queue name, or None for any other name."""
    for spec in GENERATION_SPECS.values():
        digits = name.removeprefix(spec.level_prefix)
        if digits != name and len(digits) == 2 and digits.isdigit() and int(digits) <= MAX_LEVEL:
            return spec.name, int(digits)
    return None


def level_ttl_ms(level: int) -> int:
    """``x-message-ttl`` of a level queue: 2^level seconds as integer milliseconds."""
    return (1 << _check_level(level)) * 1000


def dead_letter_exchange(level: int, generation: str = DEFAULT_GENERATION) -> str:
    """Where an expired message of this level goes: the next lower level, or delivery after level 0."""
    if _check_level(level) == 0:
        return delivery_exchange_name(generation)
    return delay_level_name(level - 1, generation)


def delay_queue_arguments(level: int, generation: str = DEFAULT_GENERATION) -> dict[str, ArgumentValue]:
    """The exact declare arguments NServiceBus uses; the TTL is an int (a string TTL is refused)."""
    arguments: dict[str, ArgumentValue] = dict(generation_spec(generation).queue_arguments)
    arguments["x-message-ttl"] = level_ttl_ms(level)
    arguments["x-dead-letter-exchange"] = dead_letter_exchange(level, generation)
    return arguments


def _skip_words(level: int) -> str:
    return "*." * (MAX_LEVEL - _check_level(level))


def queue_binding_key(level: int) -> str:
    """Level exchange -> its own queue when this level's bit is 1."""
    return _skip_words(level) + "1.#"


def lower_level_binding_key(level: int) -> str:
    """Level exchange -> the next lower exchange (delivery after level 0) when this level's bit is 0."""
    return _skip_words(level) + "0.#"


def endpoint_binding_key(endpoint: str) -> str:
    """Delivery exchange -> endpoint: ``#.<endpoint>`` (the address is the key's tail)."""
    return f"#.{endpoint}"


# --- declared objects ---------------------------------------------------------------------------------

Role = Literal[
    "delay-level",
    "delivery",
    "endpoint",
    "instance",
    "legacy-timeouts",
    "error",
    "audit",
    "endpoint-exchange",
    "parking",
]


@dataclass(frozen=True)
class ExchangeSpec:
    name: str
    type: Literal["topic", "fanout", "direct", "headers"]
    role: Role
    durable: bool = True
    auto_delete: bool = False
    level: int | None = None

    @property
    def nservicebus_declares(self) -> bool:
        """Whether NServiceBus (its installers, ``rabbitmq-transport``) declares it: what adoption may import."""
        return self.role != "parking"


@dataclass(frozen=True)
class QueueSpec:
    name: str
    role: Role
    arguments: Arguments = field(default_factory=dict)
    durable: bool = True
    auto_delete: bool = False
    level: int | None = None

    @property
    def holds_delayed_messages(self) -> bool:
        return self.role == "delay-level"

    @property
    def nservicebus_declares(self) -> bool:
        return self.role != "parking"

    @property
    def keeps_messages(self) -> bool:
        """Delay levels and the parking queue: replacing them (any change does) would delete their messages."""
        return self.role in ("delay-level", "parking")


@dataclass(frozen=True)
class BindingSpec:
    source: str
    destination: str
    destination_type: Literal["queue", "exchange"]
    routing_key: str
    role: Literal["level-queue", "level-next", "delivery", "endpoint-delivery", "endpoint-exchange", "parking"]
    level: int | None = None

    @property
    def nservicebus_declares(self) -> bool:
        return self.role != "parking"


@dataclass(frozen=True)
class PolicySpec:
    """A broker policy (``PUT /api/policies/<vhost>/<name>``) whose pattern matches exactly one object:
    NServiceBus's delivery limit on a quorum receive queue, or the parking alternate exchange on an exchange."""

    name: str
    target: str  # the one queue (apply-to quorum_queues) or exchange (apply-to exchanges) its pattern matches
    pattern: str
    apply_to: Literal["quorum_queues", "exchanges"]
    priority: int
    definition: Mapping[str, int | str]

    @property
    def nservicebus_declares(self) -> bool:
        """NServiceBus 10+ creates delivery-limit policies (4.x, with the rights); never an alternate exchange."""
        return self.apply_to == "quorum_queues"


@dataclass(frozen=True)
class Topology:
    """A set of exchanges, queues, bindings and policies; ``+`` joins two sets."""

    exchanges: tuple[ExchangeSpec, ...] = ()
    queues: tuple[QueueSpec, ...] = ()
    bindings: tuple[BindingSpec, ...] = ()
    policies: tuple[PolicySpec, ...] = ()

    def __add__(self, other: Topology) -> Topology:
        return Topology(
            self.exchanges + other.exchanges,
            self.queues + other.queues,
            self.bindings + other.bindings,
            self.policies + other.policies,
        )

    @property
    def delivery_limit_policies(self) -> tuple[PolicySpec, ...]:
        return tuple(p for p in self.policies if p.apply_to == "quorum_queues")

    @property
    def alternate_exchange_policies(self) -> tuple[PolicySpec, ...]:
        return tuple(p for p in self.policies if p.apply_to == "exchanges")

    @staticmethod
    def join(parts: Iterable[Topology]) -> Topology:
        total = Topology()
        for part in parts:
            total = total + part
        return total


def delay_levels(generation: str = DEFAULT_GENERATION) -> Topology:
    """The 28 levels (27 down to 0), the delivery exchange and all their bindings, as NServiceBus declares them."""
    exchanges: list[ExchangeSpec] = []
    queues: list[QueueSpec] = []
    bindings: list[BindingSpec] = []
    for level in range(MAX_LEVEL, -1, -1):
        name = delay_level_name(level, generation)
        exchanges.append(ExchangeSpec(name, "topic", "delay-level", level=level))
        queues.append(QueueSpec(name, "delay-level", delay_queue_arguments(level, generation), level=level))
        bindings.append(BindingSpec(name, name, "queue", queue_binding_key(level), "level-queue", level))
        bindings.append(
            BindingSpec(
                name,
                dead_letter_exchange(level, generation),
                "exchange",
                lower_level_binding_key(level),
                "level-next" if level else "delivery",
                level,
            )
        )
    exchanges.append(ExchangeSpec(delivery_exchange_name(generation), "topic", "delivery"))
    return Topology(tuple(exchanges), tuple(queues), tuple(bindings))


QUEUE_TYPE_ARGUMENT = "x-queue-type"
DEFAULT_QUEUE_TYPE = "classic"  # what a queue declared without x-queue-type becomes (node-wide default)
# rabbitmq/rabbitmq-server deps/rabbit/src/rabbit_amqqueue.erl, augment_declare_args: from v4.0.0 (commit
# f90a4e16d3, "DQT: fall back to node-wide default", PR #12109) a queue declared without x-queue-type gets the
# default type written into its arguments; up to v3.13.7 (the last open-source 3.13 tag) only when the vhost's
# metadata names a default_queue_type, which vhosts made without one (3.10's, the tests') lack.
QUEUE_TYPE_STORED_FROM = (4, 0, 0)
# The broker the stack targets (stack config rabbitmq.brokerVersion): decides whether classic queues carry an
# explicit x-queue-type and whether NServiceBus's delivery-limit policies can be declared.
DEFAULT_BROKER_VERSION = "4.0"
MINIMUM_BROKER_VERSION = (3, 10, 0)  # the oldest broker this project supports (verify refuses older)


_BROKER_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def parse_reported_broker_version(text: str) -> tuple[int, int, int]:
    """The version a broker reports (``GET /api/overview`` ``rabbitmq_version``, ``rabbitmqctl version``):
    ``"3.10.8"`` -> ``(3, 10, 8)``; a pre-release or build suffix (``3.13.0-rc.2``, ``3.12.1+1``) is dropped."""
    match = _BROKER_VERSION.match(text.strip()) if isinstance(text, str) else None
    if not match:
        raise ValueError(f"broker version {text!r} is not of the form MAJOR.MINOR[.PATCH]")
    major, minor, patch = (int(part or 0) for part in match.groups())
    return major, minor, patch


def parse_broker_version(text: str) -> tuple[int, int, int]:
    """A stack's ``brokerVersion``: exactly ``"3.10"`` or ``"4.0.5"`` -> ``(3, 10, 0)`` / ``(4, 0, 5)``, no older than
    the oldest broker supported; ValueError naming the value and the rule."""
    if not isinstance(text, str) or not _BROKER_VERSION.fullmatch(text):
        raise ValueError(f"{text!r} is not a RabbitMQ version: expected MAJOR.MINOR or MAJOR.MINOR.PATCH, e.g. '3.10'")
    version = parse_reported_broker_version(text)
    if version < MINIMUM_BROKER_VERSION:
        minimum = ".".join(map(str, MINIMUM_BROKER_VERSION[:2]))
        raise ValueError(f"{text!r} is below RabbitMQ {minimum}, the oldest broker supported")
    return version


def broker_stores_queue_type(broker_version: str) -> bool:
    """Whether the broker writes the default ``x-queue-type`` into a queue declared without one."""
    return parse_broker_version(broker_version) >= QUEUE_TYPE_STORED_FROM


def provider_queue_arguments(
    arguments: Arguments, broker_version: str = DEFAULT_BROKER_VERSION
) -> dict[str, ArgumentValue]:
    """The arguments the Pulumi program declares for a queue: NServiceBus's, with the queue type explicit
    where the broker stores it.

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
    return {**arguments, QUEUE_TYPE_ARGUMENT: DEFAULT_QUEUE_TYPE}


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


# --- parking instead of stalling (Particular/NServiceBus.RabbitMQ#1407) --------------------------------
#
# A delayed message whose destination no binding reaches can never be dead-lettered at least once: the
# quorum level queue keeps it, and past the dead-letter worker's window (prefetch 32) every message
# behind it waits. RabbitMQ routes a message an exchange cannot route to that exchange's alternate
# exchange (rabbit_exchange:route1 -> process_alternate, for the dead-letter worker's routing as for a
# publish), so the delivery exchange gets one: a topic exchange bound to a durable quorum queue with
# the key of a delayed message, 28 bit words and anything after (plain sends and events with their
# empty key still find no queue and are returned, as without it). In the conventional topology the
# delivery exchange routes to the endpoint's own fanout exchange, which has no queue once the
# endpoint's queue is deleted: its exchange needs the same alternate exchange (checked on RabbitMQ
# 3.10.8 and 4.0.5: with the delivery exchange's alone, that case still stalls). The alternate
# exchange is given by policy, never by argument: NServiceBus declares nsb.v2.delay-delivery without
# arguments, and RabbitMQ refuses an inequivalent alternate-exchange argument (PRECONDITION_FAILED).

PARKING_BINDING_KEY = "*." * LEVEL_COUNT + "#"  # a delayed routing key: 28 words, then the destination
# The parking queue is read by `nsb-delays delays parked` (each listing hands every message back):
# RabbitMQ 4.0's default quorum delivery limit (20) would drop a parked message after 20 listings.
ALTERNATE_EXCHANGE_POLICY_KEY = "alternate-exchange"
ALTERNATE_EXCHANGE_ARGUMENT = "alternate-exchange"  # as a declare argument: what NServiceBus's declaration refuses
ALTERNATE_EXCHANGE_POLICY_APPLY_TO: Literal["exchanges"] = "exchanges"
ALTERNATE_EXCHANGE_POLICY_PRIORITY = 0
ALTERNATE_EXCHANGE_POLICY_PREFIX = "nsb-delays."  # ours; NServiceBus's own policies start with "nsb."
ALTERNATE_EXCHANGE_POLICY_SUFFIX = ".unroutable"


def parking_queue_arguments() -> dict[str, ArgumentValue]:
    """Durable quorum, and a delivery limit so high it never applies (NServiceBus's own "unlimited")."""
    return {"x-queue-type": "quorum", DELIVERY_LIMIT_ARGUMENT: UNLIMITED_DELIVERY_LIMIT}


def alternate_exchange_policy_name(exchange: str) -> str:
    """``nsb-delays.<exchange>.unroutable``."""
    return f"{ALTERNATE_EXCHANGE_POLICY_PREFIX}{exchange}{ALTERNATE_EXCHANGE_POLICY_SUFFIX}"


def alternate_exchange_policy(exchange: str, generation: str = DEFAULT_GENERATION) -> PolicySpec:
    """``exchange``'s alternate exchange is the graph's parking exchange: ``^<escaped name>$``, apply-to exchanges."""
    return PolicySpec(
        name=alternate_exchange_policy_name(exchange),
        target=exchange,
        pattern=f"^{dotnet_regex_escape(exchange)}$",
        apply_to=ALTERNATE_EXCHANGE_POLICY_APPLY_TO,
        priority=ALTERNATE_EXCHANGE_POLICY_PRIORITY,
        definition={ALTERNATE_EXCHANGE_POLICY_KEY: parking_name(generation)},
    )


def parking_topology(generation: str = DEFAULT_GENERATION) -> Topology:
    """The parking exchange (topic) and its durable quorum queue, bound with ``PARKING_BINDING_KEY``, and
    the policy that makes it the delivery exchange's alternate exchange."""
    name = parking_name(generation)
    return Topology(
        exchanges=(ExchangeSpec(name, "topic", "parking"),),
        queues=(QueueSpec(name, "parking", parking_queue_arguments()),),
        bindings=(BindingSpec(name, name, "queue", PARKING_BINDING_KEY, "parking"),),
        policies=(alternate_exchange_policy(delivery_exchange_name(generation), generation),),
    )


def endpoint_queue_arguments(queue_type: str) -> dict[str, ArgumentValue]:
    """Receiving and sending queues of an endpoint: ``x-queue-type=quorum`` or no arguments (classic)."""
    if queue_type not in QUEUE_TYPES:
        raise ValueError(f"unknown queue type {queue_type!r}: expected one of {', '.join(QUEUE_TYPES)}")
    return {"x-queue-type": "quorum"} if queue_type == "quorum" else {}


def _owned_queue(name: str, role: Role, routing_topology: str, queue_type: str) -> Topology:
    """A queue as the routing topology's ``Initialize`` declares it (plus its fanout exchange if conventional)."""
    if routing_topology not in ROUTING_TOPOLOGIES:
        raise ValueError(
            f"unknown routing topology {routing_topology!r}: expected one of {', '.join(ROUTING_TOPOLOGIES)}"
        )
    queue = QueueSpec(name, role, endpoint_queue_arguments(queue_type))
    if routing_topology == "direct":
        return Topology(queues=(queue,))
    return Topology(
        exchanges=(ExchangeSpec(name, "fanout", "endpoint-exchange"),),
        queues=(queue,),
        bindings=(BindingSpec(name, name, "queue", "", "endpoint-exchange"),),
    )


def delivery_binding(address: str, routing_topology: str, generation: str = DEFAULT_GENERATION) -> BindingSpec:
    """``BindToDelayInfrastructure``: exchange->exchange (conventional) or exchange->queue (direct)."""
    return BindingSpec(
        delivery_exchange_name(generation),
        address,
        "exchange" if routing_topology == "conventional" else "queue",
        endpoint_binding_key(address),
        "endpoint-delivery",
    )


# --- delivery-limit policies (RabbitMQ 4.x) --------------------------------------------------------------
#
# RabbitMQ 4.0 gives quorum queues a default delivery limit of 20: a message redelivered that often
# is dropped or dead-lettered, behind NServiceBus's own recoverability. NServiceBus.RabbitMQ 10+
# checks each receive queue when its message pump initializes (MessagePump.Initialize ->
# BrokerVerifier.ValidateDeliveryLimit, src/NServiceBus.Transport.RabbitMQ/Administration/
# BrokerVerifier.cs): the pump's receive address, i.e. the main input queue and the
# instance-specific queue. On 4.x it wants the policy below (SetDeliveryLimitViaPolicy) and refuses
# to start when a limit comes from anything else (ShouldOverrideDeliveryLimit).

UNLIMITED_DELIVERY_LIMIT = 100_000  # Queue.BigValueInsteadOfActuallyUnlimited (ManagementApi/Models/Queue.cs)
DELIVERY_LIMIT_POLICY_KEY = "delivery-limit"
DELIVERY_LIMIT_ARGUMENT = "x-delivery-limit"
DELIVERY_LIMIT_POLICY_PREFIX = "nsb."
DELIVERY_LIMIT_POLICY_SUFFIX = ".delivery-limit"
DELIVERY_LIMIT_POLICY_APPLY_TO: Literal["quorum_queues"] = "quorum_queues"  # PolicyTarget.QuorumQueues
DELIVERY_LIMIT_POLICY_PRIORITY = 0
# BrokerVerifier.BrokerVersion4: below it the transport never creates the policy (and RabbitMQ 3.10
# refuses apply-to 'quorum_queues' outright).
DELIVERY_LIMIT_POLICY_MINIMUM_BROKER_VERSION = (4, 0, 0)
# rabbitmq/rabbitmq-server deps/rabbit/src/rabbit_policy.erl, apply_to_validation: 'quorum_queues' is accepted
# from v3.12.0 (v3.11.28 refuses it); 'delivery-limit' is a policy key (rabbit_policies.erl, register) since
# before 3.10. Below 3.12 the broker refuses NServiceBus's delivery-limit policy.
DELIVERY_LIMIT_POLICY_ACCEPTED_FROM = (3, 12, 0)


def delivery_limit_policies_by_default(broker_version: str) -> bool:
    """Whether a stack declares NServiceBus's delivery-limit policies when it does not say: on RabbitMQ 4.0 and
    later, where quorum queues have a default delivery limit (20) the transport overrides with its policy at start
    (``BrokerVerifier.ValidateDeliveryLimit``); below 4.0 there is no default limit, the transport never creates
    the policy, and 3.10 refuses its apply-to outright."""
    return parse_broker_version(broker_version) >= DELIVERY_LIMIT_POLICY_MINIMUM_BROKER_VERSION


RECEIVING_ROLES: tuple[Role, ...] = ("endpoint", "instance")

# System.Text.RegularExpressions.RegexParser.Escape (dotnet/runtime, RegexParser.cs): these characters
# are escaped with a backslash; tab, newline, carriage return and form feed become \t \n \r \f. Nothing
# else is: unlike Python's re.escape, '-', ']', '}', '&', '~', '@' and non-ASCII characters stay as they are.
_DOTNET_REGEX_METACHARACTERS = frozenset("\t\n\f\r #$()*+.?[\\^{|")
_DOTNET_REGEX_CONTROL_ESCAPES = {"\t": "t", "\n": "n", "\r": "r", "\f": "f"}


def dotnet_regex_escape(text: str) -> str:
    """``Regex.Escape(text)`` as .NET computes it (the policy pattern must be NServiceBus's, byte for byte)."""
    return "".join(
        "\\" + _DOTNET_REGEX_CONTROL_ESCAPES.get(ch, ch) if ch in _DOTNET_REGEX_METACHARACTERS else ch for ch in text
    )


def delivery_limit_policy_name(queue: str) -> str:
    """``nsb.<queue>.delivery-limit`` (BrokerVerifier.SetDeliveryLimitViaPolicy)."""
    return f"{DELIVERY_LIMIT_POLICY_PREFIX}{queue}{DELIVERY_LIMIT_POLICY_SUFFIX}"


def is_delivery_limit_policy_name(name: str | None) -> bool:
    """BrokerVerifier.IsTransportPolicy: any ``nsb.*.delivery-limit`` name counts as the transport's own."""
    return (
        name is not None
        and name.startswith(DELIVERY_LIMIT_POLICY_PREFIX)
        and name.endswith(DELIVERY_LIMIT_POLICY_SUFFIX)
    )


def delivery_limit_policy(queue: str) -> PolicySpec:
    """The policy NServiceBus creates for one quorum receive queue: ``^<Regex.Escape(queue)>$``, priority 0."""
    return PolicySpec(
        name=delivery_limit_policy_name(queue),
        target=queue,
        pattern=f"^{dotnet_regex_escape(queue)}$",
        apply_to=DELIVERY_LIMIT_POLICY_APPLY_TO,
        priority=DELIVERY_LIMIT_POLICY_PRIORITY,
        definition={DELIVERY_LIMIT_POLICY_KEY: UNLIMITED_DELIVERY_LIMIT},
    )


def _limit(value: object) -> int | None:
    """A delivery limit as the management API shows it (DeliveryLimitConverter: 'unlimited' is -1)."""
    if isinstance(value, str) and value.lower() == "unlimited":
        return -1
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def effective_delivery_limit(
    arguments: Mapping[str, object], effective_policy_definition: Mapping[str, object] | None, delivery_limit: object
) -> int:
    """Queue.GetDeliveryLimit: RabbitMQ 4.x reports ``delivery_limit``; on 3.x it is the lowest of the
    ``x-delivery-limit`` argument and the effective policy's ``delivery-limit`` (negative counts as 0), and
    100000 ("unlimited") when neither is set. ``unlimited`` reads as -1."""
    reported = _limit(delivery_limit)
    if reported is not None:
        return reported
    argument_limit = _limit(arguments.get(DELIVERY_LIMIT_ARGUMENT))
    policy_limit = _limit((effective_policy_definition or {}).get(DELIVERY_LIMIT_POLICY_KEY))
    set_limits = [v for v in (policy_limit, argument_limit) if v is not None]
    return max(0, min(set_limits)) if set_limits else UNLIMITED_DELIVERY_LIMIT


def nservicebus_delivery_limit_refusal(
    queue: str,
    *,
    broker_version: tuple[int, ...],
    queue_type: str | None,
    arguments: Mapping[str, object],
    effective_policy_definition: Mapping[str, object] | None,
    applied_policy: str | None,
    operator_policy: str | None = None,
    delivery_limit: object = None,
) -> str | None:
    """Why NServiceBus.RabbitMQ 10+ would refuse to start on this queue, or None when it would start.

    BrokerVerifier.ShouldOverrideDeliveryLimit and Queue.GetDeliveryLimit: classic queues are not
    checked; the limit is the broker's ``delivery_limit`` (4.x) or else the lowest of argument and
    effective policy (3.x, negative counts as 0, none means unlimited). 100000 passes, whatever set
    it. Otherwise an argument or (operator) policy limit is refused; with no limit set, 4.x needs
    the transport's policy, which cannot be applied while another policy is (one policy per queue).
    ``None`` also when the endpoint would create its own policy (it needs policymaker rights for that).
    """
    if queue_type != "quorum":
        return None
    argument_limit = _limit(arguments.get(DELIVERY_LIMIT_ARGUMENT))
    policy_limit = _limit((effective_policy_definition or {}).get(DELIVERY_LIMIT_POLICY_KEY))
    limit = effective_delivery_limit(arguments, effective_policy_definition, delivery_limit)
    if limit == UNLIMITED_DELIVERY_LIMIT:
        return None
    recreate_own_policy = limit == -1 and is_delivery_limit_policy_name(applied_policy)
    if not recreate_own_policy and (argument_limit is not None or policy_limit is not None):
        sources = [f"argument {DELIVERY_LIMIT_ARGUMENT}={argument_limit}"] if argument_limit is not None else []
        if policy_limit is not None:
            owners = [f"policy {applied_policy!r}"] if applied_policy else []
            owners += [f"operator policy {operator_policy!r}"] if operator_policy else []
            sources.append(f"{DELIVERY_LIMIT_POLICY_KEY}={policy_limit} from {' / '.join(owners) or 'a policy'}")
        return (
            f"queue {queue!r} has delivery limit {limit} from {' and '.join(sources)}; NServiceBus.RabbitMQ 10+ "
            "refuses to start on a non-default delivery limit. Remove every delivery limit from its arguments, "
            f"user policies and operator policies (only {delivery_limit_policy_name(queue)!r} may set one, "
            f"{UNLIMITED_DELIVERY_LIMIT})"
        )
    # SetDeliveryLimitViaPolicy: the transport would now create its policy.
    version = ".".join(map(str, broker_version))
    if broker_version < DELIVERY_LIMIT_POLICY_MINIMUM_BROKER_VERSION:
        return (
            f"queue {queue!r} needs NServiceBus's delivery-limit policy re-created, which the transport refuses "
            f"below RabbitMQ 4.0 (broker {version})"
        )
    if applied_policy and not is_delivery_limit_policy_name(applied_policy):
        return (
            f"queue {queue!r} has policy {applied_policy!r} applied, so {delivery_limit_policy_name(queue)!r} cannot "
            f"be, and RabbitMQ {version}'s default delivery limit {limit} stays; NServiceBus.RabbitMQ 10+ refuses to "
            f"start. Exclude {queue!r} from {applied_policy!r}'s pattern, or lower its priority below "
            f"{DELIVERY_LIMIT_POLICY_PRIORITY}"
        )
    return None


# Policy targets that reach a quorum queue ('queues' and 'all' reach every queue type).
POLICY_TARGETS_REACHING_QUORUM_QUEUES = ("all", "queues", DELIVERY_LIMIT_POLICY_APPLY_TO)


@dataclass(frozen=True)
class BrokerPolicy:
    """A policy or operator policy as declared or listed: enough to tell which queues it reaches."""

    name: str
    pattern: str
    apply_to: str
    priority: int
    definition: Mapping[str, object]
    operator: bool = False

    def reaches(self, quorum_queue: str) -> bool | None:
        """RabbitMQ applies a policy whose pattern matches anywhere in the name (``re:run``, unanchored).

        None when Python cannot compile the pattern (a PCRE feature it lacks): reach unknown.
        """
        if self.apply_to not in POLICY_TARGETS_REACHING_QUORUM_QUEUES:
            return False
        try:
            return re.search(self.pattern, quorum_queue) is not None
        except re.error:
            return None


@dataclass(frozen=True)
class DeliveryLimitConflict:
    """A policy that makes a quorum receive queue's delivery limit come from anywhere but NServiceBus's policy."""

    queue: str
    policy: str
    operator: bool
    field: str
    expected: str
    actual: str
    refused: bool  # NServiceBus.RabbitMQ 10+ refuses to start on the queue because of it
    fix: str

    @property
    def kind(self) -> str:
        return "operator policy" if self.operator else "policy"


def _describe_policy(pattern: str, apply_to: str, priority: int, definition: Mapping[str, object]) -> str:
    return f"pattern {pattern!r}, apply-to {apply_to}, priority {priority}, definition {dict(definition)}"


def _as_limit(value: object) -> object:
    """A definition value as the broker stores it: the provider's ``"100000"`` string is the integer."""
    return int(value) if isinstance(value, str) and value.lstrip("+-").isdigit() else value


def delivery_limit_conflicts(
    queue: str, policies: Iterable[BrokerPolicy], broker_version: tuple[int, ...] | None = None
) -> list[DeliveryLimitConflict]:
    """Every policy over quorum receive queue ``queue`` that is not NServiceBus's own, as it matters to the endpoint.

    Refused (BrokerVerifier.ShouldOverrideDeliveryLimit/SetDeliveryLimitViaPolicy): a delivery limit
    other than 100000 from any policy or operator policy, and on RabbitMQ 4.x (``broker_version``
    None counts as 4.x) any user policy that ties or outranks ``nsb.<queue>.delivery-limit`` (priority
    >= 0), because a queue has one policy and the transport's cannot be applied. Flagged but not
    refused: a limit of exactly 100000 that does not come from NServiceBus's policy. A policy named
    ``nsb.<queue>.delivery-limit`` with another pattern, target, priority or definition is flagged
    (and refused when its limit is not 100000).
    """
    own = delivery_limit_policy(queue)
    on_4x = broker_version is None or broker_version >= DELIVERY_LIMIT_POLICY_MINIMUM_BROKER_VERSION
    remove_limit = f"remove '{DELIVERY_LIMIT_POLICY_KEY}' from it or exclude {queue!r} from its pattern"
    conflicts = []
    for policy in policies:
        if not policy.reaches(queue):
            continue
        limit = _as_limit(policy.definition.get(DELIVERY_LIMIT_POLICY_KEY))
        limit_refused = limit is not None and limit != UNLIMITED_DELIVERY_LIMIT
        if policy.name == own.name and not policy.operator:
            declared = (
                policy.pattern,
                policy.apply_to,
                policy.priority,
                {k: _as_limit(v) for k, v in policy.definition.items()},
            )
            wanted = (own.pattern, own.apply_to, own.priority, dict(own.definition))
            if declared != wanted:
                conflicts.append(
                    DeliveryLimitConflict(
                        queue, policy.name, False, "definition",
                        _describe_policy(own.pattern, own.apply_to, own.priority, own.definition),
                        _describe_policy(policy.pattern, policy.apply_to, policy.priority, policy.definition),
                        limit_refused, "declare it exactly as NServiceBus does (RabbitMqEndpoint)",
                    )
                )  # fmt: skip
            continue
        if limit is not None:
            # Below 4.0 NServiceBus creates no policy of its own: no limit, or exactly 100000, is what it takes.
            wanted_limit = (
                f"only from {own.name} ({UNLIMITED_DELIVERY_LIMIT})"
                if on_4x
                else f"none, or {UNLIMITED_DELIVERY_LIMIT}"
            )
            conflicts.append(
                DeliveryLimitConflict(
                    queue, policy.name, policy.operator, DELIVERY_LIMIT_POLICY_KEY,
                    wanted_limit, str(limit), limit_refused, remove_limit,
                )
            )  # fmt: skip
        elif not policy.operator and on_4x and policy.priority >= own.priority:
            conflicts.append(
                DeliveryLimitConflict(
                    queue, policy.name, False, "priority",
                    f"< {own.priority} (below {own.name})", str(policy.priority), True,
                    f"exclude {queue!r} from its pattern or give it a priority below {own.priority}",
                )
            )  # fmt: skip
    return conflicts


def instance_queue_name(endpoint: str, discriminator: str) -> str:
    return f"{endpoint}-{discriminator}"


def legacy_timeout_queue_names(endpoint: str) -> tuple[str, ...]:
    """``<endpoint>.Timeouts`` and ``<endpoint>.TimeoutsDispatcher`` (timeout manager, seed 004)."""
    return tuple(endpoint + suffix for suffix in LEGACY_TIMEOUT_QUEUE_SUFFIXES)


def endpoint_topology(
    endpoint: str,
    *,
    generation: str = DEFAULT_GENERATION,
    routing_topology: str = "conventional",
    queue_type: str = "quorum",
    instance_discriminators: Sequence[str] = (),
    legacy_timeout_manager: bool = False,
    delivery_limit_policies: bool = True,
    park_unroutable: bool = True,
) -> Topology:
    """What ``rabbitmq-transport endpoint create`` declares: receiving queues and their delivery bindings.

    With ``delivery_limit_policies`` each quorum receiving queue also gets the delivery-limit policy
    NServiceBus 10+ would otherwise create at start (if it may) on RabbitMQ 4.x. With ``park_unroutable``
    and the conventional topology, each receiving queue's own exchange gets the parking exchange as its
    alternate exchange (the delivery exchange routes there even when the queue is gone).
    """
    receiving = [(endpoint, "endpoint")] + [
        (instance_queue_name(endpoint, d), "instance") for d in instance_discriminators
    ]
    parts = [_owned_queue(name, role, routing_topology, queue_type) for name, role in receiving]  # type: ignore[arg-type]
    parts.append(
        Topology(bindings=tuple(delivery_binding(name, routing_topology, generation) for name, _ in receiving))
    )
    if delivery_limit_policies and endpoint_queue_arguments(queue_type).get("x-queue-type") == "quorum":
        parts.append(Topology(policies=tuple(delivery_limit_policy(name) for name, _ in receiving)))
    if park_unroutable and routing_topology == "conventional":
        parts.append(Topology(policies=tuple(alternate_exchange_policy(name, generation) for name, _ in receiving)))
    if legacy_timeout_manager:
        parts += [
            _owned_queue(name, "legacy-timeouts", routing_topology, queue_type)
            for name in legacy_timeout_queue_names(endpoint)
        ]
    return Topology.join(parts)


def shared_queues(
    *,
    routing_topology: str = "conventional",
    queue_type: str = "quorum",
    error_queue: str = DEFAULT_ERROR_QUEUE,
    audit_queue: str = DEFAULT_AUDIT_QUEUE,
) -> Topology:
    """The error and audit queues every endpoint sends to (declared once per broker)."""
    return _owned_queue(error_queue, "error", routing_topology, queue_type) + _owned_queue(
        audit_queue, "audit", routing_topology, queue_type
    )


# --- sending a delayed message -------------------------------------------------------------------------


def normalize_delay(delay_seconds: int) -> int:
    """Negative delays are sent at once (0); delays beyond 28 bits are refused, as NServiceBus does."""
    if isinstance(delay_seconds, bool) or not isinstance(delay_seconds, int):
        raise DelayError(f"delay must be a whole number of seconds, got {delay_seconds!r}")
    if delay_seconds > MAX_DELAY_SECONDS:
        raise DelayError(
            f"delay {delay_seconds} s exceeds the maximum of {MAX_DELAY_SECONDS} s "
            f"({LEVEL_COUNT} delay levels of 2^27..2^0 s)"
        )
    return max(0, delay_seconds)


def delay_bits(delay_seconds: int) -> str:
    """The 28 bits of the delay, most significant (level 27) first."""
    return format(normalize_delay(delay_seconds), f"0{LEVEL_COUNT}b")


def routing_key(delay_seconds: int, destination: str) -> str:
    """``0.0.…1.0.1.0.destination`` for 10 s: each bit then '.', then the destination address."""
    return ".".join(delay_bits(delay_seconds)) + "." + destination


def destination_from_routing_key(key: str) -> str:
    """The address travels only in the key: everything after the 56-character prefix."""
    return key[ROUTING_KEY_PREFIX_LENGTH:]


def first_level(delay_seconds: int) -> int:
    """The level of the highest set bit (0 for a zero delay): where the send starts."""
    return max(normalize_delay(delay_seconds).bit_length() - 1, 0)


def first_exchange(delay_seconds: int, generation: str = DEFAULT_GENERATION) -> str:
    return delay_level_name(first_level(delay_seconds), generation)


@dataclass(frozen=True)
class Hop:
    """One exchange on the way: which bit it reads, where it routes, how long the message waits there."""

    exchange: str
    level: int | None  # None for the delivery exchange
    routing_value: str  # "0"/"1", or the destination at the delivery exchange
    routed_to: str
    seconds_in_queue: int  # 0 when routed straight on
    dead_letter_to: str | None


@dataclass(frozen=True)
class DelayPath:
    delay_seconds: int
    destination: str
    generation: GenerationName
    routing_key: str
    first_exchange: str
    hops: tuple[Hop, ...]

    @property
    def total_seconds(self) -> int:
        return sum(hop.seconds_in_queue for hop in self.hops)


def delay_path(delay_seconds: int, destination: str, generation: str = DEFAULT_GENERATION) -> DelayPath:
    """The hops of seed 001's table: from the first exchange down to delivery."""
    spec = generation_spec(generation)
    delay = normalize_delay(delay_seconds)
    bits = delay_bits(delay)
    hops: list[Hop] = []
    for level in range(first_level(delay), -1, -1):
        bit = bits[MAX_LEVEL - level]
        name = delay_level_name(level, generation)
        if bit == "1":
            hops.append(
                Hop(name, level, bit, name, level_ttl_ms(level) // 1000, dead_letter_exchange(level, generation))
            )
        else:
            hops.append(Hop(name, level, bit, dead_letter_exchange(level, generation), 0, None))
    hops.append(Hop(spec.delivery_exchange, None, destination, destination, 0, None))
    return DelayPath(
        delay, destination, spec.name, routing_key(delay, destination), first_exchange(delay, generation), tuple(hops)
    )


# --- names that can work -------------------------------------------------------------------------------

MAX_NAME_BYTES = 255  # queue and exchange names are AMQP short strings (rabbitmq-website docs/queues.md "Queue Names")
RESERVED_NAME_PREFIX = "amq."
PROVIDER_ID_SEPARATOR = "@"
BINDING_ID_SEPARATOR = "/"


def delay_infrastructure_names() -> frozenset[str]:
    """Every exchange and queue name of the delay infrastructure, both generations (they may live side by side)."""
    return frozenset(
        name
        for generation in GENERATIONS
        for name in (
            delivery_exchange_name(generation),
            *(delay_level_name(level, generation) for level in range(LEVEL_COUNT)),
        )
    )


def parking_names() -> frozenset[str]:
    """The parking exchange/queue name of both generations (``parking_name``): reserved like the delay names."""
    return frozenset(parking_name(generation) for generation in GENERATIONS)


def object_name_problems(name: str) -> list[str]:
    """Why ``name`` cannot name a queue or exchange this project declares (empty list when it can).

    - ``amq.``: reserved by the broker. A declare is refused with ACCESS_REFUSED
      (rabbitmq-server ``rabbit_channel:check_name/2``) and a definitions import skips the object with
      only a log warning (``rabbit_definitions:add_queue_int/3``, ``add_exchange_int/3``).
    - a delay-infrastructure name of either generation: an endpoint's queue (and, in the conventional
      topology, its fanout exchange) would collide with the level's quorum queue / topic exchange.
    - a parking name of either generation (``parking_names``): with ``parkUnroutable`` (the default) the
      graph declares a topic exchange and a quorum queue of that name, so an endpoint's fanout exchange and
      queue would be declared twice (a definitions file holds both, the broker keeps one). Refused whatever
      ``parkUnroutable`` says, like the other generation's names: a graph of either generation (another
      stack, an earlier ``up``) may hold them, the default turns them back on, and ``parking`` and the
      delay status read the queue of that name as the parking queue.
    - ``@``: the Pulumi provider (terraform-provider-rabbitmq) gives queues, exchanges and policies the
      id ``name@vhost`` and reads it back with ``strings.Split(id, "@")``, wanting exactly two parts
      (``rabbitmq/util.go`` ``parseId``): the object is created, then cannot be read, imported or deleted.
    - ``/``: its binding id is ``vhost/source/destination/type/properties_key`` with only the vhost
      percent-encoded; ``ReadBinding`` (``rabbitmq/resource_binding.go``) splits on ``/`` and takes the parts
      by position, so a ``/`` in a source or destination shifts them and the binding is never found again.
      (``%`` is safe: the vhost's ``%`` is encoded, names are kept verbatim in the id, and the provider's
      client path-escapes names in API URLs.)
    - more than 255 bytes: a name is an AMQP short string.
    """
    if not name:
        return ["is empty"]
    problems = []
    if name.startswith(RESERVED_NAME_PREFIX):
        problems.append(
            f"starts with {RESERVED_NAME_PREFIX!r}, which RabbitMQ reserves for itself: a declare is refused "
            "(ACCESS_REFUSED) and a definitions import silently skips it"
        )
    if name in delay_infrastructure_names():
        problems.append(
            "is a name of the delay infrastructure itself (nsb.v2.delay-level-NN / nsb.v2.delay-delivery, "
            "v1: nsb.delay-level-NN / nsb.delay-delivery)"
        )
    if name in parking_names():
        problems.append(
            "is the name of the parking exchange and queue of the delay infrastructure ("
            + " / ".join(f"{g}: {parking_name(g)}" for g in reversed(GENERATIONS))
            + "; declared by nsb-delays:rabbitmq.parkUnroutable, reserved in either generation); rename it"
        )
    if PROVIDER_ID_SEPARATOR in name:
        problems.append(
            f"contains {PROVIDER_ID_SEPARATOR!r}: the Pulumi provider's id is 'name@vhost', split on every '@', "
            "so the object could not be read back, imported or deleted"
        )
    if BINDING_ID_SEPARATOR in name:
        problems.append(
            f"contains {BINDING_ID_SEPARATOR!r}: the Pulumi provider's binding id "
            "'vhost/source/destination/type/key' is split on '/', so its bindings could not be read back"
        )
    size = len(name.encode("utf-8"))
    if size > MAX_NAME_BYTES:
        problems.append(f"is {size} bytes; RabbitMQ queue and exchange names are at most {MAX_NAME_BYTES} bytes")
    return problems


def vhost_problems(vhost: str) -> list[str]:
    """Why ``vhost`` cannot hold what the provider declares: empty, or an ``@`` in the ``name@vhost`` ids."""
    if not vhost:
        return ["is empty"]
    if PROVIDER_ID_SEPARATOR in vhost:
        return [
            f"contains {PROVIDER_ID_SEPARATOR!r}: the Pulumi provider's ids are 'name@vhost', split on every '@', "
            "so nothing declared in it could be read back"
        ]
    return []


def rabbitmq_address_problems(address: str) -> list[str]:
    """Why an address cannot be a delayed-delivery destination (empty list when it can)."""
    problems = []
    if not address:
        return ["is empty"]
    if "*" in address or "#" in address:
        problems.append("contains '*' or '#', which are wildcards in the '#.<endpoint>' binding key")
    if any(ch.isspace() for ch in address):
        problems.append("contains whitespace")
    size = len(address.encode("utf-8"))
    if size > MAX_DESTINATION_BYTES:
        problems.append(
            f"is {size} bytes; a delayed routing key leaves at most {MAX_DESTINATION_BYTES} bytes "
            f"for the destination ({MAX_ROUTING_KEY_BYTES} - {ROUTING_KEY_PREFIX_LENGTH})"
        )
    return problems


def _is_bit_words(text: str) -> bool:
    return all(word in ("0", "1") for word in text.split("."))


def shadowing_addresses(addresses: Iterable[str]) -> list[tuple[str, str]]:
    """Pairs (a, b) where the binding ``#.a`` also matches delayed keys addressed to b.

    ``#.a`` matches every key whose last words are a's words. A key is 28 bit words then b's
    words, so it matches when b ends with ``.a`` (``a.b`` receives ``x.a.b``'s delayed
    messages) and when a is bit words followed by b (``0.b`` receives b's even delays).
    """
    unique = sorted(set(addresses))
    pairs = []
    for a in unique:
        for b in unique:
            if a == b:
                continue
            if b.endswith("." + a):
                pairs.append((a, b))
            elif a.endswith("." + b):
                head = a[: -len(b) - 1]
                if head.count(".") < LEVEL_COUNT and _is_bit_words(head):
                    pairs.append((a, b))
    return pairs
