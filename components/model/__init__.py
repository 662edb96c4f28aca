"""The pure topology model: names, arguments, keys and send plans. No Pulumi, no I/O.

Everything else in the package is an adapter that reads these facts and never re-derives one.
"""

from . import rabbitmq, sqs
from .rabbitmq.graph import delay_levels, endpoint_topology, shared_queues
from .rabbitmq.names import delay_level_name, delivery_exchange_name
from .rabbitmq.objects import Topology
from .rabbitmq.routing import DelayError, DelayPath, Hop, delay_path, first_exchange, first_level, routing_key

__all__ = [
    "DelayError",
    "DelayPath",
    "Hop",
    "Topology",
    "delay_level_name",
    "delay_levels",
    "delay_path",
    "delivery_exchange_name",
    "endpoint_topology",
    "first_exchange",
    "first_level",
    "rabbitmq",
    "routing_key",
    "shared_queues",
    "sqs",
]
