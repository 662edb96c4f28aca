"""The least RabbitMQ rights an NServiceBus endpoint needs when its installers are off.

With installers off (``RabbitMQTransport.Initialize`` skips ``SetupInfrastructure``), an endpoint of
NServiceBus.RabbitMQ 10/11 (Particular/NServiceBus.RabbitMQ at ``ec745bf``, paths under
``src/NServiceBus.Transport.RabbitMQ/``) still does the following on the broker, and each call needs a right:

- start-up: ``BrokerVerifier.Initialize``/``VerifyRequirements`` GET ``/api/overview`` and ``/api/feature-flags``,
  ``BrokerVerifier.ValidateDeliveryLimit`` GETs ``/api/queues/{vhost}/{queue}`` (a management tag and access to the
  vhost; RabbitMQ below 3.13 answers ``/api/feature-flags`` to administrators only,
  ``rabbit_mgmt_wm_feature_flags:is_authorized``); ``SetDeliveryLimitViaPolicy`` PUTs a policy only when the
  effective delivery limit is not 100000, which the stack's pre-created ``nsb.<queue>.delivery-limit`` policies
  make it, so no ``policymaker`` tag;
- ``MessagePump.ConnectToBroker``: ``basic.consume`` on its queue (read);
- ``ConventionalRoutingTopology.Send``: publish to the destination's exchange (write); ``DirectRoutingTopology.Send``:
  publish to the default exchange (write ``amq.default``, which cannot be narrowed per queue);
- ``ConfirmsAwareChannel.SendMessage`` → ``BindToDelayInfrastructure`` on every delayed send: ``exchange.bind``
  (conventional) or ``queue.bind`` (direct) of the destination to ``nsb.v2.delay-delivery`` with ``#.<destination>``
  (write on the destination, read on the delivery exchange, topic read on the binding key), then a publish to
  ``nsb.v2.delay-level-NN`` with the 28-bit key (write, topic write on the routing key);
- ``ConventionalRoutingTopology.SetupTypeSubscriptions`` when it publishes or subscribes to an event:
  ``exchange.declare`` of the type's exchange, each base class's (``System:Object`` included) and each interface's
  (configure: RabbitMQ checks it before it looks the exchange up), ``exchange.bind`` base ← type (write base, read
  type) and, to subscribe, endpoint ← type (write endpoint, read type); ``DirectRoutingTopology`` publishes to and
  binds from ``amq.topic``;
- recoverability: delayed retries are delayed sends to itself, ``error`` and ``audit`` immediate sends.

RabbitMQ's checks (``rabbit_channel``: ``binding_action_with_checks``, ``check_topic_authorisation``;
``rabbit_auth_backend_internal:check_topic_access``): a topic permission names one exchange exactly (not a regex),
and an exchange without one allows every key, so the grant holds one entry per level exchange and one for the
delivery exchange. Proven on RabbitMQ 3.10 and 4.0 by ``tests/broker/test_endpoint_permissions.py``.
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from .rabbitmq.names import (
    DEFAULT_AUDIT_QUEUE,
    DEFAULT_ERROR_QUEUE,
    LEVEL_COUNT,
    Generation,
    RoutingTopology,
    delay_level_name,
    delivery_exchange_name,
    endpoint_binding_key,
)
from .rabbitmq.patterns import pattern_matches
from .rabbitmq.routing import routing_key

MANAGEMENT_TAG = "management"
"""The least tag that opens the management API (``rabbit_mgmt_util:is_mgmt_user``)."""
BROAD_TAGS = ("administrator", "policymaker")
"""Tags an endpoint user never needs once the delivery-limit policies are pre-created."""
BASE_EVENT_EXCHANGE = "System:Object"
"""Every event's class chain ends here; ``SetupTypeSubscriptions`` declares and binds it for each event."""
DEFAULT_EXCHANGE = "amq.default"
"""How RabbitMQ names the default exchange in a permission check (``rabbit_access_control``)."""
TOPIC_EXCHANGE = "amq.topic"
"""The direct routing topology publishes events here and subscribes with ``queue.bind`` from here."""
NOTHING = "^$"
"""A permission that matches no name (RabbitMQ's own reading of an empty regex)."""
UNSAFE_NAME_CHARACTERS = re.compile(r"[\s{}\x00-\x1f\x7f]")
"""Refused in a name that goes into a permission: whitespace and control characters (invisible in a grant), and
braces (RabbitMQ expands ``{username}`` and ``{vhost}`` in topic permissions)."""


