"""Apply recorded Pulumi resources to a live broker the way the providers would.

pulumi-rabbitmq (a bridge of terraform-provider-rabbitmq) declares through the management HTTP API:
``PUT /api/exchanges``, ``PUT /api/queues`` (``arguments_json`` decoded to JSON types, the string
``arguments`` map sent as strings), ``POST /api/bindings`` and ``PUT /api/policies``. pulumi-aws
creates an SQS queue with ``CreateQueue`` and its attributes. Since no Pulumi CLI or plugin runs here,
this is how the program's output is proven against a real RabbitMQ and an SQS emulator.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from nsb_delays.components.resource_types import RABBITMQ_BINDING as BINDING
from nsb_delays.components.resource_types import RABBITMQ_EXCHANGE as EXCHANGE
from nsb_delays.components.resource_types import RABBITMQ_POLICY as POLICY
from nsb_delays.components.resource_types import RABBITMQ_QUEUE as QUEUE
from nsb_delays.components.resource_types import SQS_QUEUE
from nsb_delays.infra.recording import RecordedResource

from .management import ManagementApi, ManagementError, path_segment

_ORDER = {EXCHANGE: 0, QUEUE: 1, BINDING: 2, POLICY: 3}
GO_DECIMAL_INT = re.compile(r"[+-]?[0-9]+")  # what strconv.ParseInt(s, 10, 64) accepts (no spaces, no "_")


class ApplyError(RuntimeError):
    """The broker refused a declaration (e.g. PRECONDITION_FAILED - inequivalent arg)."""


def _ints(value: Any) -> Any:
    """The engine turns ints into floats; the provider's JSON keeps integral numbers integral."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    return value


def policy_body(policy: dict[str, Any]) -> dict[str, Any]:
    """A ``Policy`` resource's ``policy`` block as terraform-provider-rabbitmq's ``putPolicy`` sends it.

    ``rabbitmq/resource_policy.go`` ``putPolicy``: a definition value that parses as an int64 is sent
    as that integer, any other string as it is (``ha-params`` of ``ha-mode: nodes`` as a list, which
    we never declare).
    """
    definition: dict[str, Any] = {}
    for key, value in (policy.get("definition") or {}).items():
        is_int64 = isinstance(value, str) and GO_DECIMAL_INT.fullmatch(value) and -(2**63) <= int(value) < 2**63
        definition[key] = int(value) if is_int64 else _ints(value)
    return {
        "pattern": policy["pattern"],
        "priority": int(policy.get("priority") or 0),
        "apply-to": policy["applyTo"],
        "definition": definition,
    }


@dataclass
class RabbitMqApplier:
    """Declares recorded exchanges, queues and bindings through the management API."""

    management_url: str
    username: str = "guest"
    password: str = "guest"
    verify_tls: bool | str = True
    api: ManagementApi = field(init=False)

    def __post_init__(self) -> None:
        self.api = ManagementApi(self.management_url, self.username, self.password, self.verify_tls)

    def _call(self, method: str, path: str, body: dict[str, Any], what: str) -> None:
        try:
            self.api.request(method, path, body)
        except ManagementError as error:
            raise ApplyError(f"{what}: {error}") from None

    def apply(self, resources: Iterable[RecordedResource]) -> int:
        """Declare every RabbitMQ resource (exchanges, queues, bindings, then policies); returns how many."""
        count = 0
        for resource in sorted((r for r in resources if r.type in _ORDER), key=lambda r: _ORDER[r.type]):
            self.apply_one(resource)
            count += 1
        return count

    def apply_one(self, resource: RecordedResource) -> None:
        inputs = resource.inputs
        vhost = path_segment(inputs.get("vhost", "/"))
        settings = resource.settings()
        if resource.type == EXCHANGE:
            self._call(
                "PUT",
                f"exchanges/{vhost}/{path_segment(inputs['name'])}",
                {
                    "type": settings["type"],
                    "durable": bool(settings.get("durable", False)),
                    "auto_delete": bool(settings.get("autoDelete", False)),
                    "arguments": dict(settings.get("arguments") or {}),
                },
                f"exchange {inputs['name']!r}",
            )
        elif resource.type == QUEUE:
            self._call(
                "PUT",
                f"queues/{vhost}/{path_segment(inputs['name'])}",
                {
                    "durable": bool(settings.get("durable", False)),
                    "auto_delete": bool(settings.get("autoDelete", False)),
                    "arguments": _ints(resource.queue_arguments())
                    if settings.get("argumentsJson")
                    else {key: str(value) for key, value in (settings.get("arguments") or {}).items()},
                },
                f"queue {inputs['name']!r}",
            )
        elif resource.type == BINDING:
            kind = "q" if inputs["destinationType"] == "queue" else "e"
            self._call(
                "POST",
                f"bindings/{vhost}/e/{path_segment(inputs['source'])}/{kind}/{path_segment(inputs['destination'])}",
                {"routing_key": inputs.get("routingKey", ""), "arguments": dict(inputs.get("arguments") or {})},
                f"binding {inputs['source']!r} -> {inputs['destination']!r} ({inputs.get('routingKey', '')!r})",
            )
        elif resource.type == POLICY:
            self._call(
                "PUT",
                f"policies/{vhost}/{path_segment(inputs['name'])}",
                policy_body(inputs["policy"]),
                f"policy {inputs['name']!r}",
            )
        else:
            raise ValueError(f"not a RabbitMQ resource: {resource.type}")


def sqs_attributes(inputs: dict[str, Any]) -> dict[str, str]:
    """pulumi-aws Queue inputs -> CreateQueue attributes (SQS takes strings)."""
    names = {
        "delaySeconds": "DelaySeconds",
        "messageRetentionSeconds": "MessageRetentionPeriod",
        "visibilityTimeoutSeconds": "VisibilityTimeout",
        "maxMessageSize": "MaximumMessageSize",
        "receiveWaitTimeSeconds": "ReceiveMessageWaitTimeSeconds",
        "fifoQueue": "FifoQueue",
        "contentBasedDeduplication": "ContentBasedDeduplication",
        "sqsManagedSseEnabled": "SqsManagedSseEnabled",
        "kmsMasterKeyId": "KmsMasterKeyId",
        "redrivePolicy": "RedrivePolicy",
    }
    attributes = {}
    for key, attribute in names.items():
        value = inputs.get(key)
        if value is None:
            continue
        value = _ints(value)
        attributes[attribute] = str(value).lower() if isinstance(value, bool) else str(value)
    return attributes


def apply_sqs(resources: Iterable[RecordedResource], client: Any) -> dict[str, str]:
    """Create every recorded SQS queue with ``client`` (boto3); returns name -> queue URL."""
    urls = {}
    for resource in resources:
        if resource.type != SQS_QUEUE:
            continue
        name = resource.inputs["name"]
        tags = {k: str(v) for k, v in (resource.inputs.get("tags") or {}).items()}
        response = client.create_queue(QueueName=name, Attributes=sqs_attributes(resource.inputs), tags=tags)
        urls[name] = response["QueueUrl"]
    return urls
