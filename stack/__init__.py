"""The stack's config and what it declares, read from the model alone (no Pulumi, no I/O client).

``plan`` holds each section as the settings of the components it declares; ``parsing`` checks a stack's config (or a
transport component's inputs) into that plan; ``stack_file`` finds and reads ``Pulumi.<stack>.yaml``; ``keys`` are the
config's keys, from the settings' declarations; ``config`` gives every one of these names from one place.
``discovery`` reads what NServiceBus left on a broker back as a stack config; ``redaction`` keeps passwords out of the
URLs a message shows.
Below it: the pure model (``nsb_delays.components.model``). Above it: the Pulumi components, which declare a plan
(``nsb_delays.components``), then ``brokers`` and ``policies``, then ``pipeline``, and ``infra`` (the program and every
command) on top; ``make lint`` checks the direction (``[tool.importlinter]`` in pyproject.toml).
"""
