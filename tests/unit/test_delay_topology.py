"""The 28-level graph as the components declare it, checked against NServiceBus's own declarations."""

from __future__ import annotations

import pytest

from nsb_delays.components import RabbitMqDelayInfrastructure
from tests.unit.helpers import BINDING, EXCHANGE, QUEUE, bindings, declared, exchanges, of_type, queues, raw_arguments

V2_ARGUMENTS = {"x-queue-type": "quorum", "x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"}
V1_ARGUMENTS = {"x-queue-mode": "lazy"}
PREFIX = {"v1": "nsb.delay-level-", "v2": "nsb.v2.delay-level-"}
DELIVERY = {"v1": "nsb.delay-delivery", "v2": "nsb.v2.delay-delivery"}


@pytest.fixture(scope="module", params=["v1", "v2"])
def graph(request: pytest.FixtureRequest) -> tuple[str, list]:
    generation = request.param
    # NServiceBus's graph alone; the parking exchange and queue that come with it by default: test_parking.py
    return generation, declared(
        lambda: RabbitMqDelayInfrastructure("delays", {"generation": generation, "park_unroutable": False})
    )


def level(generation: str, n: int) -> str:
    return f"{PREFIX[generation]}{n:02d}"


def test_counts(graph: tuple[str, list]) -> None:
    _, resources = graph
    assert len(of_type(resources, EXCHANGE)) == 28 + 1
    assert len(of_type(resources, QUEUE)) == 28
    assert len(of_type(resources, BINDING)) == 28 + 27 + 1


def test_every_exchange_is_a_durable_topic(graph: tuple[str, list]) -> None:
    generation, resources = graph
    expected = {level(generation, n) for n in range(28)} | {DELIVERY[generation]}
    declared_exchanges = exchanges(resources)
    assert set(declared_exchanges) == expected
    for settings in declared_exchanges.values():
        assert settings["type"] == "topic"
        assert settings["durable"] is True
        assert settings.get("autoDelete", False) is False


def test_every_level_queue_has_nservicebus_arguments_with_their_types(graph: tuple[str, list]) -> None:
    generation, resources = graph
    declared_queues = queues(resources)
    assert set(declared_queues) == {level(generation, n) for n in range(28)}
    for n in range(28):
        queue = declared_queues[level(generation, n)]
        assert queue.settings()["durable"] is True
        assert "arguments" not in queue.settings(), "numeric arguments must not go through the string-only map"
        arguments = raw_arguments(queue)
        ttl = arguments.pop("x-message-ttl")
        assert type(ttl) is int and ttl == 2**n * 1000
        assert arguments.pop("x-dead-letter-exchange") == (level(generation, n - 1) if n else DELIVERY[generation])
        assert "x-dead-letter-routing-key" not in arguments
        # v1: NServiceBus leaves the type to the broker; the program makes the default explicit
        # (model.queue_arguments_as_stored: RabbitMQ 4.x stores it and a provider read returns it)
        explicit_type = {} if generation == "v2" else {"x-queue-type": "classic"}
        assert arguments == (V2_ARGUMENTS if generation == "v2" else V1_ARGUMENTS | explicit_type)
    assert raw_arguments(declared_queues[level(generation, 27)])["x-message-ttl"] == 134_217_728_000


def test_bindings_match_nservicebus(graph: tuple[str, list]) -> None:
    generation, resources = graph
    expected = set()
    for n in range(28):
        skip = "*." * (27 - n)
        expected.add((level(generation, n), level(generation, n), "queue", skip + "1.#"))
        lower = level(generation, n - 1) if n else DELIVERY[generation]
        expected.add((level(generation, n), lower, "exchange", skip + "0.#"))
    assert bindings(resources) == expected
    assert (level(generation, 0), DELIVERY[generation], "exchange", "*." * 27 + "0.#") in expected


def test_level_27_and_level_0_keys() -> None:
    resources = declared(lambda: RabbitMqDelayInfrastructure("delays", {}))
    keys = {(s, d): k for s, d, _, k in bindings(resources)}
    assert keys[("nsb.v2.delay-level-27", "nsb.v2.delay-level-27")] == "1.#"
    assert keys[("nsb.v2.delay-level-26", "nsb.v2.delay-level-26")] == "*.1.#"
    assert keys[("nsb.v2.delay-level-00", "nsb.v2.delay-level-00")] == "*." * 27 + "1.#"


def test_delay_queues_are_protected_by_default_and_can_opt_out() -> None:
    guarded = queues(declared(lambda: RabbitMqDelayInfrastructure("delays", {})))
    assert all(q.protect and q.retain_on_delete for q in guarded.values())
    unguarded = queues(declared(lambda: RabbitMqDelayInfrastructure("delays", {"protect_delay_queues": False})))
    assert not any(q.protect or q.retain_on_delete for q in unguarded.values())


def test_v1_and_v2_side_by_side_do_not_collide() -> None:
    def both() -> None:
        RabbitMqDelayInfrastructure("v1", {"generation": "v1"})
        RabbitMqDelayInfrastructure("v2", {"generation": "v2"})

    resources = declared(both)
    names = [(r.type, r.inputs["name"]) for r in resources if r.type in (EXCHANGE, QUEUE)]
    assert len(names) == len(set(names)) == 2 * (29 + 28 + 2)  # each with its own parking exchange and queue
    assert len({r.urn for r in resources}) == len(resources), "URNs (type + logical name) must be unique per stack"


def test_unknown_generation_is_refused_before_anything_is_declared() -> None:
    with pytest.raises(ValueError, match="generation: unknown value 'v3' \\(expected one of v1, v2\\)"):
        declared(lambda: RabbitMqDelayInfrastructure("delays", {"generation": "v3"}))
