"""The stack's RabbitMQ objects as custom resources of the RabbitMQ Messaging Topology Operator (``rabbitmq.com/
v1beta1``, github.com/rabbitmq/messaging-topology-operator at v1.20.1): one multi-document YAML stream.

Read from a recording of the Pulumi program (``infra.program.record_stack``), like ``terraform.py``, so every name,
argument, type, policy and grant is the one the components declare. Each recorded resource becomes the operator's
kind whose controller sends the broker what the Pulumi provider sends (facts from the operator's source at v1.20.1):

- ``rabbitmq:index/queue:Queue`` -> ``Queue``. ``internal/queue_settings.go`` ``GenerateQueueSettings`` decodes
  ``spec.arguments`` (a ``runtime.RawExtension``) with ``json.Unmarshal`` into ``map[string]any`` and rabbit-hole's
  ``DeclareQueue`` sends it with ``json.Marshal``: a whole number becomes a Go ``float64`` and is written back
  without a fraction, so integers reach the broker as integers up to 2**53 (beyond that is refused here).
  ``spec.type`` is not a separate property on the broker: rabbit-hole v3's ``DeclareQueue`` sets
  ``arguments["x-queue-type"]`` from it. The recording's ``x-queue-type`` argument is therefore written as
  ``spec.type`` (the field the operator documents; its webhook, ``internal/webhook/v1beta1/queue_webhook.go``
  ``ValidateUpdate``, refuses to change it, as it refuses changed arguments, durability and auto-delete) and the
  other arguments stay in ``spec.arguments``; what the broker receives is the same. ``deletionPolicy``
  (``api/v1beta1/queue_types.go`` ``QueueSpec.DeletionPolicy``, enum delete/retain, default delete) is ``retain``
  for every queue the program registers with ``retainOnDelete`` (an endpoint's queues, and the delay levels it
  also ``protect``s: the operator has nothing like ``protect``, ``retain`` is the nearest) and ``delete``
  otherwise.
- ``Exchange``, ``Binding``, ``Policy``, ``OperatorPolicy``, ``User``, ``Permission``, ``TopicPermission``: in
  v1.20.1 only ``Queue``, ``Vhost``, ``Federation`` and ``Shovel`` have a ``deletionPolicy``; deleting one of these
  custom resources deletes its object on the broker (``internal/controller/*_controller.go`` ``DeleteFunc``), which
  is what the Pulumi program does for them too (it retains and protects only queues). A resource of another kind
  that the program retains or protects is refused.
- Policies: ``internal/policy.go`` ``GeneratePolicy`` sends ``spec.definition`` as decoded JSON. The Pulumi provider
  (cyrilgdn/terraform-provider-rabbitmq v1.8.0 ``rabbitmq/resource_policy.go`` ``putPolicy``) turns every
  definition value that parses as an integer into one before it is sent, so the definition is written with those
  values as integers: the broker gets the same policy from both.
- Bindings: ``internal/binding.go`` ``GenerateBindingInfo`` sends ``spec.destinationType`` (enum exchange/queue in
  ``BindingSpec``) and the routing key as they are; a binding has no name of its own on the broker.
- Users: ``UserSpec`` has no user name; the operator reads ``username`` and ``password`` (or ``passwordHash``) from
  the Secret ``spec.importCredentialsSecret`` names (``internal/controller/user_controller.go`` ``importCredentials``,
  ``internal/user.go`` ``GenerateUserSettings``) and watches it for rotation. That Secret is not rendered: the
  password is the stack's secret, and a Secret without it would make the operator refuse the user ("neither
  passwordHash nor password is set") while a ``passwordHash: ""`` would create a user without a password. Its name
  is ``credentials_secret_name``; the User carries annotations naming the user and the stack's password key. The
  operator hashes the password itself, with SHA-512 (``GenerateUserSettings``:
  ``rabbithole.Base64EncodedSaltedPasswordHashSHA512``), where the Pulumi provider sends the password and the
  broker hashes it with its default (SHA-256): the one difference between the users both make.
- Grants: ``Permission`` and ``TopicPermission`` name the user by ``spec.user`` (as the program grants a name, not
  a resource); ``TopicPermissionSpec`` holds one exchange, so each of the program's topic permissions becomes one
  ``TopicPermission`` per exchange.

Kubernetes names (``metadata.name``) follow ``object_name``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from nsb_delays.components.recording import RecordedResource
from nsb_delays.components.resource_types import (
    RABBITMQ_BINDING,
    RABBITMQ_EXCHANGE,
    RABBITMQ_OPERATOR_POLICY,
    RABBITMQ_PERMISSIONS,
    RABBITMQ_POLICY,
    RABBITMQ_QUEUE,
    RABBITMQ_TOPIC_PERMISSIONS,
    RABBITMQ_USER,
)
from nsb_delays.infra.program import record_stack
from nsb_delays.stack.config import StackConfig

API_VERSION = "rabbitmq.com/v1beta1"
OPERATOR_VERSION = "v1.20.1"
"""The operator release whose CRDs and controllers the manifests are made for (tools/topology-operator builds it)."""

ANNOTATION_PREFIX = "nsb-delays.io"
MAX_NAME = 253  # a DNS-1123 subdomain: what metadata.name of a custom resource must be
_HASH_LENGTH = 8
_OUTSIDE = re.compile(r"[^a-z0-9.-]+")
_DOTS = re.compile(r"[-.]*\.[-.]*")
_OWNER = "rabbitmq:"
_SAFE_INTEGER = 2**53  # a float64 holds every integer up to here: the operator decodes numbers into float64


class TopologyOperatorRenderError(ValueError):
    """The stack holds something the operator's custom resources cannot express."""


