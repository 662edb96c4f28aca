"""The stack as an OpenTofu/Terraform module: the resources the Pulumi program registers, as the same provider's
resources (``cyrilgdn/rabbitmq``, which pulumi-rabbitmq wraps; ``hashicorp/aws``'s ``aws_sqs_queue``).

Read from a recording of the program under Pulumi's mocks (``infra.program.record_stack``), so every name, argument,
type, policy and grant is the one the components declare, from the same model and encoding. Each Pulumi resource
becomes the provider's resource of the same token (``rabbitmq:index/queue:Queue`` -> ``rabbitmq_queue``) with its
inputs in the provider's own names (the Pulumi bridge's camelCase back to snake_case); an input that came from
another resource is a reference to it (the dependency Pulumi recorded for that input), and any other resource it
waited for is in ``depends_on``: the combined policies after the queues they apply to, a user's grants after its
queues. Written in Terraform's JSON syntax, made for generated configuration (``*.tf.json``), except
``versions.tf``. For ``nsb-delays discover --format terraform`` the module also imports what the broker holds
already (``imports.tf.json``: ``import_blocks``).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nsb_delays.components.model import sqs
from nsb_delays.components.recording import RecordedResource
from nsb_delays.infra.program import record_stack
from nsb_delays.stack.config import StackConfig

RABBITMQ_PROVIDER = "cyrilgdn/rabbitmq"
RABBITMQ_PROVIDER_VERSION = "1.8.0"
"""The provider pulumi-rabbitmq 3.5 wraps (its ``provider/go.mod`` replaces terraform-providers/terraform-provider-
rabbitmq with github.com/cyrilgdn/terraform-provider-rabbitmq v1.8.0): the same resources, taking what the Pulumi side
sends."""

AWS_PROVIDER = "hashicorp/aws"
AWS_PROVIDER_VERSION = ">= 6.0"
"""The major pulumi-aws 7 is built on. The module sets ``max_message_size`` 1,048,576, which a release from before
SQS raised its limit (August 2025) refuses at plan (``validation.IntBetween`` of the attribute), never silently."""

SQS_QUEUE = "aws_sqs_queue"

BLOCKS = frozenset({"settings", "policy", "permissions"})
"""The inputs that are nested blocks in the provider's schema (``schema.TypeList`` of a ``schema.Resource``:
cyrilgdn/terraform-provider-rabbitmq v1.8.0 ``rabbitmq/resource_queue.go``, ``resource_exchange.go``,
``resource_policy.go``, ``resource_permissions.go``, ``resource_topic_permissions.go``). Any other object is a map
(``arguments``, ``definition``, ``tags``), whose keys are the broker's and stay as they are."""

_ADDRESS_CHARACTER = re.compile(r"[^A-Za-z0-9_-]")


class TerraformRenderError(ValueError):
    """The stack holds something the module cannot express."""


def resource_type(token: str) -> str:
    """``rabbitmq:index/topicPermissions:TopicPermissions`` -> ``rabbitmq_topic_permissions``;
    ``aws:sqs/queue:Queue`` -> ``aws_sqs_queue`` (the bridge's token of a provider's resource type)."""
    provider, module_path, name = token.split(":")
    module = module_path.split("/")[0]
    parts = [provider, *([] if module == "index" else [module]), snake_case(name)]
    return "_".join(parts)


