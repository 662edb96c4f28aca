"""What the project's program registers for every stack file of the repository and the docs, as the engine would
see it: kept in ``program_recordings.json`` from the release before issue 51 (commit ``PREVIOUS_RELEASE``: one
transport per stack, its children named for the stack), so the program of today is compared with it
(``test_transports.py``).

Each stack file is kept with its text (a page may change; the recording is of the text as it was) and, for each
resource, its type, its name and a digest of everything else the engine is given: its inputs, its parent, its options
(protect, retainOnDelete, ignoreChanges, the import id, …), its property dependencies (by the type and name of the
resource each names) and a component's registered outputs; then, apart, the resources it waits for
(``dependencies``). A stack file the config refuses is kept with the refusal. A resource renamed since is compared
under the name it had, which the engine finds by its alias (``as_the_release_before``): a stack deployed by the release
before sees the same resources with the same inputs. Its dependencies may only have narrowed (issue 51: an endpoint no
longer waits for every resource of the delay graph, nor a user for every resource of its endpoints).

``python -m tests.unit.program_recordings`` records the stack files again with the program as it is: only for a
deliberate change of what the program registers, which the file's diff then shows resource by resource.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nsb_delays.components.recording import RecordedResource
from nsb_delays.stack.config import NAMESPACE, ConfigError, StackConfig, load_stack, parse_yaml

PROJECT = Path(__file__).resolve().parents[2]
RECORDINGS = Path(__file__).with_name("program_recordings.json")
STACK_FILES = ("Pulumi.dev.yaml", "tests/stacks/*.yaml", "docs/examples/*.yaml")
DOCS_STACK = "example"
STACK_TYPE = "pulumi:pulumi:Stack"  # the name tests/docs/examples.py gives a page's stack file (Pulumi.example.yaml)


# The switches no stack file of the repository sets, each set once here: one object per queue (policyScope: endpoint),
# no parking, no protection, queues deleted with the stack, a 3.12 broker with delivery-limit policies, users with
# every key, and a team's stack of endpoints (its users too) finding the graph by a stack reference.
MORE_STACKS = {
    "every-switch": """
config:
  nsb-delays:rabbitmq:
    vhost: orders
    brokerVersion: "3.12"
    deliveryLimitPolicies: true
    policyScope: endpoint
    parkUnroutable: false
    protectDelayQueues: false
    retainOnDelete: false
    transportVersion: "10.1.6"
    disabledBrokerRequirementChecks: [StreamsEnabled]
    validateDeliveryLimits: false
    endpoints:
      - name: Sales
        instanceDiscriminators: [east]
        retainOnDelete: true
        user:
          name: sales-user
          passwordKey: salesPassword
          sendsTo: [Billing, Sales-east]
          publishes: ["MyCo.Events:OrderPlaced"]
          managementApi: false
      - {name: Billing, queueType: classic, legacyTimeoutManager: true, transportVersion: "11.0.0"}
  nsb-delays:salesPassword:
    secure: v1:c2FsZXM=
""",
    "team": """
config:
  nsb-delays:rabbitmq:
    vhost: shop
    brokerVersion: "4.3"
    declaresGraph: false
    graphStack: org/nsb-delays/graph
    policyGroup: team-a
    deliveryLimitPolicies: false
    routingTopology: direct
    endpoints:
      - name: Sales
        user: {passwordKey: salesPassword, subscribesTo: ["MyCo.Events:OrderPlaced"]}
      - name: Billing
        user: {name: billing, passwordKey: billingPassword, sendsTo: [Sales, error]}
  nsb-delays:salesPassword: {secure: v1:c2FsZXM=}
  nsb-delays:billingPassword: {secure: v1:YmlsbGluZw==}
