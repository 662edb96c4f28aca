"""Work against live brokers (RabbitMQ's management API and AMQP, SQS): the management client, the
provider emulation that applies recorded Pulumi resources, ``verify``'s drift check, delayed-message
delivery, and the private loopback servers the demo starts. The CLI commands in ``infra.commands``
are thin wiring over these modules; the pure model they read is ``components.model``.
"""