def snake_case(name: str) -> str:
    """``applyTo`` -> ``apply_to``; ``argumentsJson`` -> ``arguments_json``."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def local_name(pulumi_name: str) -> str:
    """A resource's name in the module, from its Pulumi name: letters, digits, ``_`` and ``-``, not starting with a
    digit or ``-`` (``rabbitmq-delays-v2-nsb.v2.delay-level-27`` -> ``rabbitmq-delays-v2-nsb_v2_delay-level-27``)."""
    name = _ADDRESS_CHARACTER.sub("_", pulumi_name)
    return name if re.match(r"[A-Za-z_]", name) else f"_{name}"


def literal(value: str) -> str:
    """A string as a template literal: ``${`` and ``%{`` start an interpolation or directive in both syntaxes."""
    return value.replace("${", "$${").replace("%{", "%%{")


@dataclass(frozen=True)
class _Resource:
    recorded: RecordedResource
    type: str
    name: str

    @property
    def address(self) -> str:
        return f"{self.type}.{self.name}"


class _Module:
    """The module's resources, addressed, with what each waits for."""

    def __init__(
        self,
        recorded: list[RecordedResource],
        password_keys: Mapping[str, str],
        sqs_queues: Mapping[str, dict[str, Any]],
    ) -> None:
        self.sqs_queues = sqs_queues  # queue name -> its explicit attributes
        self.by_urn = {r.urn: r for r in recorded}
        self.children: dict[str, list[RecordedResource]] = {}
        for resource in recorded:
            if resource.parent:
                self.children.setdefault(resource.parent, []).append(resource)
        self.password_keys = password_keys
        self.resources: dict[str, _Resource] = {}
        taken: set[str] = set()
        for resource in recorded:
            if resource.custom:
                kind = resource_type(resource.type)
                name = local_name(resource.name)
                if f"{kind}.{name}" in taken:
                    raise TerraformRenderError(f"two resources would be {kind}.{name} (from {resource.name!r})")
                taken.add(f"{kind}.{name}")
                self.resources[resource.urn] = _Resource(resource, kind, name)

    @functools.cached_property
    def resource_addresses(self) -> set[str]:
        return {resource.address for resource in self.resources.values()}

    def custom_under(self, urn: str) -> Iterable[_Resource]:
        """The provider resources ``urn`` stands for: itself, or every one under a component."""
        if urn in self.resources:
            yield self.resources[urn]
            return
        for child in self.children.get(urn, []):
            yield from self.custom_under(child.urn)

    def waits_for(self, resource: RecordedResource) -> list[str]:
        """Every URN ``resource`` waits for: its own dependencies and its components' (a child is registered once its
        parent is, and a component once what it depends on is)."""
        urns = list(resource.dependencies)
        parent = resource.parent
        while parent and parent in self.by_urn:
            urns += self.by_urn[parent].dependencies
            parent = self.by_urn[parent].parent
        return list(dict.fromkeys(urns))

    def block(self, resource: _Resource) -> dict[str, Any]:
        recorded = resource.recorded
        # each input that came from other resources refers to them by name: per input, since an exchange and the
        # queue bound to it may share a name (a delay level's)
        references = {
            key: {
                target.recorded.physical_name: f"${{{target.address}.name}}"
                for urn in urns
                for target in self.custom_under(urn)
                if target.recorded.physical_name
            }
            for key, urns in recorded.property_dependencies.items()
        }
        body = {
            snake_case(key): self.value(key, value, references.get(key, {}), recorded)
            for key, value in sorted(recorded.inputs.items())
        }
        referenced = {address for address in self.resource_addresses if f"${{{address}.name}}" in _strings(body)}
        later = [
            target.address
            for urn in self.waits_for(recorded)
            for target in self.custom_under(urn)
            if target.address not in referenced
        ]
        if resource.type == SQS_QUEUE:
            body = self.explicit_sqs(resource, body)
        if later:
            body["depends_on"] = sorted(set(later))
        if recorded.protect:
            body["lifecycle"] = {"prevent_destroy": True}
        return body

    def explicit_sqs(self, resource: _Resource, body: dict[str, Any]) -> dict[str, Any]:
        """The queue's inputs with every attribute the model gives it; an input the model disagrees with is a
        program that no longer declares what the model says, refused."""
        explicit = self.sqs_queues.get(resource.recorded.physical_name or "")
        if explicit is None:
            raise TerraformRenderError(f"{resource.address}: no queue of the stack's SQS section is named so")
        differing = sorted(key for key, value in explicit.items() if body.get(key, value) != value)
        if differing:
            raise TerraformRenderError(f"{resource.address}: the program declares {differing} otherwise than the model")
        return dict(sorted({**body, **explicit}.items()))

    def value(self, key: str, value: Any, by_name: Mapping[str, str], owner: RecordedResource) -> Any:
        if key == "password":
            user = owner.physical_name or owner.name
            return f"${{var.{variable_name(self.password_keys[user])}}}"
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            return by_name.get(value, literal(value))
        if isinstance(value, list):
            return [self.value(key, item, by_name, owner) for item in value]
        if isinstance(value, dict):
            if key in BLOCKS:  # a block's fields are the provider's: snake_case, referenced like the top level
                return {snake_case(k): self.value(k, v, by_name, owner) for k, v in sorted(value.items())}
            return {k: self.value(k, v, by_name, owner) for k, v in sorted(value.items())}  # a map: the broker's keys
        return value


def _strings(value: Any) -> set[str]:
    """Every string in a block, however nested."""
    if isinstance(value, str):
        return {value}
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return {found for item in items for found in _strings(item)}


def variable_name(password_key: str) -> str:
    """A password's variable, named for its stack config key (``salesPassword`` -> ``sales_password``)."""
    return local_name(snake_case(password_key))


def sqs_queue_attributes(spec: sqs.SqsQueueSpec) -> dict[str, Any]:
    """Every ``aws_sqs_queue`` attribute the transport depends on, written even where it is the provider's default:
    a default is the provider release's, not NServiceBus's (terraform-provider-aws ``internal/service/sqs/queue.go``
    ``queueSchema``: ``max_message_size`` defaults to 262,144, a quarter of what the transport sends inline). No
    content-based deduplication and no redrive policy, as the transport's ``QueueCreator`` creates them."""
    return {
        "name": spec.name,
        "fifo_queue": spec.fifo_queue,
        "content_based_deduplication": False,
        "delay_seconds": spec.delay_seconds,
        "message_retention_seconds": spec.message_retention_seconds,
        "max_message_size": spec.max_message_size,
        "sqs_managed_sse_enabled": spec.sqs_managed_sse_enabled,
    }


MANIFEST = ".nsb-delays-module.json"
"""What a render wrote into its directory: its files, the resources kept when the stack drops them (an endpoint's
queues: ``retainOnDelete`` in the Pulumi program), those already dropped, and the objects its ``imports.tf.json``
imports (``adopted``). A later render reads it."""

REMOVED_FILE = "removed.tf.json"
IMPORTS_FILE = "imports.tf.json"


@dataclass(frozen=True)
class TerraformModule:
    files: dict[str, str]  # file name -> text
    retained: tuple[str, ...]  # addresses the stack keeps on the broker when it drops them
    # address -> (Pulumi resource type, import id): what imports.tf.json imports, and where
    imports: dict[str, tuple[str, str]] = field(default_factory=dict)


def terraform_module(
    stack: StackConfig, stack_name: str, adopted: Collection[tuple[str, str]] | None = None
) -> TerraformModule:
    """The module of ``stack``: its files and the addresses of the resources it retains.

    With ``adopted`` (the objects the broker holds in the shape the stack declares, as (Pulumi resource type, import
    id) pairs: ``nsb-delays discover``'s ``Adoption.present``), the module is read from the program recorded with
    ``adoptExisting``, where each object NServiceBus declares carries the import id the components compute
    (``components.rabbitmq.Declared.options``), and ``imports.tf.json`` imports each adopted one at the address this
    module gives that same recorded resource (``import_blocks``). ``adoptExisting`` changes no input, so the
    resources are the stack's; it is not written into the stack."""
    if stack.rabbitmq is None and stack.sqs is None:
        raise TerraformRenderError(
            f"stack {stack_name!r} has neither a nsb-delays:rabbitmq nor a nsb-delays:sqs section"
        )
    if adopted is not None:
        if stack.rabbitmq is None:
            raise TerraformRenderError(f"stack {stack_name!r} has no nsb-delays:rabbitmq section to adopt")
        stack = stack.with_values("rabbitmq", adoptExisting=True)
    recorded = record_stack(stack, stack=stack_name or "stack")
    password_keys = {user.settings.user: user.password_key for user in stack.rabbitmq.users} if stack.rabbitmq else {}
    sqs_queues = {spec.name: sqs_queue_attributes(spec) for _, spec in stack.sqs.queue_specs()} if stack.sqs else {}
    module = _Module(recorded, password_keys, sqs_queues)
    retained = sorted(r.address for r in module.resources.values() if r.recorded.retain_on_delete)
    files = _files(stack, module)
    imports = import_blocks(module, adopted) if adopted is not None else {}
    if imports:
        blocks = [{"to": address, "id": literal(found)} for address, (_, found) in imports.items()]
        files[IMPORTS_FILE] = _json({"import": blocks})
    return TerraformModule(files, tuple(retained), imports)


def import_blocks(module: _Module, adopted: Collection[tuple[str, str]]) -> dict[str, tuple[str, str]]:
    """Each provider resource whose (type, import id) ``adopted`` holds, by its address in ``module``, with them.

    The ids are the provider's own: the Pulumi bridge hands ``pulumi import``'s id to the wrapped provider's importer
    unchanged, and cyrilgdn/terraform-provider-rabbitmq v1.8.0 imports every resource with
    ``schema.ImportStatePassthroughContext`` (the id as given) then reads it back by parsing the id:
    ``rabbitmq/resource_queue.go`` ``ReadQueue``, ``resource_exchange.go`` ``ReadExchange`` and
    ``resource_policy.go`` ``ReadPolicy`` through ``parseResourceId`` (``rabbitmq/util.go`` ``parseId``: split on
    ``@`` into exactly name and vhost, the ``name@vhost`` of ``components.encoding.import_id``);
    ``resource_binding.go`` ``ReadBinding`` splits on ``/`` into vhost (``percentDecodeSlashes``: ``%2F``, ``%25``),
    source, destination, destination type and the management API's ``properties_key``, the id ``CreateBinding``
    sets and ``components.encoding.binding_import_id`` computes."""
    wanted = set(adopted)
    found = {
        resource.address: (resource.recorded.type, resource.recorded.import_id)
        for resource in module.resources.values()
        if resource.recorded.import_id is not None and (resource.recorded.type, resource.recorded.import_id) in wanted
    }
    return dict(sorted(found.items()))


def directory_problem(directory: Path) -> str | None:
    """Why ``directory`` cannot take the module (checked before anything is written): a file, or a directory that
    holds files and no module this command rendered."""
    if directory.exists() and not directory.is_dir():
        return f"-o {directory}: is a file; give a directory (created if missing)"
    if directory.is_dir() and any(directory.iterdir()) and not (directory / MANIFEST).is_file():
        return (
            f"-o {directory}: not empty and not a module nsb-delays rendered (no {MANIFEST}); give an empty or new "
            "directory, or the directory of an earlier render of this stack"
        )
    return None


def write_module(directory: Path, module: TerraformModule) -> list[str]:
    """Write ``module`` into ``directory``, after an earlier render of it if there is one: a retained resource the
    stack no longer declares gets a ``removed`` block with ``destroy = false`` (OpenTofu and Terraform 1.7+: the
    resource leaves the state and stays on the broker), and a file the earlier render wrote and this one does not
    is deleted. Returns the addresses that left the module and stay on the broker."""
    earlier = _manifest(directory)
    addresses = _addresses(module.files)
    removed = sorted({*earlier.get("removed", []), *earlier.get("retained", [])} - addresses)
    files = dict(module.files)
    if removed:
        blocks = [{"from": address, "lifecycle": {"destroy": False}} for address in removed]
        files[REMOVED_FILE] = _json({"removed": blocks})
    directory.mkdir(parents=True, exist_ok=True)
    for stale in set(earlier.get("files", [])) - set(files):
        (directory / stale).unlink(missing_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text, encoding="utf-8")
    manifest = {"files": sorted(files), "retained": list(module.retained), "removed": removed,
                "adopted": sorted(list(pair) for pair in module.imports.values())}  # fmt: skip
    (directory / MANIFEST).write_text(_json(manifest), encoding="utf-8")
    return [address for address in removed if address not in earlier.get("removed", [])]


def adopted_before(directory: Path) -> list[tuple[str, str]] | None:
    """What the module in ``directory`` imports (``nsb-delays discover --format terraform`` wrote it), as (Pulumi
    resource type, import id) pairs, for a render after the review to import again where the stack still declares
    the object with the same id; ``None`` when it imports nothing."""
    adopted = _manifest(directory).get("adopted") or []
    pairs = [(str(pair[0]), str(pair[1])) for pair in adopted if isinstance(pair, list) and len(pair) == 2]
    return pairs or None


def _manifest(directory: Path) -> dict[str, Any]:
    path = directory / MANIFEST
    if not path.is_file():
        return {}
    document = json.loads(path.read_text(encoding="utf-8"))
    return document if isinstance(document, dict) else {}


def _addresses(files: Mapping[str, str]) -> set[str]:
    found: set[str] = set()
    for name, text in files.items():
        if name.endswith(".tf.json"):
            for kind, named in json.loads(text).get("resource", {}).items():
                found |= {f"{kind}.{local}" for local in named}
    return found


def _files(stack: StackConfig, module: _Module) -> dict[str, str]:
    """The module's files by name: ``versions.tf``, ``variables.tf.json`` (each endpoint user's password, sensitive),
    ``rabbitmq.tf.json`` and ``sqs.tf.json`` (the sections the stack has)."""
    files: dict[str, str] = {"versions.tf": versions_tf(stack)}
    if module.password_keys:
        variables = {
            variable_name(key): {
                "type": "string",
                "sensitive": True,
                "description": f"The password of RabbitMQ user {user!r}",
            }
            for user, key in module.password_keys.items()
        }
        files["variables.tf.json"] = _json({"variable": variables})
    for prefix, file_name in (("rabbitmq:", "rabbitmq.tf.json"), ("aws:", "sqs.tf.json")):
        # in address order: the program registers resources concurrently, in an order that varies from run to run,
        # and a render of an unchanged stack is the same text (the pipelines compare it with the committed module)
        chosen = sorted(
            (r for r in module.resources.values() if r.recorded.type.startswith(prefix)), key=lambda r: r.address
        )
        if chosen:
            resources: dict[str, dict[str, Any]] = {}
            for resource in chosen:
                resources.setdefault(resource.type, {})[resource.name] = module.block(resource)
            files[file_name] = _json({"resource": resources})
    return files


def versions_tf(stack: StackConfig) -> str:
    """The providers the module needs: the RabbitMQ one pinned to the version proven, AWS's with an SQS section."""
    lines = [
        "terraform {",
        "  required_providers {",
        "    rabbitmq = {",
        f'      source  = "{RABBITMQ_PROVIDER}"',
        f'      version = "{RABBITMQ_PROVIDER_VERSION}"',
        "    }",
    ]
    if stack.sqs is not None:
        lines += ["    aws = {", f'      source  = "{AWS_PROVIDER}"', f'      version = "{AWS_PROVIDER_VERSION}"']
        lines.append("    }")
    return "\n".join([*lines, "  }", "}", ""])


def _json(document: Mapping[str, Any]) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