@dataclass(frozen=True)
class TopicGrant:
    """A topic permission: routing keys (write) and binding keys (read) allowed on one topic exchange."""

    exchange: str
    write: str
    read: str


@dataclass(frozen=True)
class UserGrants:
    """Everything a user gets in one vhost: tags, the three permission regexes, one topic permission per exchange."""

    user: str
    vhost: str
    tags: tuple[str, ...]
    configure: str
    write: str
    read: str
    topic: tuple[TopicGrant, ...]


@dataclass(frozen=True)
class EndpointUser:
    """Who an endpoint logs in as and what it talks to.

    ``receiving_queues``: its own queue(s) (delayed retries go there); ``sends_to``: every destination it sends
    to, immediately or delayed; ``publishes``/``subscribes_to``: event exchanges as NServiceBus names them
    (``Namespace:TypeName``), the type's base classes and interfaces included; ``management_api``: its broker checks
    and delivery-limit validation are on (the NServiceBus default)."""

    name: str
    receiving_queues: tuple[str, ...]
    sends_to: tuple[str, ...] = ()
    publishes: tuple[str, ...] = ()
    subscribes_to: tuple[str, ...] = ()
    management_api: bool = True

    @property
    def destinations(self) -> tuple[str, ...]:
        """Every address a delayed message from this endpoint can be for: its own queues, then its destinations."""
        return tuple(dict.fromkeys((*self.receiving_queues, *self.sends_to)))

    @property
    def event_exchanges(self) -> tuple[str, ...]:
        events = (*self.publishes, *self.subscribes_to)
        return tuple(dict.fromkeys((*events, BASE_EVENT_EXCHANGE))) if events else ()


PCRE_METACHARACTERS = frozenset("\\^$.|?*+()[]{}")
r"""What RabbitMQ's regexes (Erlang ``re``, PCRE) give a meaning outside a character class; ``#``, ``-`` and ``:``
are literal there, so names keep their look (``nsb\.v2\.delay-level-00``)."""


def pcre_escape(name: str) -> str:
    return "".join("\\" + char if char in PCRE_METACHARACTERS else char for char in name)


def exactly(names: Iterable[str]) -> str:
    """A regex matching exactly these names (each escaped), nothing else; ``^$`` for none."""
    unique = sorted(set(names))
    return f"^(?:{'|'.join(pcre_escape(name) for name in unique)})$" if unique else NOTHING


def name_problems(name: str) -> list[str]:
    """Why ``name`` cannot go into a permission regex (empty when it can)."""
    if not name:
        return ["is empty"]
    unsafe = sorted(set(UNSAFE_NAME_CHARACTERS.findall(name)))
    return [f"contains {', '.join(map(repr, unsafe))}, which a permission regex cannot hold safely"] if unsafe else []


def delayed_routing_key_pattern(destinations: Iterable[str]) -> str:
    """The level exchanges' routing keys for ``destinations``: 28 ``0.``/``1.`` words, then the address
    (``DelayInfrastructure.CalculateRoutingKey``)."""
    return f"^(?:[01]\\.){{{LEVEL_COUNT}}}{exactly(destinations)[1:]}"


def delivery_binding_key_pattern(destinations: Iterable[str]) -> str:
    """The delivery exchange's binding keys for ``destinations``: ``#.<address>`` (``rmq.endpoint_binding_key``)."""
    return exactly(endpoint_binding_key(destination) for destination in destinations)


