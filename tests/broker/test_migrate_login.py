"""The login ``nsb-delays migrate`` checks before it hides anything (``pipeline.environment_checks.rabbitmq_problems``)
on the real brokers: a user with the ``management`` tag and permissions on the vhost is enough, as the run needs no
more; a vhost it cannot use is named with the user, whether it is missing or only not granted.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from nsb_delays.brokers.amqp import AmqpNodes
from nsb_delays.brokers.destinations import check_destinations
from nsb_delays.brokers.management import ManagementApi, path_segment
from nsb_delays.components.model.rabbitmq.names import Generation
from nsb_delays.infra.commands.demo.servers import HOST
from nsb_delays.pipeline.environment_checks import rabbitmq_problems
from servers.rabbitmq import LocalRabbitMq
from tests.spark.conftest import provision_vhost

pytestmark = pytest.mark.broker
ENDPOINT = "Sales"


@pytest.fixture
def operator(management: ManagementApi) -> Iterator[tuple[str, str]]:
    """A user as an operator gives a migration: the management UI's tag, no administrator."""
    user, password = f"migrator-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex
    management.request("PUT", f"users/{user}", {"password": password, "tags": "management"})
    yield user, password
    management.request("DELETE", f"users/{user}")


def problems_for(rabbitmq: LocalRabbitMq, login: tuple[str, str], vhost: str) -> list[str]:
    nodes = AmqpNodes((f"amqp://{HOST}:{rabbitmq.amqp_port}",), vhost, login)  # the login: the user's
    return rabbitmq_problems(nodes, ManagementApi(rabbitmq.management_url, *login))


def test_a_management_user_with_permissions_on_the_vhost_passes(
    rabbitmq: LocalRabbitMq, management: ManagementApi, new_vhost, operator: tuple[str, str]
) -> None:
    vhost = new_vhost("migrate-login")
    provision_vhost(rabbitmq, vhost, [ENDPOINT])
    grant = {"configure": "", "write": ".*", "read": ".*"}
    management.request("PUT", f"permissions/{path_segment(vhost)}/{operator[0]}", grant)
    assert problems_for(rabbitmq, operator, vhost) == []
    # then the run checks its destinations with the same login (exchanges, bindings, queues): found, no refusal
    check_destinations(
        ManagementApi(rabbitmq.management_url, *operator), [ENDPOINT], vhost=vhost, generation=Generation.V2
    )


def test_a_vhost_the_user_has_no_permissions_on_is_named_with_the_user(
    rabbitmq: LocalRabbitMq, new_vhost, operator: tuple[str, str]
) -> None:
    vhost = new_vhost("migrate-no-grant")
    problems = problems_for(rabbitmq, operator, vhost)
    assert any(f"vhost {vhost!r} as {operator[0]!r}" in problem for problem in problems), problems  # AMQP's refusal
    assert len(problems) == 1, problems  # the management API's finding is the same vhost: not said twice
