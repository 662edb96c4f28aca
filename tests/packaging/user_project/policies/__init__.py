"""The user's own `policies` package: it must neither shadow `nsb_delays.policies` nor be shadowed by it."""

OWNER = "user project"


class RabbitMqEndpoint:
    """Same name as `nsb_delays.components.RabbitMqEndpoint`, unrelated to it."""

    def __init__(self, name: str) -> None:
        self.name = name
