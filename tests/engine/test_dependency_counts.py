"""What a resource waits for, in a stack of 1,000 endpoints (issue 51): the engine writes each resource's
``dependencies`` into the stack's state, and a DIY backend writes the whole state after every step. Each resource waits
for what it uses: a binding for its ends (by its inputs), a combined policy for the queues or exchanges it applies to and
the policy before it, a user for the endpoint queues it uses. No endpoint waits for the whole delay graph (117
resources each, 125 dependency entries per endpoint before).

Under Pulumi's mocks, what the program registers is what the engine writes (``RegisterResourceRequest.dependencies``);
in the engine tier because a recording of 1,000 endpoints takes 10 to 30 s, over ``make unit``'s budget.
"""

from __future__ import annotations

from collections import Counter

from nsb_delays.components.recording import RecordedResource
from nsb_delays.infra.program import record_stack
from nsb_delays.stack.config import parse_stack_config

ENDPOINTS = 1000
WITH_USERS = 500  # every other endpoint logs in as a user of its own, sending to the endpoint before it
MOST_PER_ENDPOINT = 10


def stack_of_1000_endpoints() -> list[RecordedResource]:
    endpoints: list[object] = []
    for i in range(ENDPOINTS):
        name = f"Endpoint{i:05d}"
        user = {"passwordKey": f"password{i}", "sendsTo": [f"Endpoint{i - 1:05d}"]} if i % 2 else None
        endpoints.append({"name": name, **({"user": user} if user else {})})
    passwords = {f"password{i}": {"secure": "v1:cA=="} for i in range(1, ENDPOINTS, 2)}
    config = parse_stack_config({"rabbitmq": {"brokerVersion": "4.3", "endpoints": endpoints}, **passwords}, "big")
    return record_stack(config, stack="big")


def test_a_1000_endpoint_stack_holds_at_most_10_dependency_entries_per_endpoint() -> None:
    resources = stack_of_1000_endpoints()
    dependencies = sum(len(r.dependencies) for r in resources)
    assert dependencies / ENDPOINTS <= MOST_PER_ENDPOINT, (
        f"{dependencies / ENDPOINTS:.1f} dependency entries per endpoint"
    )
    by_type = Counter(r.type.rpartition(":")[2] for r in resources for _ in r.dependencies)
    # what waits: bindings for their ends, the combined policies for their objects, users for their queues, a user's
    # permissions for the user (their input)
    assert set(by_type) == {"Binding", "Policy", "RabbitMqEndpointUser", "Permissions", "TopicPermissions"}, by_type
    endpoints = [r for r in resources if r.type == "nsb-delays:index:RabbitMqEndpoint"]
    assert len(endpoints) == ENDPOINTS and not any(r.dependencies for r in endpoints)
    users = [r for r in resources if r.type == "nsb-delays:index:RabbitMqEndpointUser"]
    assert len(users) == WITH_USERS and max(len(r.dependencies) for r in users) == 2  # its queue, the one it sends to
