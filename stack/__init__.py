"""The bottom layer: what every other package needs and that needs none of them.

``config`` reads and checks a stack's settings (``Pulumi.<stack>.yaml``), ``plan`` turns them into the
model's objects (what a stack declares).
Above it: the components (``nsb_delays.components``, whose pure model ``components.model`` sits below
everything), then ``brokers`` and ``policies``, then ``pipeline``, and ``infra`` (the program and every
command) on top; ``make lint`` checks the direction (``[tool.importlinter]`` in pyproject.toml).
"""
