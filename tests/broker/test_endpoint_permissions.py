"""Endpoint users get exactly what an NServiceBus endpoint with installers off needs, on RabbitMQ 3.10 and 4.3 (and 4.0
where it answers differently from 4.3).

A stack with users (Sales sends to Billing and publishes OrderPlaced; Billing subscribes; Shipping has no user) is
rendered by ``nsb-delays render --format rabbitmq-definitions --passwords`` and imported as the administrator. Then
``tests/endpoint_client.py`` logs in as ``sales`` and ``billing`` and makes the endpoint's calls in NServiceBus's
order (``components.model.permissions`` cites each call site): each legitimate step must be allowed and do its job
(messages arrive, delays hold), and each step outside the endpoint's grants must be refused. Every step is a row of
the matrix printed (and written to a file) at the end of each broker version's run.
"""

from __future__ import annotations

import functools
import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pika
import pytest
import yaml
from click.testing import CliRunner

from nsb_delays.brokers.delivery import connection_parameters
from nsb_delays.brokers.management import ManagementApi, path_segment
from nsb_delays.components.model.rabbitmq.combined import ROOT_BUCKET
from nsb_delays.components.model.rabbitmq.delivery_limits import DELIVERY_LIMIT_POLICY_KEY
from nsb_delays.components.model.rabbitmq.names import (
    Generation,
    combined_policy_name,
    delay_level_name,
    delivery_exchange_name,
)
from nsb_delays.components.model.rabbitmq.routing import routing_key
from nsb_delays.infra.cli import cli
from servers.rabbitmq import LocalRabbitMq
from tests.broker import nservicebus_declarations as nsb
from tests.conftest import also_on_rabbitmq_4_0
from tests.endpoint_client import ALLOWED, REFUSED, EndpointClient, EventType, Inbox, Outcome, outcome

PASSWORDS = {"sales": "sales-secret", "billing": "billing-secret"}
ORDER_PLACED = EventType("MyCo.Events:OrderPlaced", bases=("System:Object",), interfaces=("NServiceBus:IEvent",))
EVENT_EXCHANGES = (ORDER_PLACED.name, *ORDER_PLACED.bases, *ORDER_PLACED.interfaces)
ORDER_PLACED_TOPIC_KEY = "MyCo-Events-OrderPlaced"  # DefaultRoutingKeyConvention: FullName with '.' -> '-'
EVENTS = ["MyCo.Events:OrderPlaced", "NServiceBus:IEvent"]  # as a user writes them in the stack
DELAY_LEVEL = delay_level_name(1, Generation.V2)
DELIVERY = delivery_exchange_name(Generation.V2)
ARRIVAL_TIMEOUT = 10.0  # seconds beyond a message's delay
CLOCK_SLACK = 0.05  # the broker's TTL clock against ours


def version_label(broker_version: tuple[int, ...]) -> str:
    return f"{broker_version[0]}.{broker_version[1]}"


def new_id() -> str:
    return uuid.uuid4().hex[:8]