@dataclass(frozen=True)
class ClusterReference:
    """The ``RabbitmqCluster`` every resource is declared in (``spec.rabbitmqClusterReference``)."""

    name: str
    namespace: str | None = None

    def spec(self) -> dict[str, str]:
        return {"name": self.name, **({"namespace": self.namespace} if self.namespace else {})}


def object_name(pulumi_name: str) -> str:
    """A resource's ``metadata.name`` (a DNS-1123 subdomain, unique per kind), from its Pulumi name: lower-cased,
    each run of characters outside ``[a-z0-9.-]`` replaced by ``-``, each run of ``-`` and ``.`` that holds a ``.``
    made one ``.`` (a label neither empty nor starting or ending with ``-``), leading and trailing ``-``/``.``
    stripped. A
    Pulumi name that is already such a name is kept as it is; any other (one that had to change, or is longer than
    253) gets ``-`` and the first 8 hex digits of its SHA-256 appended, the part before cut to fit 253. So names
    that differ only in case or in replaced characters (``Sales``/``sales``, ``a_b``/``a-b``) stay apart, and a
    name depends on its own Pulumi name only, never on the other resources of the stack (a later render does not
    rename a resource, which the operator would delete and declare again): ``rabbitmq-shared-queues-error`` stays;
    ``rabbitmq-Billing-Billing`` -> ``rabbitmq-billing-billing-fe5dc8e9``. Two equal results are refused
    (``_check_unique``)."""
    base = _DOTS.sub(".", _OUTSIDE.sub("-", pulumi_name.lower())).strip("-.")
    if base and base == pulumi_name and len(base) <= MAX_NAME:
        return base
    digest = hashlib.sha256(pulumi_name.encode()).hexdigest()[:_HASH_LENGTH]
    head = base[: MAX_NAME - _HASH_LENGTH - 1].rstrip("-.")
    return f"{head}-{digest}" if head else digest


def credentials_secret_name(user_object_name: str) -> str:
    """The Secret a User imports its credentials from: ``<the User's metadata.name>-credentials``, made to fit 253
    by ``object_name`` when it would not."""
    return object_name(f"{user_object_name}-credentials")


def topology_documents(stack: StackConfig, stack_name: str, cluster: ClusterReference) -> list[dict[str, Any]]:
    """The custom resources of ``stack``'s RabbitMQ section, users first, grants last, each kind by Pulumi name."""
    if stack.rabbitmq is None:
        source = "an nsb-delays:sqs section only" if stack.sqs is not None else "no nsb-delays:rabbitmq section"
        raise TopologyOperatorRenderError(
            f"stack {stack_name!r} has {source}: the topology operator declares RabbitMQ objects only"
        )
    if not cluster.name:
        raise TopologyOperatorRenderError("the RabbitmqCluster's name is empty (--cluster)")
    password_keys = {user.settings.user: user.password_key for user in stack.rabbitmq.users}
    # the RabbitMQ provider's resources: another section's (SQS queues) are not the operator's to declare
    recorded = [r for r in record_stack(stack, stack=stack_name or "stack") if r.custom and r.type.startswith(_OWNER)]
    kept = sorted(r.name for r in recorded if r.type != RABBITMQ_QUEUE and (r.retain_on_delete or r.protect))
    if kept:
        raise TopologyOperatorRenderError(
            f"stack {stack_name!r} retains or protects {', '.join(kept)}: in the topology operator {OPERATOR_VERSION} "
            "only a Queue has a deletionPolicy (deleting any other custom resource deletes its object)"
        )
    others = sorted({r.type for r in recorded} - set(_KINDS))
    if others:
        raise TopologyOperatorRenderError(
            f"stack {stack_name!r} declares {', '.join(others)}: the topology operator {OPERATOR_VERSION} has no "
            f"kind for {'them' if len(others) > 1 else 'it'} (only RabbitMQ queues, exchanges, bindings, policies, "
            "operator policies, users and grants are rendered)"
        )
    documents: list[dict[str, Any]] = []
    for resource_type in _ORDER:  # each kind's in its names' order: the recording's order varies between runs
        for resource in sorted((r for r in recorded if r.type == resource_type), key=lambda r: r.name):
            for kind, name, spec, metadata in _KINDS[resource_type](resource, password_keys):
                spec["rabbitmqClusterReference"] = cluster.spec()
                documents.append({"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": name, **metadata},
                                  "spec": spec})  # fmt: skip
    _check_unique(documents)
    return documents


