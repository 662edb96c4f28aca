"""The JSON formats as documents: Python dicts and lists, read from the model, written by ``json.dumps``.

``definitions_document``: what ``rabbitmqctl import_definitions`` (or ``POST /api/definitions``) takes;
``cloudformation_document``: a CloudFormation template. Every value is read from ``components.model``
(through the stack config's settings); the only things added are the formats' own structure (definitions' ``vhost`` on
every object, CloudFormation logical ids and outputs). Keys are in the order RabbitMQ and AWS document them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from nsb_delays.components.model import permissions, sqs
from nsb_delays.components.model.rabbitmq.objects import Topology
from nsb_delays.stack.config import StackConfig


def json_text(document: Mapping[str, Any]) -> str:
    """The file: two-space indentation, non-ASCII names as they are, a final newline."""
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def definitions_document(
    stack: StackConfig, stack_name: str, passwords: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The topology, and each endpoint user's permissions and topic permissions; the users themselves only with
    ``passwords`` (user -> password): a definitions import of a user without a password clears the password of an
    existing one (``rabbit_auth_backend_internal:put_user``), so a file without them must not carry users."""
    config = stack.rabbitmq
    assert config is not None
    grants = config.grants
    if passwords is not None:
        check_passwords([grant.user for grant in grants], passwords)
    document: dict[str, Any] = {}
    if passwords is not None and grants:
        document["users"] = [
            {
                "name": grant.user,
                "password_hash": permissions.password_hash(passwords[grant.user]),
                "hashing_algorithm": permissions.HASHING_ALGORITHM,
                "tags": ",".join(grant.tags),  # RabbitMQ 3.10 reads a comma-separated string; 4.x takes it too
            }
            for grant in grants
        ]
    document |= topology_definitions(config.topology, config.vhost)
    if grants:
        document |= permission_definitions(grants, config.vhost)
    return document


def check_passwords(users: Sequence[str], passwords: Mapping[str, str]) -> None:
    """A password for each endpoint user of the stack and nothing else (``ValueError`` naming what is off)."""
    missing = sorted(user for user in users if user not in passwords)
    unknown = sorted(set(passwords) - set(users))
    parts = [f"missing {', '.join(missing)}"] if missing else []
    parts += [f"not a user of this stack: {', '.join(unknown)}"] if unknown else []
    if parts:
        raise ValueError(
            "--passwords must give a password for each endpoint user of the stack and nothing else: " + "; ".join(parts)
        )


def topology_definitions(topology: Topology, vhost: str) -> dict[str, Any]:
    """``vhosts``, ``exchanges``, ``queues``, ``bindings`` and ``policies`` of the definitions format."""
    return {
        "vhosts": [{"name": vhost}],
        "exchanges": [
            {
                "name": exchange.name,
                "vhost": vhost,
                "type": exchange.type,
                "durable": exchange.durable,
                "auto_delete": exchange.auto_delete,
                "internal": False,
                "arguments": {},
            }
            for exchange in topology.exchanges
        ],
        "queues": [
            {
                "name": queue.name,
                "vhost": vhost,
                "durable": queue.durable,
                "auto_delete": queue.auto_delete,
                "arguments": queue.arguments,
            }
            for queue in topology.queues
        ],
        "bindings": [
            {
                "source": binding.source,
                "vhost": vhost,
                "destination": binding.destination,
                "destination_type": binding.destination_type,
                "routing_key": binding.routing_key,
                "arguments": {},
            }
            for binding in topology.bindings
        ],
        "policies": [
            {
                "vhost": vhost,
                "name": policy.name,
                "pattern": policy.pattern,
                "apply-to": policy.apply_to,
                "definition": policy.definition,
                "priority": policy.priority,
            }
            for policy in topology.policies
        ],
    }


def permission_definitions(grants: Sequence[permissions.UserGrants], vhost: str) -> dict[str, Any]:
    """Each endpoint user's ``permissions`` on the vhost and ``topic_permissions`` per exchange."""
    return {
        "permissions": [
            {"user": grant.user, "vhost": vhost, "configure": grant.configure, "write": grant.write, "read": grant.read}
            for grant in grants
        ],
        "topic_permissions": [
            {"user": grant.user, "vhost": vhost, "exchange": topic.exchange, "write": topic.write, "read": topic.read}
            for grant in grants
            for topic in grant.topic
        ],
    }


def _logical_id(queue_name: str, taken: set[str]) -> str:
    """CloudFormation logical ids are alphanumeric: ``dev-Sales-delay.fifo`` -> ``DevSalesDelayFifoQueue``."""
    words = re.split(r"[^A-Za-z0-9]+", queue_name)
    base = "".join(word[:1].upper() + word[1:] for word in words if word) + "Queue"
    candidate, suffix = base, 2
    while candidate in taken:
        candidate, suffix = f"{base}{suffix}", suffix + 1
    taken.add(candidate)
    return candidate


def cloudformation_properties(spec: sqs.SqsQueueSpec, endpoint: str) -> dict[str, Any]:
    """``AWS::SQS::Queue`` properties (typed: numbers and booleans) for one model queue."""
    properties: dict[str, Any] = {
        "QueueName": spec.name,
        "DelaySeconds": spec.delay_seconds,
        "MessageRetentionPeriod": spec.message_retention_seconds,
        "MaximumMessageSize": spec.max_message_size,
        "SqsManagedSseEnabled": spec.sqs_managed_sse_enabled,
        "Tags": [
            {"Key": sqs.ENDPOINT_TAG, "Value": sqs.sanitize_queue_name(endpoint)},
            {"Key": sqs.ROLE_TAG, "Value": spec.role},
        ],
    }
    if spec.fifo_queue:
        properties["FifoQueue"] = True
    return properties


def cloudformation_document(stack: StackConfig, stack_name: str) -> dict[str, Any]:
    """Each endpoint's queues as ``AWS::SQS::Queue`` resources (kept on stack deletion), their URLs and ARNs
    as outputs."""
    config = stack.sqs
    assert config is not None
    taken: set[str] = set()
    resources: dict[str, Any] = {}
    outputs: dict[str, Any] = {}
    for endpoint, spec in config.queue_specs():
        logical_id = _logical_id(spec.name, taken)
        resources[logical_id] = {
            "Type": "AWS::SQS::Queue",
            "DeletionPolicy": "Retain",
            "UpdateReplacePolicy": "Retain",
            "Properties": cloudformation_properties(spec, endpoint),
        }
        outputs[f"{logical_id}Url"] = {"Description": f"{endpoint} {spec.role} queue", "Value": {"Ref": logical_id}}
        outputs[f"{logical_id}Arn"] = {"Value": {"Fn::GetAtt": [logical_id, "Arn"]}}
    return {
        "AWSTemplateFormatVersion": "2010-09-09",
        "Description": "SQS queues for NServiceBus endpoints with unrestricted delayed delivery "
        f"(nsb-delays stack {stack_name})",
        "Resources": resources,
        "Outputs": outputs,
    }
