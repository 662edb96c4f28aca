"""The RabbitMQ topology NServiceBus declares, as plain data, one module per concern.

- ``names``: the objects' and bindings' names, and the fixed choices (generation, routing topology, queue type);
- ``objects``: exchanges, queues, bindings, policies and ``Topology``;
- ``graph``: the delay graph, parking and an endpoint's objects;
- ``delivery_limits``: NServiceBus's delivery-limit policy and its broker verifier's rules;
- ``endpoint_start``: what an endpoint checks at start with installers off, by NServiceBus.RabbitMQ release;
- ``combined``: a stack's parking and delivery-limit policies combined, a few per vhost;
- ``policy_match``: which policy the broker applies to an object, and the effective definition, from the lists;
- ``name_rules``: which names can work;
- ``routing``: a delayed message's routing key and path;
- ``arguments``: queue arguments as the broker stores and compares them;
- ``versions``: the supported broker versions.

Everything is importable from here too (``from nsb_delays.components.model import rabbitmq as rmq``).
"""

from . import (
    arguments,
    combined,
    delivery_limits,
    endpoint_start,
    graph,
    name_rules,
    names,
    objects,
    policy_match,
    routing,
    versions,
)
from .arguments import *  # noqa: F403
from .combined import *  # noqa: F403
from .delivery_limits import *  # noqa: F403
from .endpoint_start import *  # noqa: F403
from .graph import *  # noqa: F403
from .name_rules import *  # noqa: F403
from .names import *  # noqa: F403
from .objects import *  # noqa: F403
from .policy_match import *  # noqa: F403
from .routing import *  # noqa: F403
from .versions import *  # noqa: F403

__all__ = [
    *names.__all__,
    *objects.__all__,
    *versions.__all__,
    *arguments.__all__,
    *delivery_limits.__all__,
    *endpoint_start.__all__,
    *policy_match.__all__,
    *graph.__all__,
    *combined.__all__,
    *routing.__all__,
    *name_rules.__all__,
]
