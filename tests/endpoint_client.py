"""An endpoint-shaped client: the AMQP and HTTP calls an NServiceBus.RabbitMQ endpoint makes with installers off,
one method per call site, made as the endpoint's own RabbitMQ user (pika + the management API).

Call sites: Particular/NServiceBus.RabbitMQ at ``ec745bf``, paths under ``src/NServiceBus.Transport.RabbitMQ/``; the
rights each needs are listed in ``nsb_delays.components.model.permissions``. Names and routing keys come from the
model (``components.model.rabbitmq``), which ``tests/broker/test_nservicebus_compatibility.py`` holds to
NServiceBus's own declarations. Every call returns or raises what the broker answered: ``outcome`` turns a refusal
into a row of the permission matrix instead of an exception.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pika
from pika.adapters.blocking_connection import BlockingChannel
from pika.exceptions import ChannelClosedByBroker, NackError, UnroutableError

from nsb_delays.brokers.delivery import connection_parameters
from nsb_delays.brokers.management import ManagementApi, path_segment
from nsb_delays.components.model.rabbitmq import routing
from nsb_delays.components.model.rabbitmq.names import (
    DEFAULT_GENERATION,
    Generation,
    delivery_exchange_name,
    endpoint_binding_key,
)
from nsb_delays.components.model.rabbitmq.routing import first_exchange

ALLOWED = "allowed"
REFUSED = "refused 403"  # AMQP ACCESS_REFUSED (rabbit_channel closes the channel with reply code 403)
DELAY_HEADER = "NServiceBus.Transport.RabbitMQ.DelayInSeconds"


@dataclass(frozen=True)
class Outcome:
    result: str  # ALLOWED, REFUSED, "HTTP <status>", "arrived", …
    detail: str = ""

    def noted(self, note: str) -> Outcome:
        """The same result, the broker's answer followed by ``note``."""
        return Outcome(self.result, " -> ".join(part for part in (self.detail, note) if part))


def outcome(action: Callable[[], object]) -> Outcome:
    """Run one AMQP operation: ALLOWED, or ``refused <reply code>`` with the broker's reply text."""
    try:
        action()
    except ChannelClosedByBroker as error:
        return Outcome(f"refused {error.reply_code}", str(error.reply_text))
    except (UnroutableError, NackError) as error:
        return Outcome("not routed", type(error).__name__)
    return Outcome(ALLOWED)


@dataclass(frozen=True)
class EventType:
    """An event as ``ConventionalRoutingTopology`` sees it: ``Namespace:Name`` of the type, its base classes
    (``System:Object`` last) and its interfaces."""

    name: str
    bases: tuple[str, ...]
    interfaces: tuple[str, ...]


class Inbox:
    """``MessagePump.ConnectToBroker``: ``basic.qos`` and ``basic.consume`` on a channel of its own; each message
    is acked on arrival and its arrival time kept by message id."""

    def __init__(self, connection: pika.BlockingConnection, queue: str) -> None:
        self.connection = connection
        self.arrived: dict[str, float] = {}
        channel = connection.channel()
        channel.basic_qos(prefetch_count=10)
        channel.basic_consume(queue, self._on_message)

    def _on_message(self, channel: BlockingChannel, method: Any, properties: pika.BasicProperties, _: bytes) -> None:
        self.arrived[str(properties.message_id)] = time.monotonic()
        channel.basic_ack(method.delivery_tag)

    def wait_for(self, message_id: str, timeout: float) -> float | None:
        """The message's arrival time (``time.monotonic``), or None when it did not arrive within ``timeout``."""
        deadline = time.monotonic() + timeout
        while message_id not in self.arrived and time.monotonic() < deadline:
            self.connection.process_data_events(time_limit=0.1)
        return self.arrived.get(message_id)


