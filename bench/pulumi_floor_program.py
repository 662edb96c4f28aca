"""Pulumi's floor: a plain Pulumi program that registers the resources of a spec (``bench/pulumi_floor.py`` writes it
from a recording of the project's program) flat, through ``pulumi_rabbitmq``: no component, no parent, no dependency
but those a resource's inputs need.

``bench pulumi`` copies this file as the ``__main__.py`` of the floor's project, so it imports nothing but Pulumi, its
RabbitMQ SDK and the standard library. Config: ``floor:spec``, the spec's path; ``floor:vhost``, the vhost every
resource with a ``vhost`` input is declared in (the fresh vhost of the run, in place of the recording's).

The spec: ``{"vhost": the recording's, "resources": [...]}``, in the order the program registered them, each
``{"type", "name", "inputs", "dependsOn", "options"}``: ``inputs`` as the engine saw them (camelCase), in which a value
that came from another resource's ``name`` output is ``{"$ref": index}`` (that resource's place in the list, always
earlier): here it is that resource's ``.name`` output again, so the engine records the same property dependency;
``dependsOn`` the indexes of the resources it waits for beyond its inputs (a policy: the objects its pattern
matches); ``options`` ``protect``, ``retainOnDelete`` and ``ignoreChanges`` as the program set them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pulumi
import pulumi_rabbitmq as rabbitmq

REFERENCE = "$ref"
RESOURCES: dict[str, Any] = {
    "rabbitmq:index/exchange:Exchange": rabbitmq.Exchange,
    "rabbitmq:index/queue:Queue": rabbitmq.Queue,
    "rabbitmq:index/binding:Binding": rabbitmq.Binding,
    "rabbitmq:index/policy:Policy": rabbitmq.Policy,
    "rabbitmq:index/user:User": rabbitmq.User,
    "rabbitmq:index/permissions:Permissions": rabbitmq.Permissions,
    "rabbitmq:index/topicPermissions:TopicPermissions": rabbitmq.TopicPermissions,
}
# The inputs that are objects of the SDK's own Args type, by resource type and input.
ARGS: dict[tuple[str, str], Any] = {
    ("rabbitmq:index/exchange:Exchange", "settings"): rabbitmq.ExchangeSettingsArgs,
    ("rabbitmq:index/queue:Queue", "settings"): rabbitmq.QueueSettingsArgs,
    ("rabbitmq:index/policy:Policy", "policy"): rabbitmq.PolicyPolicyArgs,
    ("rabbitmq:index/permissions:Permissions", "permissions"): rabbitmq.PermissionsPermissionsArgs,
}
LIST_ARGS: dict[tuple[str, str], Any] = {
    ("rabbitmq:index/topicPermissions:TopicPermissions", "permissions"): rabbitmq.TopicPermissionsPermissionArgs,
}


def snake(key: str) -> str:
    """The SDK's keyword for an input the engine names in camelCase: ``autoDelete`` -> ``auto_delete``."""
    return re.sub(r"[A-Z]", lambda upper: "_" + upper.group(0).lower(), key)


def resolved(value: Any, made: list[pulumi.CustomResource]) -> Any:
    """``value`` with each ``{"$ref": i}`` in it replaced by the ``name`` output of the ``i``-th resource."""
    if isinstance(value, dict):
        if set(value) == {REFERENCE}:
            return made[value[REFERENCE]].name  # type: ignore[attr-defined]  # every rabbitmq resource has a name
        return {key: resolved(item, made) for key, item in value.items()}
    if isinstance(value, list):
        return [resolved(item, made) for item in value]
    return value


def keywords(type_token: str, inputs: dict[str, Any], made: list[pulumi.CustomResource]) -> dict[str, Any]:
    """The SDK's keyword arguments for ``inputs``: the Args types built from their camelCase objects (whose own keys,
    a queue's arguments or a policy's definition, stay as they are)."""
    given: dict[str, Any] = {}
    for key, value in inputs.items():
        value = resolved(value, made)
        if (type_token, key) in ARGS:
            value = ARGS[type_token, key](**{snake(field): item for field, item in value.items()})
        elif (type_token, key) in LIST_ARGS:
            value = [LIST_ARGS[type_token, key](**{snake(f): item for f, item in one.items()}) for one in value]
        given[snake(key)] = value
    return given


def declare(entry: dict[str, Any], made: list[pulumi.CustomResource], vhost: str) -> pulumi.CustomResource:
    inputs = dict(entry["inputs"])
    if "vhost" in inputs:
        inputs["vhost"] = vhost
    options = entry["options"]
    opts = pulumi.ResourceOptions(
        depends_on=[made[index] for index in entry["dependsOn"]] or None,
        protect=options.get("protect") or None,
        retain_on_delete=options.get("retainOnDelete") or None,
        ignore_changes=options.get("ignoreChanges") or None,
    )
    resource: pulumi.CustomResource = RESOURCES[entry["type"]](
        entry["name"], opts=opts, **keywords(entry["type"], inputs, made)
    )
    return resource


def main() -> None:
    config = pulumi.Config("floor")
    spec = json.loads(Path(config.require("spec")).read_text())
    vhost = config.require("vhost")
    made: list[pulumi.CustomResource] = []
    for entry in spec["resources"]:
        made.append(declare(entry, made, vhost))


if __name__ == "__main__":
    main()
