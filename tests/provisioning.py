"""Provisioning a stack for tests whose subject is not Pulumi: the package's own routes for teams without Pulumi
(``nsb-delays demo``'s definitions import and CloudFormation), real on a real broker and in moto.

What ``pulumi up`` itself declares is proven by the real engine in ``tests/engine`` (including that it
leaves the same objects as the definitions import: ``test_project_program.py``).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from nsb_delays.brokers.management import ManagementApi
from nsb_delays.components.model.rabbitmq.versions import broker_version_of, parse_reported_broker_version
from nsb_delays.infra.commands.demo.provisioning import import_definitions, provision_sqs
from nsb_delays.infra.pulumi_engine import LocalStack, provider_credentials
from nsb_delays.stack.config import BROKER_VERSION_KEY, NAMESPACE, UNNAMED_STACK, StackConfig
from servers.rabbitmq import LocalMoto
from tests.engine.conftest import require_pulumi


def provision_rabbitmq(
    management_url: str, stack: StackConfig, username: str = "guest", password: str = "guest"
) -> None:
    """The stack's RabbitMQ side on the broker behind ``management_url`` (its vhost created when missing)."""
    import_definitions(ManagementApi(management_url, username, password), stack)


def provision_sqs_queues(moto: LocalMoto, stack: StackConfig) -> dict[str, str]:
    """The stack's SQS queues as a CloudFormation stack of their own in moto; queue name -> URL."""
    assert stack.sqs is not None
    client = provision_sqs(moto, stack, "test", cloudformation_stack=f"nsb-delays-test-{uuid.uuid4().hex[:8]}")
    names = [spec.name for _endpoint, spec in (stack.sqs).queue_specs()]
    return {name: client.get_queue_url(QueueName=name)["QueueUrl"] for name in names}


def pulumi_up(management_url: str, username: str, password: str, section: Mapping[str, Any]) -> str:
    """A real ``pulumi up`` of the project's program for a stack whose ``nsb-delays:rabbitmq`` is ``section``, on
    the broker behind ``management_url`` (the engine ``make setup`` built, a throwaway local state); its output.
    A failed up raises ``PulumiFailed`` with pulumi's error lines."""
    # the stack is a throwaway one: its combined policies take the name a config parsed without a stack name gives;
    # its brokerVersion is the broker's MAJOR.MINOR, as the program requires (infra/broker_check.py): the sections
    # start from the dev stack's "4.0" on every broker version
    reported = ManagementApi(management_url, username, password).overview()["rabbitmq_version"]
    version = broker_version_of(parse_reported_broker_version(reported))
    named = {"policyGroup": UNNAMED_STACK, **section, BROKER_VERSION_KEY: version}
    config = {"rabbitmq:endpoint": management_url, f"{NAMESPACE}:rabbitmq": named}
    # one state write at the end instead of one per step (a DIY backend's cost grows with the square of the stack:
    # bench/pulumi.py); these tests check what the program declares, tests/engine the default engine behaviour
    env = provider_credentials(username, password) | {"PULUMI_SKIP_CHECKPOINTS": "true"}
    with LocalStack(require_pulumi(), f"test-{uuid.uuid4().hex[:8]}", config, env) as stack:
        return stack.up()
