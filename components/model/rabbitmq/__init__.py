"""The RabbitMQ topology NServiceBus declares, as plain data, one module per concern.

- ``names``: the objects' and bindings' names, and the fixed choices (generation, routing topology, queue type);
- ``objects``: exchanges, queues, bindings, policies and ``Topology``;
- ``graph``: the delay graph, parking and an endpoint's objects;
- ``delivery_limits``: NServiceBus's delivery-limit policy, and the policies that reach a queue;
- ``endpoint_start``: what an endpoint checks at start with installers off, by NServiceBus.RabbitMQ release: the one
  decision on a queue's delivery limit;
- ``delivery_limit_checks``: that decision asked of a queue's records (``verify``) and of each policy or argument
  that reaches it (the pack, the check before provisioning);
- ``combined``: a stack's parking and delivery-limit policies combined, a few per vhost;
- ``policy_match``: which policy the broker applies to an object, and the effective definition, from the lists;
- ``patterns``: how the broker matches a pattern against a name (policies, permissions): the one matching rule;
- ``name_rules``: which names can work;
- ``routing``: a delayed message's routing key and path;
- ``arguments``: queue arguments as the broker stores and compares them;
- ``versions``: the supported broker versions.

Import each name from the module that defines it (``from nsb_delays.components.model.rabbitmq.names import
Generation``); this package re-exports none.
"""