CONSUME_CALL = "MessagePump.ConnectToBroker (basic.consume)"
"""The one call an endpoint makes at start with installers off (the others come with its work)."""
Permission = Literal["configure", "write", "read"]
PERMISSIONS: tuple[Permission, ...] = ("configure", "write", "read")


@dataclass(frozen=True)
class Access:
    """One resource check RabbitMQ makes for a call the endpoint makes (``rabbit_channel``: ``check_*_permitted``):
    ``permission`` on the exchange or queue ``name`` (a permission regex matches names only, of either kind)."""

    permission: Permission
    name: str
    call: str  # the NServiceBus call, as the docs and messages name it


@dataclass(frozen=True)
class TopicAccess:
    """One topic check (``rabbit_channel:check_topic_authorisation``, topic exchanges only): ``write`` on a publish's
    routing key, ``read`` on a bind's binding key."""

    permission: Literal["write", "read"]
    exchange: str
    key: str
    call: str


@dataclass(frozen=True)
class EndpointAccesses:
    """Every check the broker makes for what one endpoint does with installers off."""

    resources: tuple[Access, ...]
    topics: tuple[TopicAccess, ...]

    def names(self, permission: Permission) -> list[str]:
        return [access.name for access in self.resources if access.permission == permission]


def endpoint_accesses(
    user: EndpointUser,
    *,
    routing_topology: RoutingTopology,
    generation: Generation,
    error_queue: str = DEFAULT_ERROR_QUEUE,
    audit_queue: str = DEFAULT_AUDIT_QUEUE,
) -> EndpointAccesses:
    """The checks of each call the module's docstring lists: consume its queues, send to its destinations and to
    error and audit, send delayed to its destinations (its own queues included: delayed retries), and declare,
    bind and publish its events. A delayed send's topic checks are listed for one key per level (a delay of 2^L
    seconds starts at level L)."""
    levels = [delay_level_name(level, generation) for level in range(LEVEL_COUNT)]
    delivery = delivery_exchange_name(generation)
    conventional = routing_topology == RoutingTopology.CONVENTIONAL
    resources = [Access("read", queue, CONSUME_CALL) for queue in user.receiving_queues]
    if conventional:
        send = "ConventionalRoutingTopology.Send"
        resources += [Access("write", d, send) for d in (*user.sends_to, error_queue, audit_queue)]
    else:
        resources.append(Access("write", DEFAULT_EXCHANGE, "DirectRoutingTopology.Send"))
    bind = "ConfirmsAwareChannel.SendMessage -> BindToDelayInfrastructure"
    topics: list[TopicAccess] = []
    for destination in user.destinations:
        resources += [Access("write", destination, bind), Access("read", delivery, bind)]
        topics.append(TopicAccess("read", delivery, endpoint_binding_key(destination), bind))
        for level, exchange in enumerate(levels):
            publish = f"ConfirmsAwareChannel.SendMessage (a delay starting at level {level:02d})"
            resources.append(Access("write", exchange, publish))
            topics.append(TopicAccess("write", exchange, routing_key(2**level, destination), publish))
    if conventional:
        events = "ConventionalRoutingTopology.SetupTypeSubscriptions"
        for event in user.event_exchanges:
            resources += [Access(permission, event, events) for permission in PERMISSIONS]
    else:
        if user.publishes:
            resources.append(Access("write", TOPIC_EXCHANGE, "DirectRoutingTopology.Publish"))
        if user.subscribes_to:
            subscribe = "DirectRoutingTopology.SetupSubscription (queue.bind)"
            resources += [Access("write", queue, subscribe) for queue in user.receiving_queues]
            resources.append(Access("read", TOPIC_EXCHANGE, subscribe))
    return EndpointAccesses(tuple(resources), tuple(topics))


