"""``policy_match`` agrees with the broker: the policy (and operator policy) it computes for each exchange and queue,
and the effective definition, against ``rabbitmqctl list_exchanges`` / ``list_queues`` on 3.10 and 4.0.

Overlapping patterns, priorities, apply-tos (the queue-type ones on 4.0 only: 3.10 refuses them), definitions a
queue type refuses (a ``delivery-limit`` policy never applies to a classic queue or a stream), an operator policy
merged per key, and a non-ASCII name matched on its bytes. No two policies tie for any object (a tie's outcome is
the store's order). The policies are set before the objects are declared, and rabbitmqctl reads the objects'
records (``rabbit_policy:name/1``, ``effective_definition/1``), not statistics: nothing to wait for.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

from nsb_delays.brokers.management import ManagementApi, path_segment
from nsb_delays.brokers.verify import broker_policies
from nsb_delays.components.model.rabbitmq.policy_match import PolicyMatcher
from servers.rabbitmq import LocalRabbitMq

POLICIES: list[tuple[str, str, str, int, dict[str, Any]]] = [
    ("all-low", "o", "all", 0, {"alternate-exchange": "ae-low"}),
    ("orders-exchanges", "^orders", "exchanges", 5, {"alternate-exchange": "ae-high"}),
    ("eu-queues", r"\.eu$", "queues", 3, {"max-length": 10}),
    ("sales-limit", "sales", "queues", 4, {"delivery-limit": 7}),  # not for classic queues or streams
    ("log-age", "log", "queues", 6, {"max-age": "1D"}),  # streams only
    ("bytes-one", "^caf.$", "all", 10, {"max-length": 1}),  # 'é' is two bytes: no match
    ("bytes-two", "^caf..$", "all", 9, {"max-length": 2}),
]
POLICIES_4_0 = [
    ("eu-quorum", "eu", "quorum_queues", 8, {"max-length": 3}),
    ("orders-classic", "orders", "classic_queues", 7, {"message-ttl": 1000}),
    ("audit-streams", "audit", "streams", 11, {"max-age": "2D"}),
]
OPERATOR_POLICIES = [("cap", ".", "queues", 0, {"max-length": 5, "delivery-limit": 50})]
EXCHANGES = ["orders.eu", "orders", "billing.eu", "ae-low", "zz"]
QUEUES = {
    "classic": ["sales.eu", "orders.eu", "logins", "café", "zz"],
    "quorum": ["sales-q.eu", "orders-q", "log-q", "cafè"],
    "stream": ["log-s", "audit-s", "sales-s.eu"],
}


def body(pattern: str, apply_to: str, priority: int, definition: dict[str, Any]) -> dict[str, Any]:
    return {"pattern": pattern, "apply-to": apply_to, "priority": priority, "definition": definition}


def listed(rabbitmq: LocalRabbitMq, what: str, vhost: str, *columns: str) -> dict[str, dict[str, Any]]:
    output = rabbitmq.ctl("--quiet", what, "-p", vhost, "--formatter", "json", *columns)
    return {row["name"]: row for row in json.loads(output)}


# rabbitmqctl list_queues has no operator_policy or effective_policy_definition column (3.10.8 refuses both): the
# broker's own records, read by rabbit_policy:name_op/1 and effective_definition/1, JSON in base64 (ASCII on stdout).
RECORDS = """
base64:encode(rabbit_json:encode([
  #{name => element(4, amqqueue:get_name(Q)),
    policy => rabbit_policy:name(Q),
    operator_policy => rabbit_policy:name_op(Q),
    definition => case rabbit_policy:effective_definition(Q) of
                    undefined -> #{};
                    D -> maps:from_list(rabbit_data_coercion:to_list(D))
                  end}
  || Q <- rabbit_amqqueue:list(<<"VHOST">>)])).
"""


def queue_records(rabbitmq: LocalRabbitMq, vhost: str) -> dict[str, dict[str, Any]]:
    output = rabbitmq.ctl("--quiet", "eval", RECORDS.replace("VHOST", vhost))
    encoded = re.fullmatch(r'\s*<<"([A-Za-z0-9+/=]*)">>\s*', output)
    assert encoded, output
    return {row["name"]: row for row in json.loads(base64.b64decode(encoded.group(1)))}


def shown_policy(value: Any) -> str | None:
    """rabbitmqctl shows no policy as an empty string (or 'none'); the model as None."""
    return None if value in ("", "none", None) else str(value)


def as_dict(value: Any) -> dict[str, Any]:
    """An effective definition as rabbitmqctl's JSON shows it: a map, a list of pairs, or empty."""
    if isinstance(value, list):
        return {str(key): item for key, item in value}
    return dict(value or {})


def test_the_computed_policies_are_the_brokers(
    rabbitmq: LocalRabbitMq, management: ManagementApi, new_vhost, broker_version: tuple[int, ...]
) -> None:
    vhost = new_vhost("policy-match")
    segment = path_segment(vhost)
    policies = POLICIES + (POLICIES_4_0 if broker_version >= (4, 0, 0) else [])
    for name, *spec in policies:
        management.request("PUT", f"policies/{segment}/{name}", body(*spec))  # type: ignore[arg-type]
    for name, *spec in OPERATOR_POLICIES:
        management.request("PUT", f"operator-policies/{segment}/{name}", body(*spec))  # type: ignore[arg-type]
    for exchange in EXCHANGES:
        management.request("PUT", f"exchanges/{segment}/{path_segment(exchange)}", {"type": "topic", "durable": True})
    for kind, names in QUEUES.items():
        for queue in names:
            arguments = {"x-queue-type": kind}
            management.request(
                "PUT", f"queues/{segment}/{path_segment(queue)}", {"durable": True, "arguments": arguments}
            )
    matcher = PolicyMatcher(
        broker_policies(management.policies(vhost)),
        broker_policies(management.operator_policies(vhost), True),
        broker_version,
    )
    exchanges = listed(rabbitmq, "list_exchanges", vhost, "name", "policy")
    computed = {name: matcher.applied("exchange", name) for name in EXCHANGES}
    assert {name: shown_policy(exchanges[name]["policy"]) for name in EXCHANGES} == {
        name: applied.user.name for name, applied in computed.items()
    }
    assert all(applied.determined for applied in computed.values())
    queues = listed(rabbitmq, "list_queues", vhost, "name", "policy")
    records = queue_records(rabbitmq, vhost)
    broker = {
        name: (
            shown_policy(queues[name]["policy"]),
            shown_policy(records[name]["operator_policy"]),
            as_dict(records[name]["definition"]),
        )
        for names in QUEUES.values()
        for name in names
    }
    assert {name: shown_policy(records[name]["policy"]) for name in broker} == {n: p for n, (p, _, _) in broker.items()}
    ours = {}
    for kind, names in QUEUES.items():
        for name in names:
            applied = matcher.applied("queue", name, kind)
            ours[name] = (applied.user.name, applied.operator.name, dict(applied.definition or {}))
    assert ours == broker
    # the case is not trivial: every object has a policy but 'zz', and the rules pick differently per type
    assert broker["sales.eu"][0] == "eu-queues" and broker["sales-q.eu"][0] != "eu-queues"
    assert broker["café"][0] == "bytes-two" and broker["log-s"][0] == "log-age" and broker["logins"][0] != "log-age"
