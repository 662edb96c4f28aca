"""What NServiceBus declares, by name, from the model (``components.model.rabbitmq``): the objects rules compare a
declaration against. Both generations: a stack may hold v1 and v2 graphs side by side.
"""

from __future__ import annotations

from nsb_delays.components.model.rabbitmq.graph import delay_levels, delay_queue_arguments
from nsb_delays.components.model.rabbitmq.names import Generation, delivery_exchange_name, parking_name
from nsb_delays.components.model.rabbitmq.objects import BindingSpec

MODEL_EXCHANGES = {spec.name: spec for g in Generation for spec in delay_levels(g).exchanges}
MODEL_QUEUES = {spec.name: spec for g in Generation for spec in delay_levels(g).queues}
MODEL_BINDINGS_BY_SOURCE: dict[str, list[BindingSpec]] = {}
for _generation in Generation:
    for _binding in delay_levels(_generation).bindings:
        MODEL_BINDINGS_BY_SOURCE.setdefault(_binding.source, []).append(_binding)
DELIVERY_EXCHANGES = frozenset(delivery_exchange_name(g) for g in Generation)
PARKING_NAMES = frozenset(parking_name(g) for g in Generation)
# The argument naming a level queue's dead-letter target: the one level 00 sets to the delivery exchange.
DEAD_LETTER_EXCHANGE_ARGUMENT = next(
    key
    for key, value in delay_queue_arguments(0, Generation.V2).items()
    if value == delivery_exchange_name(Generation.V2)
)