def endpoint_user_grants(
    user: EndpointUser,
    vhost: str = "/",
    *,
    routing_topology: RoutingTopology,
    generation: Generation,
    error_queue: str = DEFAULT_ERROR_QUEUE,
    audit_queue: str = DEFAULT_AUDIT_QUEUE,
) -> UserGrants:
    """The least grants for ``user``: exactly the names ``endpoint_accesses`` checks, per permission, and a topic
    permission per delay exchange allowing only its destinations' keys."""
    accesses = endpoint_accesses(
        user, routing_topology=routing_topology, generation=generation, error_queue=error_queue,
        audit_queue=audit_queue,
    )  # fmt: skip
    levels = [delay_level_name(level, generation) for level in range(LEVEL_COUNT)]
    delivery = delivery_exchange_name(generation)
    destinations = user.destinations
    topic = (
        TopicGrant(delivery, write=NOTHING, read=delivery_binding_key_pattern(destinations)),
        *(TopicGrant(level, write=delayed_routing_key_pattern(destinations), read=NOTHING) for level in levels),
    )
    tags = (MANAGEMENT_TAG,) if user.management_api else ()
    configure, write, read = (exactly(accesses.names(permission)) for permission in PERMISSIONS)
    return UserGrants(user.name, vhost, tags, configure, write, read, topic)


def is_everything(pattern: str) -> bool:
    """A permission regex that grants every name (``.*`` and its spellings)."""
    return pattern.strip() in (".*", "^.*", ".*$", "^.*$", "^(.*)$", "^(?:.*)$", ".+", "^.+$")


HASHING_ALGORITHM = "rabbit_password_hashing_sha256"
"""RabbitMQ's default password hashing module (``rabbit_password``: ``?DEFAULT_HASHING_MODULE``)."""


def password_hash(password: str, salt: bytes | None = None) -> str:
    """A definitions file's ``password_hash`` as RabbitMQ computes it (``rabbit_password:hash/2``): a random
    32-bit salt, then SHA-256 of salt + password (``salted_hash/3``, ``rabbit_password_hashing_sha256:hash/1``),
    the two concatenated and base64-encoded."""
    salt = secrets.token_bytes(4) if salt is None else salt
    if len(salt) != 4:
        raise ValueError(f"a RabbitMQ password salt is 4 bytes, got {len(salt)}")
    return base64.b64encode(salt + hashlib.sha256(salt + password.encode()).digest()).decode()


# --- checking grants the way the broker does ------------------------------------------------------------------------

TOPIC_VARIABLES_ESCAPED_FROM = (4, 2, 5)
"""rabbitmq-server ``rabbit_auth_backend_internal:expand_topic_permission/2``: from v4.2.5 the ``{username}`` and
``{vhost}`` it puts into a topic permission are regex-escaped (``escape_regex/1``); up to v4.2.4 they go in as they
are."""


def permission_allows(pattern: str, name: str) -> bool | None:
    """``rabbit_auth_backend_internal:check_resource_access/4``: an empty permission reads as ``^$``; the regex runs
    unanchored on the name's bytes (``re:run`` without ``unicode``), and a regex error denies. None when Python cannot
    evaluate a pattern PCRE takes."""
    return pattern_matches(pattern or NOTHING, name)


def topic_permission_allows(
    pattern: str, key: str, *, user: str, vhost: str, broker_version: tuple[int, ...]
) -> bool | None:
    """``rabbit_auth_backend_internal:check_topic_access/4`` for a topic permission's ``pattern`` (write: a routing
    key; read: a binding key): ``{username}`` and ``{vhost}`` expanded (``rabbit_channel:build_topic_variable_map``),
    then as ``permission_allows``. An exchange without a topic permission allows every key (not checked here)."""
    expanded = pattern or NOTHING
    for variable, value in (("username", user), ("vhost", vhost)):
        shown = pcre_escape(value) if broker_version >= TOPIC_VARIABLES_ESCAPED_FROM else value
        expanded = expanded.replace(f"{{{variable}}}", shown)
    return permission_allows(expanded, key)