@dataclass
class Matrix:
    """operation × expected × result, per broker version; ``check`` records a row, then asserts it."""

    version: str
    rows: list[tuple[str, str, str, str, str]] = field(default_factory=list)

    def check(self, topology: str, operation: str, expected: str, got: Outcome) -> None:
        self.rows.append((topology, operation, expected, got.result, got.detail))
        assert got.result == expected, f"[{self.version} {topology}] {operation}: expected {expected}, got {got}"

    def table(self) -> str:
        header = ("topology", "operation", "expected", "result", "broker's answer / note")
        rows = [header, *self.rows]
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
        lines = [" | ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[4]]) for row in rows]
        return f"RabbitMQ {self.version} endpoint permission matrix\n" + "\n".join(line.rstrip() for line in lines)


@pytest.fixture(scope="module")
def matrix(broker_version: tuple[int, ...], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Matrix]:
    made = Matrix(version_label(broker_version))
    yield made
    text = made.table()
    path = tmp_path_factory.mktemp("permissions") / f"matrix-{made.version}.txt"
    path.write_text(text + "\n")
    print(f"\n{text}\n(written to {path})")


def stack_file(folder: Path, vhost: str, broker_version: str, topology: str) -> Path:
    """Sales (user ``sales``: sends to Billing, publishes OrderPlaced), Billing (user ``billing``: subscribes to
    it) and Shipping (no user); passwords as Pulumi secrets, as the stack config requires."""
    section = {
        "vhost": vhost,
        "brokerVersion": broker_version,
        "routingTopology": topology,
        "endpoints": [
            {
                "name": "Sales",
                "user": {"name": "sales", "passwordKey": "salesPassword", "sendsTo": ["Billing"], "publishes": EVENTS},
            },
            {"name": "Billing", "user": {"name": "billing", "passwordKey": "billingPassword", "subscribesTo": EVENTS}},
            "Shipping",
        ],
    }
    config = {
        "nsb-delays:salesPassword": {"secure": "v1:x"},
        "nsb-delays:billingPassword": {"secure": "v1:y"},
        "nsb-delays:rabbitmq": section,
    }
    path = folder / f"Pulumi.{topology}.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    return path


def deploy(management: ManagementApi, folder: Path, vhost: str, broker_version: str, topology: str) -> None:
    """Render through the CLI with ``--passwords``, import as the administrator, add the event exchanges."""
    passwords = folder / "passwords.yaml"
    passwords.write_text(yaml.safe_dump(PASSWORDS))
    out = folder / f"definitions-{topology}.json"
    stack = stack_file(folder, vhost, broker_version, topology)
    arguments = ["render", "--stack", str(stack), "--format", "rabbitmq-definitions", "--passwords", str(passwords)]
    result = CliRunner().invoke(cli, [*arguments, "-o", str(out)])
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    assert {user["name"] for user in document["users"]} == set(PASSWORDS)
    management.import_definitions(document)
    for exchange in EVENT_EXCHANGES:  # the events' exchanges are not part of the stack
        body = {"type": "fanout", "durable": True}
        management.request("PUT", f"exchanges/{path_segment(vhost)}/{path_segment(exchange)}", body)


@dataclass
class Deployed:
    vhost: str
    other_vhost: str  # exists, but the endpoint users have no access to it
    sales: EndpointClient
    billing: EndpointClient


@pytest.fixture(scope="module")
def endpoint_users(management: ManagementApi) -> Iterator[None]:
    """The users are broker-wide: removed when the module's tests of a broker version end."""
    yield
    for user in PASSWORDS:
        management.send("DELETE", f"users/{user}")


def deployed(
    rabbitmq: LocalRabbitMq,
    management: ManagementApi,
    make_vhost: Callable[[str], str],
    broker_version: tuple[int, ...],
    folder: Path,
    topology: str,
) -> Iterator[Deployed]:
    vhost = make_vhost(f"perm-{topology}")
    deploy(management, folder, vhost, version_label(broker_version), topology)
    clients = {
        user: EndpointClient(rabbitmq.amqp_url, rabbitmq.management_url, vhost, user, password, topology)
        for user, password in PASSWORDS.items()
    }
    try:
        yield Deployed(vhost, make_vhost("perm-other"), clients["sales"], clients["billing"])
    finally:
        for client in clients.values():
            client.close()


@pytest.fixture(scope="module")
def conventional(
    rabbitmq: LocalRabbitMq,
    management: ManagementApi,
    module_vhost: Callable[[str], str],
    broker_version: tuple[int, ...],
    tmp_path_factory: pytest.TempPathFactory,
    endpoint_users: None,
) -> Iterator[Deployed]:
    folder = tmp_path_factory.mktemp("conventional")
    yield from deployed(rabbitmq, management, module_vhost, broker_version, folder, "conventional")


@pytest.fixture(scope="module")
def direct(
    rabbitmq: LocalRabbitMq,
    management: ManagementApi,
    module_vhost: Callable[[str], str],
    broker_version: tuple[int, ...],
    tmp_path_factory: pytest.TempPathFactory,
    endpoint_users: None,
) -> Iterator[Deployed]:
    folder = tmp_path_factory.mktemp("direct")
    yield from deployed(rabbitmq, management, module_vhost, broker_version, folder, "direct")


def arrival(inbox: Inbox, message_id: str, sent_at: float, delay: int) -> Outcome:
    """``arrived`` (with the seconds it took) once the message is in, never before its delay."""
    arrived_at = inbox.wait_for(message_id, delay + ARRIVAL_TIMEOUT)
    if arrived_at is None:
        return Outcome("not arrived", f"within {delay + ARRIVAL_TIMEOUT:.0f} s")
    early = arrived_at < sent_at + delay - CLOCK_SLACK
    return Outcome("early" if early else "arrived", f"after {arrived_at - sent_at:.1f} s (delay {delay} s)")


def consume(client: EndpointClient, queue: str) -> tuple[Outcome, Inbox | None]:
    inboxes: list[Inbox] = []
    got = outcome(lambda: inboxes.append(client.consume(queue)))
    return got, (inboxes[0] if inboxes else None)


def start_up(matrix: Matrix, topology: str, sales: EndpointClient, broker_version: tuple[int, ...]) -> None:
    """As ``sales`` with its management tag: ``BrokerVerifier.Initialize`` (overview), ``VerifyRequirements``
    (feature flags) and ``ValidateDeliveryLimit`` for the Sales queue (called from ``MessagePump.Initialize``)."""
    matrix.check(topology, "GET /api/overview (BrokerVerifier.Initialize)", "HTTP 200", sales.http("GET", "overview"))
    on_4_0 = broker_version >= (4, 0)
    flags = sales.http("GET", "feature-flags")
    if not on_4_0:  # rabbit_mgmt_wm_feature_flags:is_authorized: administrators only before 3.13
        flags = flags.noted("so NServiceBus on 3.10-3.12 needs DisabledBrokerRequirementChecks.StreamsEnabled")
    expected_flags = "HTTP 200" if on_4_0 else "HTTP 401"
    matrix.check(topology, "GET /api/feature-flags (BrokerVerifier.VerifyRequirements)", expected_flags, flags)

    details, waited = sales.queue_details("Sales")
    effective = details.get("effective_policy_definition")
    seen = Outcome("reported" if effective is not None else "never reported", f"after {waited:.1f} s: {effective}")
    matrix.check(topology, "GET /api/queues/{vh}/Sales until effective_policy_definition", "reported", seen)
    # 4.0: the stack's combined delivery-limit policy (the stack file is Pulumi.<topology>.yaml) makes the limit
    # 100000, which the transport takes from any policy; 3.10: no limit, read as 100000
    assert effective == ({"delivery-limit": nsb.UNLIMITED} if on_4_0 else {})
    combined = combined_policy_name(topology, DELIVERY_LIMIT_POLICY_KEY, ROOT_BUCKET)
    assert details.get("policy") == (combined if on_4_0 else None)
    validated = Outcome(nsb.validate_delivery_limit(sales.api, sales.vhost, "Sales", broker_version))
    limit = validated.noted(f"limit {details.get('delivery_limit', 'not reported (3.x: unlimited)')}")
    matrix.check(topology, "delivery limit validated, no PUT /api/policies (SetDeliveryLimitViaPolicy)", "ok", limit)


# --- conventional routing topology: the NServiceBus sequence ----------------------------------------------------


def test_sales_and_billing_do_what_an_endpoint_does_with_conventional_routing(
    conventional: Deployed, matrix: Matrix, broker_version: tuple[int, ...]
) -> None:
    """Start-up (``BrokerVerifier``), both message pumps (``MessagePump.ConnectToBroker``), Billing's subscription
    (``ConventionalRoutingTopology.SetupSubscription``), then Sales: an immediate send
    (``ConventionalRoutingTopology.Send``), an event (``ConventionalRoutingTopology.Publish``), a delayed send and a
    delayed retry to itself (``ConfirmsAwareChannel.SendMessage`` -> ``BindToDelayInfrastructure``, then the
    starting level with ``DelayInfrastructure.CalculateRoutingKey``'s key) and sends to error and audit
    (recoverability's ``RawSendInCaseOfFailure``). Each is allowed and each message arrives, none before its delay."""
    sales, billing, t = conventional.sales, conventional.billing, "conventional"
    start_up(matrix, t, sales, broker_version)
    got, sales_inbox = consume(sales, "Sales")
    matrix.check(t, "sales: basic.consume Sales (MessagePump.ConnectToBroker)", ALLOWED, got)
    got, billing_inbox = consume(billing, "Billing")
    matrix.check(t, "billing: basic.consume Billing", ALLOWED, got)
    assert sales_inbox is not None and billing_inbox is not None
    got = outcome(lambda: billing.subscribe("Billing", ORDER_PLACED))
    matrix.check(t, "billing: subscribe OrderPlaced (3 declares, 2 binds, Billing <- OrderPlaced)", ALLOWED, got)

    message, sent_at = new_id(), time.monotonic()
    got = outcome(lambda: sales.send("Billing", message))
    matrix.check(t, "sales: immediate send to Billing (publish to exchange Billing)", ALLOWED, got)
    matrix.check(t, "billing receives the send", "arrived", arrival(billing_inbox, message, sent_at, 0))

    event, sent_at = new_id(), time.monotonic()
    got = outcome(lambda: sales.publish_event(ORDER_PLACED, event))
    matrix.check(t, "sales: publish OrderPlaced (3 declares, 2 binds base <- type, publish)", ALLOWED, got)
    matrix.check(t, "billing receives OrderPlaced", "arrived", arrival(billing_inbox, event, sent_at, 0))

    delayed, retry, sent_at = new_id(), new_id(), time.monotonic()
    got = outcome(lambda: sales.delayed_send("Billing", 2, delayed))
    matrix.check(t, f"sales: delayed send 2 s to Billing (bind #.Billing, publish {DELAY_LEVEL})", ALLOWED, got)
    got = outcome(lambda: sales.delayed_send("Sales", 1, retry))
    matrix.check(t, "sales: delayed retry 1 s to Sales (bind #.Sales, publish level 00)", ALLOWED, got)
    for queue in ("error", "audit"):
        got = outcome(functools.partial(sales.send, queue, new_id()))
        matrix.check(t, f"sales: send to {queue} (publish to exchange {queue})", ALLOWED, got)
    matrix.check(t, "sales receives its delayed retry", "arrived", arrival(sales_inbox, retry, sent_at, 1))
    matrix.check(t, "billing receives the delayed send", "arrived", arrival(billing_inbox, delayed, sent_at, 2))


# --- conventional routing topology: what the grants refuse --------------------------------------------------------

Action = Callable[[EndpointClient, str], Outcome]
HTTP_401 = "HTTP 401"


def _publish_for_shipping(sales: EndpointClient, _: str) -> Outcome:
    key = routing_key(2, "Shipping")
    return outcome(lambda: sales.publish(DELAY_LEVEL, key, new_id()))


def _policy(sales: EndpointClient, _: str) -> Outcome:
    body = {"pattern": "^Sales$", "apply-to": "queues", "priority": 0, "definition": {"delivery-limit": 100000}}
    return sales.http("PUT", f"policies/{path_segment(sales.vhost)}/nsb.Sales.delivery-limit", body)


REFUSALS: list[tuple[str, str, Action]] = [
    (f"exchange.bind(Sales <- {DELIVERY}, '#') (every delayed message)", REFUSED,
     lambda s, _: outcome(lambda: s.bind_to_delay_infrastructure("Sales", "#"))),
    (f"exchange.bind(Sales <- {DELIVERY}, '#.Shipping') (another endpoint's key)", REFUSED,
     lambda s, _: outcome(lambda: s.bind_to_delay_infrastructure("Sales", "#.Shipping"))),
    (f"exchange.bind(Shipping <- {DELIVERY}, '#.Shipping') (not a destination)", REFUSED,
     lambda s, _: outcome(lambda: s.bind_to_delay_infrastructure("Shipping"))),
    ("basic.consume Billing (another endpoint's queue)", REFUSED,
     lambda s, _: consume(s, "Billing")[0]),
    (f"exchange.declare {DELAY_LEVEL} topic (active)", REFUSED,
     lambda s, _: outcome(lambda: s.channel().exchange_declare(DELAY_LEVEL, "topic", durable=True))),
    (f"exchange.declare {DELIVERY} topic (active)", REFUSED,
     lambda s, _: outcome(lambda: s.channel().exchange_declare(DELIVERY, "topic", durable=True))),
    (f"exchange.delete {DELAY_LEVEL}", REFUSED, lambda s, _: outcome(lambda: s.channel().exchange_delete(DELAY_LEVEL))),
    (f"exchange.delete {DELIVERY}", REFUSED, lambda s, _: outcome(lambda: s.channel().exchange_delete(DELIVERY))),
    (f"publish {DELAY_LEVEL} key <28 bits>.Shipping (not in sendsTo)", REFUSED, _publish_for_shipping),
    ("PUT /api/policies/{vh}/nsb.Sales.delivery-limit", HTTP_401, _policy),
]  # fmt: skip
# RabbitMQ 4.3.6 answers a vhost the user may not access as if it did not exist (404 ``not_found``), where 3.10.8
# and 4.0.5 answer 401 "User not authorised to access virtual host" (rabbit_web_dispatch_access_control
# is_authorized_vhost, which the v4.3.5 tag still has: a 4.3.6 change, measured).
VHOST_WITHOUT_ACCESS_HIDDEN_FROM = (4, 3, 6)


@pytest.mark.parametrize(("operation", "expected", "action"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_sales_is_refused_what_its_grants_leave_out(
    conventional: Deployed, matrix: Matrix, operation: str, expected: str, action: Action
) -> None:
    """Each must be refused by the check ``rabbit_channel`` makes for it: configure for declare/delete, read for
    consume, write + read + the delivery exchange's topic read for a bind (``binding_action_with_checks``), the
    level's topic write for a publish (``check_topic_authorisation``); the management API refuses a policy without
    ``policymaker`` and a vhost without access with 401."""
    matrix.check("conventional", f"sales: {operation}", expected, action(conventional.sales, conventional.other_vhost))


@also_on_rabbitmq_4_0
def test_sales_cannot_read_a_vhost_it_has_no_access_to(
    conventional: Deployed, matrix: Matrix, broker_version: tuple[int, ...]
) -> None:
    """Version-specific, kept on 4.0: 4.3.6 hides such a vhost (404), 3.10 and 4.0 refuse it (401)."""
    hidden = broker_version >= VHOST_WITHOUT_ACCESS_HIDDEN_FROM
    other = conventional.other_vhost
    got = conventional.sales.http("GET", f"queues/{path_segment(other)}/Sales")
    matrix.check(
        "conventional",
        "sales: GET /api/queues/{other vhost}/Sales (no access)",
        "HTTP 404" if hidden else HTTP_401,
        got,
    )


def test_a_cc_header_reaches_another_destination_on_3_10_only(
    rabbitmq: LocalRabbitMq, conventional: Deployed, matrix: Matrix, broker_version: tuple[int, ...]
) -> None:
    """RabbitMQ checks the topic permission of CC/BCC routing keys from 4.0.x (``rabbit_channel``
    ``check_write_permitted_on_topics``); 3.10 checks the routing key only, so there the level exchanges' topic
    write permission does not hold against a crafted header (NServiceBus itself never sets one): the copy for
    Shipping arrives."""
    on_4_0 = broker_version >= (4, 0)
    admin = pika.BlockingConnection(connection_parameters(rabbitmq.amqp_url, conventional.vhost))
    try:
        shipping = Inbox(admin, "Shipping")
        message, sent_at = new_id(), time.monotonic()
        cc = [routing_key(2, "Shipping")]
        got = outcome(lambda: conventional.sales.delayed_send("Billing", 2, message, cc=cc))
        operation = f"sales: publish {DELAY_LEVEL} <28 bits>.Billing with CC <28 bits>.Shipping"
        if on_4_0:
            matrix.check("conventional", operation, REFUSED, got)
            return
        note = "3.10 does not check CC/BCC keys: the level exchanges' topic write permission is bypassable"
        matrix.check("conventional", operation, ALLOWED, got.noted(note))
        matrix.check("conventional", "Shipping receives the CC copy", "arrived", arrival(shipping, message, sent_at, 2))
    finally:
        admin.close()


# --- direct routing topology ------------------------------------------------------------------------------------


def test_sales_and_billing_do_what_an_endpoint_does_with_direct_routing(
    direct: Deployed, matrix: Matrix, broker_version: tuple[int, ...]
) -> None:
    """The same endpoints with ``routingTopology: direct`` (``Routing/DirectRoutingTopology.cs``): sends go to the
    default exchange (``Send``), events to ``amq.topic`` (``Publish``, ``SetupSubscription``), delayed sends bind
    the destination queue (``BindToDelayInfrastructure``: ``queue.bind``). Write on ``amq.default`` is all or
    nothing, so Sales may also send to Shipping: the matrix records it as allowed, not narrowable."""
    sales, billing, t = direct.sales, direct.billing, "direct"
    start_up(matrix, t, sales, broker_version)
    got, sales_inbox = consume(sales, "Sales")
    matrix.check(t, "sales: basic.consume Sales", ALLOWED, got)
    got, billing_inbox = consume(billing, "Billing")
    matrix.check(t, "billing: basic.consume Billing", ALLOWED, got)
    assert sales_inbox is not None and billing_inbox is not None

    got = outcome(lambda: billing.subscribe_to_topic("Billing", "#"))
    matrix.check(t, "billing: subscribe IEvent (queue.bind Billing <- amq.topic, '#')", ALLOWED, got)

    message, sent_at = new_id(), time.monotonic()
    got = outcome(lambda: sales.send("Billing", message))
    matrix.check(t, "sales: immediate send to Billing (publish '' key Billing)", ALLOWED, got)
    matrix.check(t, "billing receives the send", "arrived", arrival(billing_inbox, message, sent_at, 0))

    event, sent_at = new_id(), time.monotonic()
    got = outcome(lambda: sales.publish_to_topic(ORDER_PLACED_TOPIC_KEY, event))
    matrix.check(t, f"sales: publish OrderPlaced (amq.topic, key {ORDER_PLACED_TOPIC_KEY})", ALLOWED, got)
    matrix.check(t, "billing receives OrderPlaced", "arrived", arrival(billing_inbox, event, sent_at, 0))

    delayed, sent_at = new_id(), time.monotonic()
    got = outcome(lambda: sales.delayed_send("Billing", 2, delayed))
    matrix.check(t, f"sales: delayed send 2 s to Billing (queue.bind #.Billing, publish {DELAY_LEVEL})", ALLOWED, got)
    matrix.check(t, "billing receives the delayed send", "arrived", arrival(billing_inbox, delayed, sent_at, 2))

    got = outcome(lambda: sales.send("Shipping", new_id())).noted("write on amq.default cannot be narrowed per queue")
    matrix.check(t, "sales: publish '' key Shipping (not in sendsTo)", ALLOWED, got)
    for queue in ("error", "audit"):
        got = outcome(functools.partial(sales.send, queue, new_id()))
        matrix.check(t, f"sales: send to {queue} (publish '' key {queue})", ALLOWED, got)
    got = outcome(lambda: sales.bind_to_delay_infrastructure("Sales", "#"))
    matrix.check(t, f"sales: queue.bind(Sales <- {DELIVERY}, '#')", REFUSED, got)