def dump_topology(documents: list[dict[str, Any]], stack_name: str) -> str:
    """``topology_documents``' resources as one YAML stream (``---`` between documents) under a header, for
    ``kubectl apply -f``."""
    header = (
        f"# The RabbitMQ objects of nsb-delays stack {stack_name!r} as RabbitMQ Messaging Topology Operator "
        f"{OPERATOR_VERSION} custom resources.\n# Each User imports its credentials from a Secret (keys username, "
        "password) that is not in this file: create it first.\n"
    )
    return header + yaml.safe_dump_all(documents, sort_keys=False, allow_unicode=True, width=1 << 16)


def credential_secrets(documents: Iterable[Mapping[str, Any]]) -> list[tuple[str, str, str | None]]:
    """``(Secret name, user name, stack password key)`` of each User: the Secrets to create before the Users."""
    return [
        (
            document["spec"]["importCredentialsSecret"]["name"],
            document["metadata"]["annotations"][f"{ANNOTATION_PREFIX}/username"],
            document["metadata"]["annotations"].get(f"{ANNOTATION_PREFIX}/password-key"),
        )
        for document in documents
        if document.get("kind") == "User"
    ]


_Rendered = tuple[str, str, dict[str, Any], dict[str, Any]]  # kind, metadata.name, spec, more metadata


def _queue(resource: RecordedResource, _: Mapping[str, str]) -> Iterable[_Rendered]:
    settings = resource.settings()
    arguments = {key: _number(value, resource, key) for key, value in resource.queue_arguments().items()}
    queue_type = arguments.pop("x-queue-type", None)
    spec: dict[str, Any] = {"name": _physical(resource), "vhost": _vhost(resource)}
    if queue_type is not None:
        spec["type"] = queue_type
    spec |= {"durable": bool(settings.get("durable", False)), "autoDelete": bool(settings.get("autoDelete", False))}
    if arguments:
        spec["arguments"] = arguments
    spec["deletionPolicy"] = "retain" if resource.retain_on_delete else "delete"
    yield "Queue", object_name(resource.name), spec, {}


def _exchange(resource: RecordedResource, _: Mapping[str, str]) -> Iterable[_Rendered]:
    settings = resource.settings()
    spec: dict[str, Any] = {
        "name": _physical(resource),
        "vhost": _vhost(resource),
        "type": settings.get("type", "direct"),
        "durable": bool(settings.get("durable", False)),
        "autoDelete": bool(settings.get("autoDelete", False)),
    }
    arguments = {key: _number(value, resource, key) for key, value in (settings.get("arguments") or {}).items()}
    if arguments:
        spec["arguments"] = arguments
    yield "Exchange", object_name(resource.name), spec, {}


def _binding(resource: RecordedResource, _: Mapping[str, str]) -> Iterable[_Rendered]:
    inputs = resource.inputs
    spec: dict[str, Any] = {
        "vhost": _vhost(resource),
        "source": inputs["source"],
        "destination": inputs["destination"],
        "destinationType": inputs["destinationType"],
        "routingKey": inputs.get("routingKey", ""),
    }
    arguments = {key: _number(value, resource, key) for key, value in (inputs.get("arguments") or {}).items()}
    if arguments:
        spec["arguments"] = arguments
    yield "Binding", object_name(resource.name), spec, {}


