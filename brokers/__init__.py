"""Work against live brokers (RabbitMQ's management API and AMQP, SQS): the management client, ``verify``'s drift
check, delayed-message delivery, the moves of delayed messages (``move_plan``: what a move will do and what it
refuses; ``delay_scan``: reading every level before anything moves; ``delay_mover``: moving them), parking, status.
The CLI commands in ``infra.commands`` are thin wiring over these modules (the demo's private servers are its own:
``infra.commands.demo.servers``); the pure model they read is ``components.model``.
"""
