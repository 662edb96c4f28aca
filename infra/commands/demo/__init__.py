"""``nsb-delays demo --stack dev``: the whole job on a private RabbitMQ and moto, in well under a minute.

Starts both servers on loopback (or uses a RabbitMQ given with ``--amqp-url`` and
``--management-url``); the private RabbitMQ is the newest the suite proves, Debian forky's 4.3 from the root
``make setup`` builds, or Debian's 3.10 package with ``--rabbitmq-version 3.10``. It checks the broker before
changing it, provisions the stack (the RabbitMQ side
with a real ``pulumi up`` of the program on a throwaway local state, or the definitions import where no Pulumi
CLI is found; the SQS side with CloudFormation), verifies it, sends delayed messages
to every endpoint through both transports and prints requested vs measured delay. Everything it
started is stopped on the way out, also on errors, Ctrl-C and SIGTERM; a given broker is left running.

One module a job: ``command`` (the options and the run), ``startup`` (a given broker, or the private servers
started), ``provisioning`` (checked, provisioned, verified), ``measurement`` (the delayed messages and their
table) and ``servers`` (the private RabbitMQ and moto launchers, on which the tests' servers build). The names of
the former module ``demo.py`` import from here as before.
"""

from __future__ import annotations

from .command import DEFAULT_DELAYS, demo, demo_stack, run_demo
from .measurement import SQS_POLL_SECONDS, Measured, results_table, send_rabbitmq, send_sqs
from .provisioning import (
    AMQP_PORT_TIMEOUT_SECONDS,
    CLOUDFORMATION_STACK,
    DEMO_PULUMI_STACK,
    check_amqp,
    check_amqp_port,
    check_existing,
    for_broker,
    import_definitions,
    management_api,
    provision,
    provision_rabbitmq,
    provision_sqs,
    pulumi_up,
)
from .startup import (
    NEWEST_PRIVATE_BROKER,
    PRIVATE_BROKERS,
    DemoRefused,
    ExistingRabbitMq,
    RabbitMqBroker,
    existing_rabbitmq,
    private_broker,
    private_servers,
)

__all__ = [
    "AMQP_PORT_TIMEOUT_SECONDS",
    "CLOUDFORMATION_STACK",
    "DEFAULT_DELAYS",
    "DEMO_PULUMI_STACK",
    "NEWEST_PRIVATE_BROKER",
    "PRIVATE_BROKERS",
    "SQS_POLL_SECONDS",
    "DemoRefused",
    "ExistingRabbitMq",
    "Measured",
    "RabbitMqBroker",
    "check_amqp",
    "check_amqp_port",
    "check_existing",
    "demo",
    "demo_stack",
    "existing_rabbitmq",
    "for_broker",
    "import_definitions",
    "management_api",
    "private_broker",
    "private_servers",
    "provision",
    "provision_rabbitmq",
    "provision_sqs",
    "pulumi_up",
    "results_table",
    "run_demo",
    "send_rabbitmq",
    "send_sqs",
]