def _policy_spec(resource: RecordedResource) -> dict[str, Any]:
    policy = dict(resource.inputs["policy"])
    return {
        "name": _physical(resource),
        "vhost": _vhost(resource),
        "pattern": policy["pattern"],
        "applyTo": policy.get("applyTo", "all"),
        "priority": _number(policy.get("priority", 0), resource, "priority"),
        "definition": {key: _definition_value(value, resource, key) for key, value in policy["definition"].items()},
    }


def _policy(resource: RecordedResource, _: Mapping[str, str]) -> Iterable[_Rendered]:
    yield "Policy", object_name(resource.name), _policy_spec(resource), {}


def _operator_policy(resource: RecordedResource, _: Mapping[str, str]) -> Iterable[_Rendered]:
    yield "OperatorPolicy", object_name(resource.name), _policy_spec(resource), {}


def _user(resource: RecordedResource, password_keys: Mapping[str, str]) -> Iterable[_Rendered]:
    user = _physical(resource)
    name = object_name(resource.name)
    spec: dict[str, Any] = {}
    if resource.inputs.get("tags"):
        spec["tags"] = list(resource.inputs["tags"])
    spec["importCredentialsSecret"] = {"name": credentials_secret_name(name)}
    annotations = {f"{ANNOTATION_PREFIX}/username": user}
    if user in password_keys:
        annotations[f"{ANNOTATION_PREFIX}/password-key"] = password_keys[user]
    yield "User", name, spec, {"annotations": annotations}


def _permission(resource: RecordedResource, _: Mapping[str, str]) -> Iterable[_Rendered]:
    grants = dict(resource.inputs["permissions"])
    spec = {
        "user": resource.inputs["user"],
        "vhost": _vhost(resource),
        "permissions": {key: grants.get(key, "") for key in ("configure", "write", "read")},
    }
    yield "Permission", object_name(resource.name), spec, {}


def _topic_permissions(resource: RecordedResource, _: Mapping[str, str]) -> Iterable[_Rendered]:
    for grant in resource.inputs["permissions"]:
        spec = {
            "user": resource.inputs["user"],
            "vhost": _vhost(resource),
            "permissions": {"exchange": grant["exchange"], "write": grant.get("write", ""),
                            "read": grant.get("read", "")},
        }  # fmt: skip
        yield "TopicPermission", object_name(f"{resource.name}-{grant['exchange']}"), spec, {}


_KINDS: dict[str, Callable[[RecordedResource, Mapping[str, str]], Iterable[_Rendered]]] = {
    RABBITMQ_USER: _user,
    RABBITMQ_EXCHANGE: _exchange,
    RABBITMQ_QUEUE: _queue,
    RABBITMQ_BINDING: _binding,
    RABBITMQ_POLICY: _policy,
    RABBITMQ_OPERATOR_POLICY: _operator_policy,
    RABBITMQ_PERMISSIONS: _permission,
    RABBITMQ_TOPIC_PERMISSIONS: _topic_permissions,
}
_ORDER = tuple(_KINDS)  # users, then what grants and bindings name, then those


def _physical(resource: RecordedResource) -> str:
    name = resource.physical_name
    if name is None:
        raise TopologyOperatorRenderError(f"{resource.type} {resource.name!r} has no name input")
    return name


def _vhost(resource: RecordedResource) -> str:
    return str(resource.inputs.get("vhost", "/"))


def _number(value: Any, resource: RecordedResource, key: str) -> Any:
    """The engine's float as the integer it stands for; refused beyond what the operator's float64 keeps."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > _SAFE_INTEGER:
        raise TopologyOperatorRenderError(
            f"{resource.type} {resource.name!r}: {key} = {value} is beyond 2**53, which the operator's JSON "
            "decoding (into float64) does not keep"
        )
    return value


def _definition_value(value: Any, resource: RecordedResource, key: str) -> Any:
    """A policy definition's value as the Pulumi provider sends it: a string that parses as an integer is one."""
    if isinstance(value, str) and re.fullmatch(r"[+-]?[0-9]+", value):
        return _number(int(value), resource, key)
    return _number(value, resource, key)


def _check_unique(documents: list[dict[str, Any]]) -> None:
    seen: dict[tuple[str, str], int] = {}
    for document in documents:
        key = (document["kind"], document["metadata"]["name"])
        seen[key] = seen.get(key, 0) + 1
    twice = sorted(f"{kind} {name}" for (kind, name), count in seen.items() if count > 1)
    if twice:
        raise TopologyOperatorRenderError(f"two resources would have the same kind and metadata.name: {twice}")