""",
}


@dataclass(frozen=True)
class StackText:
    label: str  # where it is: a file of the project, or a page's block (docs/how-to/split-stacks.md:13)
    stack: str  # the stack's name (its file's), which names its combined policies
    text: str


def stack_texts() -> list[StackText]:
    """Every stack file of the repository, and every stack file a page of the docs shows."""
    from tests.docs.examples import examples

    files = sorted({path for pattern in STACK_FILES for path in PROJECT.glob(pattern)})
    found = [StackText(path.relative_to(PROJECT).as_posix(), stack_of(path), path.read_text()) for path in files]
    for example in examples():
        block = example.parsed
        if block.kind == "yaml" and not block.snippet and is_stack_file(block.source):
            found.append(StackText(block.where, DOCS_STACK, block.source))
    here = Path(__file__).relative_to(PROJECT).as_posix()
    return found + [StackText(f"{here}: {name}", name, text.lstrip()) for name, text in MORE_STACKS.items()]


def stack_of(path: Path) -> str:
    return path.name.removeprefix("Pulumi.").removesuffix(".yaml")


def is_stack_file(text: str) -> bool:
    try:
        data = parse_yaml(text, "block")
    except ConfigError:
        return False
    config = data.get("config") if isinstance(data, Mapping) else None
    return isinstance(config, Mapping) and any(str(key).startswith(f"{NAMESPACE}:") for key in config)


def parsed(stack: StackText) -> StackConfig:
    """The stack file's config as the CLI reads it (``load_stack`` of a file named for the stack)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"Pulumi.{stack.stack}.yaml"
        path.write_text(stack.text, encoding="utf-8")
        try:
            return load_stack(str(path))
        except ConfigError as error:
            raise ConfigError([problem.replace(str(path), stack.label) for problem in error.problems]) from None


# --- what the engine is given, comparable -------------------------------------------------------------------------


def urn_key(urn: str, name: str | None = None) -> str:
    """A resource as ``type::name``: its own type (not its parents') and its name (or ``name``)."""
    chain, _, own = urn.rpartition("::")
    kind = chain.rpartition("$")[2].rpartition("::")[2]
    # the stack itself: under mocks the SDK names it once per process, for the stack of the first recording
    return kind if kind == STACK_TYPE else f"{kind}::{own if name is None else name}"


def comparable(
    resources: list[RecordedResource], name_of: Callable[[str], str] = lambda urn: urn.rpartition("::")[2]
) -> list[dict[str, Any]]:
    """Each resource as the engine sees it, every URN as ``urn_key`` with the name ``name_of`` gives it."""

    def key(urn: str | None) -> str | None:
        return urn_key(urn, name_of(urn)) if urn else None

    def provider(reference: str | None) -> str | None:
        urn, _, provider_id = (reference or "").rpartition("::")
        return f"{key(urn)}::{provider_id}" if reference else None

    return [
        {
            "type": r.type,
            "name": name_of(r.urn),
            "custom": r.custom,
            "parent": key(r.parent),
            "inputs": r.inputs,
            "protect": r.protect,
            "retainOnDelete": r.retain_on_delete,
            "importId": r.import_id,
            "provider": provider(r.provider),
            "dependencies": sorted(str(key(urn)) for urn in r.dependencies),  # the SDK sends a set's order
            "propertyDependencies": {
                name: sorted(str(key(urn)) for urn in urns) for name, urns in r.property_dependencies.items()
            },
            "options": r.options,
            "outputs": r.outputs,
        }
        for r in resources
    ]


def digest(resource: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(resource, sort_keys=True, default=str).encode()).hexdigest()[:32]


def summary(resources: list[dict[str, Any]]) -> list[list[Any]]:
    """``[type, name, digest, parent, dependencies]`` of each resource, by type and name (the order of registration
    is the order in which the SDK resolves the inputs, which varies from run to run): the digest of everything but
    the resources it waits for, which follow it with its parent (``waits_for`` joins a resource's and its parents')."""
    return sorted(
        [r["type"], r["name"], digest({k: v for k, v in r.items() if k != "dependencies"}), r["parent"],
         r["dependencies"]]
        for r in resources
    )  # fmt: skip


