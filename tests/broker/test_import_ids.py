"""The ``pulumi import`` ids the components compute match what the live broker reports."""

from __future__ import annotations

from urllib.parse import quote

from nsb_delays.components.encoding import binding_properties_key
from nsb_delays.components.model.rabbitmq.graph import parking_topology
from nsb_delays.components.model.rabbitmq.names import Generation, endpoint_binding_key, queue_binding_key
from nsb_delays.stack.config import parse_stack_config
from servers.rabbitmq import LocalRabbitMq
from tests.provisioning import provision_rabbitmq


def test_binding_properties_keys_match_the_management_api(
    rabbitmq: LocalRabbitMq, delivery_limit_policies: bool
) -> None:
    vhost = "import-ids"
    api = rabbitmq.api()
    base = f"{rabbitmq.management_url}/api"
    assert api.put(f"{base}/vhosts/{vhost}").status_code in (201, 204)
    assert api.put(
        f"{base}/permissions/{vhost}/{rabbitmq.username}", json={"configure": ".*", "write": ".*", "read": ".*"}
    ).ok
    config = parse_stack_config(
        {"rabbitmq": {"vhost": vhost, "endpoints": ["Sales", "a.b"], "deliveryLimitPolicies": delivery_limit_policies}}
    )
    provision_rabbitmq(rabbitmq.management_url, config)
    reported = api.get(f"{base}/bindings/{quote(vhost, safe='')}").json()
    ours = [b for b in reported if b["source"]]  # skip the default exchange's implicit bindings
    # delay graph + (fanout + delivery binding) per endpoint + error/audit + the parking queue's binding
    assert len(ours) == 56 + 2 * 2 + 2 + len(parking_topology(Generation.V2).bindings)
    for binding in ours:
        assert binding["properties_key"] == binding_properties_key(binding["routing_key"]), binding
    assert {b["routing_key"] for b in ours} >= {endpoint_binding_key("a.b"), queue_binding_key(0), ""}
