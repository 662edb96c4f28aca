"""Route the model's keys through the *recorded* resources (not the model's path function).

The simulator (``tests/simulated_broker.py``, not installed) applies RabbitMQ's rules: topic matching, exchange-to-exchange
bindings, TTL then dead-lettering with the original key. Whatever delay and endpoint we pick, the
message must reach exactly that endpoint after exactly that many seconds.
"""

from __future__ import annotations

import string
from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsb_delays.components import RabbitMqDelayInfrastructure, RabbitMqEndpoint
from nsb_delays.components.model.rabbitmq.name_rules import shadowing_addresses
from nsb_delays.components.model.rabbitmq.names import LEVEL_COUNT
from nsb_delays.components.model.rabbitmq.routing import MAX_DELAY_SECONDS, first_exchange, routing_key
from nsb_delays.components.recording import record
from nsb_delays.infra.program import record_stack
from nsb_delays.stack.config import parse_stack_config
from tests.simulated_broker import Graph, deliver, topic_matches

WORD = st.text(string.ascii_letters + string.digits + "-_", min_size=1, max_size=12)
ENDPOINT_NAME = st.lists(WORD, min_size=1, max_size=4).map(".".join)
DELAY = st.integers(min_value=0, max_value=MAX_DELAY_SECONDS)


@cache
def delay_graph(generation: str) -> list:
    return record(lambda: RabbitMqDelayInfrastructure("d", {"generation": generation}))


def graph_with(endpoints: list[str], generation: str = "v2", topology: str = "conventional") -> Graph:
    def program() -> None:
        for i, name in enumerate(endpoints):
            RabbitMqEndpoint(f"ep{i}", {"endpoint": name, "generation": generation, "routing_topology": topology})

    return Graph.from_recorded(delay_graph(generation) + record(program))


def send(graph: Graph, delay: int, destination: str, generation: str = "v2") -> list[tuple[str, float]]:
    deliveries = deliver(graph, first_exchange(delay, generation), routing_key(delay, destination))
    return [(d.queue, d.at_seconds) for d in deliveries]


@pytest.mark.parametrize(
    ("pattern", "key", "matches"),
    [
        ("1.#", "1.0.dest", True),
        ("*.1.#", "1.0.dest", False),
        ("#.a.b", "0.a.b", True),
        ("#.a.b", "0.x.a.b", True),
        ("#.a.b", "0.a.b.c", False),
        ("#", "", True),
        ("*", "a.b", False),
        ("a.#.b", "a.b", True),
        ("", "", True),
    ],
)
def test_topic_matching(pattern: str, key: str, matches: bool) -> None:
    assert topic_matches(pattern, key) is matches


@pytest.mark.parametrize(("generation", "topology"), [("v2", "conventional"), ("v2", "direct"), ("v1", "conventional")])
@pytest.mark.parametrize("delay", [0, 1, 2, 3, 5, 10, 13, 900, 1925, MAX_DELAY_SECONDS])
def test_seed_delays_reach_the_endpoint_on_time(generation: str, topology: str, delay: int) -> None:
    graph = graph_with(["Sales", "Billing"], generation, topology)
    assert send(graph, delay, "Sales", generation) == [("Sales", float(delay))]


def test_the_whole_dev_stack_routes() -> None:
    config = parse_stack_config(
        {"rabbitmq": {"endpoints": ["Sales", {"name": "Billing", "instanceDiscriminators": ["blue"]}]}}
    )
    graph = Graph.from_recorded(record_stack(config))
    assert send(graph, 10, "Billing-blue") == [("Billing-blue", 10.0)]
    assert send(graph, 0, "error") == [], "error is not bound to the delivery exchange"


POOL = ("Sales", "Billing", "Billing-blue", "team.orders", "eu.west.shipping", "0", "x_1")


@cache
def pool_graph() -> Graph:
    assert shadowing_addresses(POOL) == []
    return graph_with(list(POOL))


@settings(max_examples=300, deadline=None)
@given(delay=DELAY, pick=st.integers(min_value=0))
def test_any_delay_reaches_exactly_its_endpoint_after_exactly_that_long(delay: int, pick: int) -> None:
    destination = POOL[pick % len(POOL)]
    assert send(pool_graph(), delay, destination) == [(destination, float(delay))]


@settings(max_examples=40, deadline=None)
@given(delay=DELAY, endpoints=st.lists(ENDPOINT_NAME, min_size=1, max_size=5, unique=True), pick=st.integers(0))
def test_random_valid_endpoint_names(delay: int, endpoints: list[str], pick: int) -> None:
    graph = graph_with(endpoints)
    destination = endpoints[pick % len(endpoints)]
    expected = {destination} | {a for a, b in shadowing_addresses(endpoints) if b == destination}
    arrivals = send(graph, delay, destination)
    assert {queue for queue, _ in arrivals} == expected
    assert {at for _, at in arrivals} == {float(delay)}
    if not shadowing_addresses(endpoints):
        assert arrivals == [(destination, float(delay))]


def test_dotted_names_finding_a_suffix_endpoint_receives_the_longer_ones_messages() -> None:
    """NServiceBus binds ``#.a.b``; ``#`` also swallows ``x``, so ``a.b`` gets ``x.a.b``'s delayed messages.

    The stack config refuses such pairs (see test_config); this shows why.
    """
    graph = graph_with(["a.b", "x.a.b"])
    assert send(graph, 7, "x.a.b") == [("a.b", 7.0), ("x.a.b", 7.0)]
    assert send(graph, 7, "a.b") == [("a.b", 7.0)]


def test_bit_word_names_finding_0_x_receives_x_messages_with_an_even_delay() -> None:
    graph = graph_with(["x", "0.x"])
    assert send(graph, 4, "x") == [("0.x", 4.0), ("x", 4.0)]
    assert send(graph, 5, "x") == [("x", 5.0)]


def shadowing_by_every_pair(addresses: list[str]) -> list[tuple[str, str]]:
    """The rule of ``shadowing_addresses`` checked on every ordered pair: the reference its suffix lookup must match."""
    pairs = []
    for a in sorted(set(addresses)):
        for b in sorted(set(addresses) - {a}):
            head = a[: -len(b) - 1]
            bit_words = all(word in ("0", "1") for word in head.split("."))
            if b.endswith("." + a) or (a.endswith("." + b) and head.count(".") < LEVEL_COUNT and bit_words):
                pairs.append((a, b))
    return pairs


BIT_OR_NAME = st.sampled_from(["0", "1", "a", "b", "0.1", "1.1.0"])


@settings(max_examples=300, deadline=None)
@given(
    names=st.lists(st.lists(BIT_OR_NAME, min_size=1, max_size=5).map(".".join), max_size=12),
    bits=st.integers(min_value=LEVEL_COUNT - 2, max_value=LEVEL_COUNT + 1),
)
def test_shadowing_addresses_finds_every_pair_the_rule_names(names: list[str], bits: int) -> None:
    """Suffix lookups (linear in the addresses) find exactly the pairs the rule names, a bit-word head of up to 29
    words included (28 words shadow: a delayed key has 28 bit words)."""
    names += [".".join(["0"] * bits + [names[0]])] if names else []
    assert shadowing_addresses(names) == shadowing_by_every_pair(names)
