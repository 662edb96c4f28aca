"""What NServiceBus declares, by name, from the model (``components.model.rabbitmq``): the objects rules compare a
declaration against. Both generations: a stack may hold v1 and v2 graphs side by side.
"""

from __future__ import annotations

from nsb_delays.components.model import rabbitmq as rmq

MODEL_EXCHANGES = {spec.name: spec for g in rmq.Generation for spec in rmq.delay_levels(g).exchanges}
MODEL_QUEUES = {spec.name: spec for g in rmq.Generation for spec in rmq.delay_levels(g).queues}
MODEL_BINDINGS_BY_SOURCE: dict[str, list[rmq.BindingSpec]] = {}
for _generation in rmq.Generation:
    for _binding in rmq.delay_levels(_generation).bindings:
        MODEL_BINDINGS_BY_SOURCE.setdefault(_binding.source, []).append(_binding)
DELIVERY_EXCHANGES = frozenset(rmq.delivery_exchange_name(g) for g in rmq.Generation)
PARKING_NAMES = frozenset(rmq.parking_name(g) for g in rmq.Generation)
# The argument naming a level queue's dead-letter target: the one level 00 sets to the delivery exchange.
DEAD_LETTER_EXCHANGE_ARGUMENT = next(
    key
    for key, value in rmq.delay_queue_arguments(0, rmq.Generation.V2).items()
    if value == rmq.delivery_exchange_name(rmq.Generation.V2)
)