def waits_for(entries: list[list[Any]]) -> dict[tuple[str, str], set[str]]:
    """Each resource of a ``summary`` (by type and name) with everything it waits for: its own dependencies and its
    parents' (the SDK registers a child once its parent is registered, and a component once its dependencies are)."""
    by_key = {f"{entry[0]}::{entry[1]}": entry for entry in entries}
    waited: dict[tuple[str, str], set[str]] = {}
    for entry in entries:
        found, parent = set(entry[4]), entry[3]
        while parent in by_key:
            found |= set(by_key[parent][4])
            parent = by_key[parent][3]
        waited[(entry[0], entry[1])] = found
    return waited


PREVIOUS_RELEASE = "282bfe1c176aaab20d2514c117ad4247ea855e0c"
"""The release before issue 51, whose registrations the file keeps."""


def former_names(resources: list[RecordedResource]) -> dict[str, str]:
    """Each resource's name in a stack the release before deployed, by URN: the name its alias gives it, or its
    parent's renaming as the engine applies it to a child named from its parent (pulumi/pulumi
    ``sdk/python/lib/pulumi/resource.py`` ``inherited_child_alias``: the parent's name, as a prefix of the child's,
    replaced by the parent's alias). Each alias is checked and taken out of the options it is compared with."""
    by_urn = {r.urn: r for r in resources}
    names: dict[str, str] = {}

    def former(urn: str) -> str:
        if urn not in names:
            resource = by_urn[urn]
            aliases = resource.options.get("aliases", [])
            aliased = [alias["spec"]["name"] for alias in aliases if "name" in alias.get("spec", {})]
            parent = by_urn.get(resource.parent or "")
            if aliased:
                (names[urn],) = aliased
            elif parent is not None and resource.name.startswith(parent.name) and former(parent.urn) != parent.name:
                names[urn] = former(parent.urn) + resource.name.removeprefix(parent.name)
            else:
                names[urn] = resource.name
        return names[urn]

    for resource in resources:
        former(resource.urn)
    return names


def as_the_release_before(resources: list[RecordedResource]) -> list[dict[str, Any]]:
    """The program's registrations under the names the release before gave them (``former_names``), without the
    aliases that say so."""
    names = former_names(resources)
    plain = [dataclasses.replace(r, options={k: v for k, v in r.options.items() if k != "aliases"}) for r in resources]
    return comparable(plain, name_of=lambda urn: names.get(urn, urn.rpartition("::")[2]))


def record_program(stack: StackText) -> dict[str, Any]:
    """The program's registrations for the stack file (or its refusal), as kept in the file: under the names the
    release before gave them."""
    from nsb_delays.infra.program import record_stack

    kept: dict[str, Any] = {"label": stack.label, "stack": stack.stack, "text": stack.text}
    try:
        config = parsed(stack)
    except ConfigError as error:
        return kept | {"refused": error.problems}
    return kept | {"resources": summary(as_the_release_before(record_stack(config, stack=stack.stack)))}


def kept_recordings() -> list[dict[str, Any]]:
    return list(json.loads(RECORDINGS.read_text(encoding="utf-8")))


def shown(recordings: list[dict[str, Any]]) -> str:
    """The file's text: one line per resource, so that a change shows as the lines of the resources it changed."""
    entries = []
    for recording in recordings:
        head = {key: value for key, value in recording.items() if key != "resources"}
        text = json.dumps(head, indent=1).replace("\n", "\n ")[: -len("\n }")]
        if "resources" in recording:
            lines = ",\n   ".join(json.dumps(resource) for resource in recording["resources"])
            text += ',\n  "resources": [\n   ' + lines + "\n  ]"
        entries.append(" " + text + "\n }")
    return "[\n" + ",\n".join(entries) + "\n]\n"


def main() -> Iterator[str]:
    """Every stack file recorded again as ``test_transports`` compares it: for a deliberate change of what the
    program registers, which the file's diff then shows resource by resource."""
    recordings = [record_program(stack) for stack in stack_texts()]
    RECORDINGS.write_text(shown(recordings), encoding="utf-8")
    yield f"wrote {RECORDINGS}: {len(recordings)} stack files"


if __name__ == "__main__":
    for line in main():
        print(line, file=sys.stderr)