class EndpointClient:
    """One endpoint's connection as ``user``; ``routing_topology`` picks the conventional or direct call shapes."""

    def __init__(
        self, amqp_url: str, management_url: str, vhost: str, user: str, password: str, routing_topology: str
    ) -> None:
        parameters = connection_parameters(amqp_url, vhost)
        parameters.credentials = pika.PlainCredentials(user, password)
        self.connection = pika.BlockingConnection(parameters)
        self.api = ManagementApi(management_url, user, password)
        self.vhost, self.routing_topology = vhost, routing_topology
        self.delivery = delivery_exchange_name(DEFAULT_GENERATION)
        self._channel: BlockingChannel | None = None

    def close(self) -> None:
        if self.connection.is_open:
            self.connection.close()

    def channel(self) -> BlockingChannel:
        """``ConfirmsAwareChannel``: publisher confirms on; a fresh one after the broker closed the last."""
        if self._channel is None or not self._channel.is_open:
            self._channel = self.connection.channel()
            self._channel.confirm_delivery()
        return self._channel

    # --- start-up: Administration/BrokerVerifier.cs -----------------------------------------------------------

    def http(self, method: str, path: str, body: Any = None) -> Outcome:
        """One management API call (``ManagementApi/ManagementClient.cs``): ``HTTP <status>`` and the reason."""
        response = self.api.session.request(method, f"{self.api.url}/api/{path}", json=body, timeout=30)
        try:
            reason = "" if response.ok else str(response.json().get("reason", ""))
        except ValueError:
            reason = response.text[:120]
        return Outcome(f"HTTP {response.status_code}", reason)

    def queue_details(self, queue: str, timeout: float = 45) -> tuple[dict[str, Any], float]:
        """``BrokerVerifier.GetQueueDetails``: GET the queue until ``effective_policy_definition`` appears (NServiceBus
        tries 20 times, 3 s apart); the last answer and the seconds it took."""
        started = time.monotonic()
        while True:
            details = dict(self.api.request("GET", f"queues/{path_segment(self.vhost)}/{path_segment(queue)}"))
            if "effective_policy_definition" in details or time.monotonic() - started > timeout:
                return details, time.monotonic() - started
            time.sleep(0.5)

    # --- receiving and sending ----------------------------------------------------------------------------------

    def consume(self, queue: str) -> Inbox:
        return Inbox(self.connection, queue)

    def publish(
        self, exchange: str, routing_key: str, message_id: str, *, mandatory: bool = True, headers: Any = None
    ) -> None:
        properties = pika.BasicProperties(message_id=message_id, delivery_mode=2, headers=headers)
        self.channel().basic_publish(exchange, routing_key, b"{}", properties, mandatory=mandatory)

    def send(self, destination: str, message_id: str) -> None:
        """``ConventionalRoutingTopology.Send``: the destination's exchange; ``DirectRoutingTopology.Send``: the
        default exchange with the destination as key. Both mandatory (``RawSendInCaseOfFailure`` alike)."""
        if self.routing_topology == "conventional":
            self.publish(destination, "", message_id)
        else:
            self.publish("", destination, message_id)

    def bind_to_delay_infrastructure(self, destination: str, binding_key: str | None = None) -> None:
        """``ConventionalRoutingTopology.BindToDelayInfrastructure`` (``exchange.bind``) or
        ``DirectRoutingTopology.BindToDelayInfrastructure`` (``queue.bind``) of the destination to the delivery
        exchange with ``DelayInfrastructure.BindingKey`` = ``#.<destination>``."""
        key = endpoint_binding_key(destination) if binding_key is None else binding_key
        if self.routing_topology == "conventional":
            self.channel().exchange_bind(destination=destination, source=self.delivery, routing_key=key)
        else:
            self.channel().queue_bind(destination, self.delivery, routing_key=key)

    def delayed_send(self, destination: str, delay_seconds: int, message_id: str, cc: Sequence[str] = ()) -> None:
        """``ConfirmsAwareChannel.SendMessage`` with the delay header: bind (every time), then publish to the
        starting level with ``DelayInfrastructure.CalculateRoutingKey``'s 28-bit key, mandatory."""
        self.bind_to_delay_infrastructure(destination)
        headers = {DELAY_HEADER: delay_seconds, **({"CC": list(cc)} if cc else {})}
        key = routing.routing_key(delay_seconds, destination)
        self.publish(first_exchange(delay_seconds, Generation.V2), key, message_id, headers=headers)

    def delayed_message_arrives(self, destination: str, delay_seconds: int, timeout: float) -> bool:
        """A delayed message to ``destination`` (its queue consumed first), and whether it arrived within
        ``timeout`` (which only bounds a failure)."""
        inbox = self.consume(destination)
        message_id = uuid.uuid4().hex
        self.delayed_send(destination, delay_seconds, message_id)
        return inbox.wait_for(message_id, timeout) is not None

    # --- events: Routing/ConventionalRoutingTopology.cs, Routing/DirectRoutingTopology.cs ----------------------------

    def setup_type_subscriptions(self, event: EventType) -> None:
        """``SetupTypeSubscriptions``: ``CreateExchange`` (fanout, durable) of the type, then of each base class and
        interface, each bound ``base <- type``."""
        channel = self.channel()
        channel.exchange_declare(event.name, "fanout", durable=True)
        for parent in (*event.bases, *event.interfaces):
            channel.exchange_declare(parent, "fanout", durable=True)
            channel.exchange_bind(destination=parent, source=event.name, routing_key="")

    def publish_event(self, event: EventType, message_id: str) -> None:
        """``ConventionalRoutingTopology.Publish``: the type's exchanges, then a publish to it (not mandatory)."""
        self.setup_type_subscriptions(event)
        self.publish(event.name, "", message_id, mandatory=False)

    def publish_to_topic(self, routing_key: str, message_id: str) -> None:
        """``DirectRoutingTopology.Publish``: ``amq.topic`` with ``DefaultRoutingKeyConvention``'s key (not
        mandatory)."""
        self.publish("amq.topic", routing_key, message_id, mandatory=False)

    def subscribe_to_topic(self, queue: str, binding_key: str) -> None:
        """``DirectRoutingTopology.SetupSubscription``: ``queue.bind(queue <- amq.topic, key)``; the key is ``#`` for
        ``IEvent`` and ``object``."""
        self.channel().queue_bind(queue, "amq.topic", routing_key=binding_key)

    def subscribe(self, endpoint: str, event: EventType) -> None:
        """``ConventionalRoutingTopology.SetupSubscription``: the type's exchanges, then ``endpoint <- type``."""
        self.setup_type_subscriptions(event)
        self.channel().exchange_bind(destination=endpoint, source=event.name, routing_key="")
