"""``bench pulumi``'s third side, **Pulumi's floor**: the project's stack-config program against a plain Pulumi program
(``bench/pulumi_floor_program.py``) that registers the same ``pulumi_rabbitmq`` resources with the same inputs, flat.

The floor's resources come from a recording of the program under Pulumi's mocks for the same stack config and stack
name (``nsb_delays.infra.program.record_stack``), written to a JSON spec (``floor_spec``): each custom ``rabbitmq:*``
resource with its type, logical name (the program's: unique per type, which is all a flat URN needs), camelCase
inputs and options (protect, retainOnDelete, ignoreChanges; any other option, a secret or a non-RabbitMQ dependency
is refused). An input that came from another resource (a binding's source and destination, a policy definition
naming the parking exchange) is declared from that resource's ``name`` output, so the engine records the same
property dependency; a policy also ``depends_on`` the queues and exchanges its pattern matches (checked against the
plan's targets of that policy). Nothing else waits: no component, no parent, no chain of policies. The floor's vhost
is the fresh vhost of its run (the recording's is replaced; it must appear nowhere but in ``vhost`` inputs).

Both sides run through the same engine and provider, as the same project name and stack name (each in a state of its
own), so their URNs and the names they declare have the same lengths; each side into a fresh vhost, the two
alternating (the first round program first, the next floor first), ``NSB_BENCH_PULUMI_ROUNDS`` rounds (default 2)
per size. Per size and round, and best against best:

- ``up s``: ``pulumi up --skip-preview --parallel P`` with PULUMI_SKIP_CHECKPOINTS=true, program vs floor, ratio;
- ``preview s``: a no-change ``pulumi preview --expect-no-changes --parallel P`` right after, program vs floor, ratio;
- ``state B``: the bytes of ``pulumi stack export --file`` (the state as JSON), program vs floor, ratio;
- ``deps/ep`` and ``prop/ep``: the sum over the state's resources of len(dependencies), and of the URNs in their
  propertyDependencies, divided by the endpoints;
- ``resources``: the provider resources in each state; a ratio is printed only where the two counts are equal.

Then, at the sizes up to NSB_BENCH_PULUMI_CHECKPOINTED_MAX (default 300), the same ``up`` with
PULUMI_SKIP_CHECKPOINTS=false (the DIY backend's default: the whole state written after every step), program vs floor.
Settings: NSB_BENCH_PULUMI_FLOOR_ENDPOINTS (default 200,500,1000); NSB_BENCH_PULUMI_VERSIONS (default 4.3 for this
part only); NSB_BENCH_PULUMI_ROUNDS; NSB_BENCH_PULUMI_PARALLEL. Figures are printed, never asserted.
``python -m bench pulumi --floor-only`` runs this part alone, ``--skip-floor`` the rest alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nsb_delays.brokers.management import ManagementApi
from nsb_delays.components.model.rabbitmq.combined import PolicyScope
from nsb_delays.infra.pulumi_engine import LocalStack, PulumiCli, PulumiFailed, provider_credentials
from nsb_delays.stack.config import NAMESPACE
from servers.rabbitmq import LocalRabbitMq, broker_of

from .pulumi_measures import load, section, timed

SIZES = tuple(int(n) for n in os.environ.get("NSB_BENCH_PULUMI_FLOOR_ENDPOINTS", "200,500,1000").split(","))
VERSIONS = tuple(os.environ.get("NSB_BENCH_PULUMI_VERSIONS", "4.3").split(","))
ROUNDS = int(os.environ.get("NSB_BENCH_PULUMI_ROUNDS", "2"))
PROGRAM = Path(__file__).with_name("pulumi_floor_program.py")
REFERENCE = "$ref"  # as bench/pulumi_floor_program.py reads it
POLICY = "rabbitmq:index/policy:Policy"
# Options every registration of this SDK carries; of the others only ignoreChanges is carried over (protect and
# retainOnDelete are fields of their own in the recording).
SDK_OPTIONS = frozenset(
    {"version", "acceptSecrets", "supportsPartialValues", "acceptResources", "supportsResultReporting", "hooks"}
)
CARRIED_OPTIONS = frozenset({"ignoreChanges"})
# Which objects a policy's apply-to reaches: (exchanges?, queues: None for none, "" for every type, else a type).
APPLY_TO: dict[str, tuple[bool, str | None]] = {
    "all": (True, ""), "exchanges": (True, None), "queues": (False, ""), "quorum_queues": (False, "quorum"),
    "classic_queues": (False, "classic"), "streams": (False, "stream"),
}  # fmt: skip


def referenced(value: Any, name: str, index: int) -> tuple[Any, int]:
    """``value`` with each string equal to ``name`` replaced by ``{"$ref": index}``, and how many were."""
    if value == name:
        return {REFERENCE: index}, 1
    if isinstance(value, dict) and set(value) != {REFERENCE}:
        pairs = {key: referenced(item, name, index) for key, item in value.items()}
        return {key: pair[0] for key, pair in pairs.items()}, sum(pair[1] for pair in pairs.values())
    if isinstance(value, list):
        items = [referenced(item, name, index) for item in value]
        return [item[0] for item in items], sum(item[1] for item in items)
    return value, 0


def matched_by(policy: Any, recorded: list[Any], planned: dict[str, set[str]]) -> list[int]:
    """The indexes of the exchanges and queues ``policy``'s pattern matches (RabbitMQ matches a name anywhere, as
    ``re.search``), of the kind its apply-to reaches; refused unless they are the plan's targets of that policy."""
    definition = policy.inputs["policy"]
    pattern, (exchanges, queue_type) = re.compile(definition["pattern"]), APPLY_TO[definition.get("applyTo", "all")]
    found = []
    for index, other in enumerate(recorded):
        kind = other.type.rsplit(":", 1)[1]
        reached = (kind == "Exchange" and exchanges) or (
            kind == "Queue"
            and queue_type is not None
            and queue_type in ("", other.queue_arguments().get("x-queue-type", "classic"))
        )
        if reached and pattern.search(other.inputs["name"]):
            found.append(index)
    names = {recorded[index].inputs["name"] for index in found}
    if names != planned.get(policy.inputs["name"]):
        raise SystemExit(f"policy {policy.name}'s pattern matches {sorted(names)[:5]}…, not the plan's targets")
    return found


def options_of(resource: Any) -> dict[str, Any]:
    extra = set(resource.options) - SDK_OPTIONS - CARRIED_OPTIONS
    if extra or resource.import_id or resource.provider:
        raise SystemExit(f"{resource.name}: the floor does not carry {sorted(extra) or 'import or provider'}")
    carried = {key: resource.options[key] for key in CARRIED_OPTIONS if key in resource.options}
    return {"protect": resource.protect, "retainOnDelete": resource.retain_on_delete, **carried}


def floor_spec(raw: dict[str, Any], stack: str) -> dict[str, Any]:
    """The spec bench/pulumi_floor_program.py declares: the program's provider resources for the stack config
    section ``raw`` of stack ``stack``, recorded under mocks."""
    from nsb_delays.components.recording import SECRET_SIG
    from nsb_delays.infra.program import record_stack
    from nsb_delays.stack.config import parse_stack_config

    config = parse_stack_config({"rabbitmq": raw}, stack)
    assert config.rabbitmq is not None
    recorded = [r for r in record_stack(config, stack=stack) if r.custom and r.type.startswith("rabbitmq:")]
    if len({(r.type, r.name) for r in recorded}) != len(recorded):
        raise SystemExit("two resources of one type share a logical name: the floor's flat URNs would clash")
    place = {r.urn: index for index, r in enumerate(recorded)}
    planned = {policy.name: set(policy.targets) for policy in config.rabbitmq.topology.policies}
    resources: list[dict[str, Any]] = []
    for index, resource in enumerate(recorded):
        inputs = dict(resource.inputs)
        for key, urns in resource.property_dependencies.items():
            for urn in urns:
                if place.get(urn, index) >= index:
                    raise SystemExit(f"{resource.name}'s {key} comes from {urn}, not an earlier provider resource")
                inputs[key], count = referenced(inputs[key], recorded[place[urn]].inputs["name"], place[urn])
                if not count:
                    raise SystemExit(f"{resource.name}'s {key} does not hold the name of {urn}")
        waits = matched_by(resource, recorded, planned) if resource.type == POLICY else []
        if any(target >= index for target in waits):
            raise SystemExit(f"policy {resource.name} is registered before an object it applies to")
        resources.append(
            {"type": resource.type, "name": resource.name, "inputs": inputs, "dependsOn": waits,
             "options": options_of(resource)}
        )  # fmt: skip
    text = json.dumps([{k: v for k, v in r["inputs"].items() if k != "vhost"} for r in resources])
    if SECRET_SIG in text or json.dumps(raw["vhost"]) in text:
        raise SystemExit("an input holds a secret, or the recorded vhost outside a vhost input: the floor cannot")
    if any(r["inputs"].get("vhost", raw["vhost"]) != raw["vhost"] for r in resources):
        raise SystemExit("a resource is declared in another vhost than the stack's")
    return {"vhost": raw["vhost"], "resources": resources}


class FloorStack(LocalStack):
    """A ``LocalStack`` (same project name, state and environment) whose program is the floor's."""

    def __enter__(self) -> FloorStack:
        super().__enter__()
        assert self.folder is not None
        (self.folder / "__main__.py").write_text(PROGRAM.read_text())
        return self


@dataclass(frozen=True)
class Figures:
    """One side's run: provider resources in its state, seconds, the state's bytes and dependency entries."""

    resources: int
    up: float
    preview: float
    state_bytes: int
    dependencies: int
    property_dependencies: int
    content: str  # a digest of the provider resources' types, logical names and inputs but their vhost


def state_figures(stack: LocalStack, folder: Path) -> tuple[int, int, int, int, str]:
    """(bytes of ``pulumi stack export --file``, provider resources, dependency entries, property dependency
    entries, the ``content`` digest) of ``stack``'s state."""
    exported = folder / f"export-{stack.name}.json"
    stack.run("stack", "export", "--file", str(exported))
    size = exported.stat().st_size
    resources = json.loads(exported.read_text())["deployment"].get("resources") or []
    exported.unlink()
    provider = [resource for resource in resources if resource["type"].startswith("rabbitmq:")]
    content = sorted(
        json.dumps([r["type"], r["urn"].rsplit("::", 1)[1], {k: v for k, v in r["inputs"].items() if k != "vhost"}])
        for r in provider
    )
    return (
        size,
        len(provider),
        sum(len(resource.get("dependencies") or []) for resource in resources),
        sum(len(urns) for resource in resources for urns in (resource.get("propertyDependencies") or {}).values()),
        hashlib.sha256("\n".join(content).encode()).hexdigest(),
    )


COLUMNS = (
    ("version", 7), ("endpoints", 9), ("round", 5), ("resources", 9), ("floor", 5), ("up s", 7), ("floor", 7),
    ("ratio", 5), ("preview s", 9), ("floor", 7), ("ratio", 5), ("state B", 10), ("floor", 10), ("ratio", 5),
    ("deps/ep", 7), ("floor", 5), ("prop/ep", 7), ("floor", 5), ("load", 9),
)  # fmt: skip


def row(*cells: object) -> str:
    return " ".join(f"{cell:>{width}}" for cell, (_, width) in zip(cells, COLUMNS, strict=True))


def ratio(program: float, floor: float, comparable: bool) -> str:
    return f"{program / floor:.2f}" if comparable else "-"


def best(runs: list[Figures]) -> Figures:
    """The best of each figure over the rounds; the resources -1 when the rounds' counts differ."""
    counts, contents = {run.resources for run in runs}, {run.content for run in runs}
    return Figures(
        resources=counts.pop() if len(counts) == 1 else -1,
        content=contents.pop() if len(contents) == 1 else "differ",
        up=min(run.up for run in runs),
        preview=min(run.preview for run in runs),
        state_bytes=min(run.state_bytes for run in runs),
        dependencies=min(run.dependencies for run in runs),
        property_dependencies=min(run.property_dependencies for run in runs),
    )


SPEC_VHOST = "floor-spec-vhost"  # the recording's vhost, replaced by the floor's own in each run
STATES = {"skip": "true", "ckpt": "false"}  # PULUMI_SKIP_CHECKPOINTS of each kind of run


@dataclass(frozen=True)
class FloorRun:
    """One broker version's part: each size's rounds of program against floor."""

    cli: PulumiCli
    version: str
    broker: LocalRabbitMq
    parallel: int
    checkpointed_max: int
    folder: Path  # the specs and the exported states

    @property
    def api(self) -> ManagementApi:
        return ManagementApi(self.broker.management_url, self.broker.username, self.broker.password, timeout=300)

    def stack_name(self, size: int) -> str:
        """Both sides' stack name (each side has a state of its own): the policies' names carry it."""
        return f"bench-floor-{self.version.replace('.', '')}-{size}"

    def spec(self, size: int) -> Path:
        """The floor's spec for ``size`` endpoints, recorded in a process of its own (this one holds nothing of it)."""
        raw = section(SPEC_VHOST, self.version, size, PolicyScope.STACK)
        path = self.folder / f"spec-{size}.json"
        command = [sys.executable, "-m", "bench.pulumi_floor", "spec", json.dumps(raw), self.stack_name(size)]
        command.append(str(path))
        seconds, _ = timed(lambda: subprocess.run(command, check=True))
        count = len(json.loads(path.read_text())["resources"])
        print(f"  {self.version} {size} endpoints: the program recorded under mocks in {seconds:.1f} s, "
              f"{count} provider resources in the floor's spec", flush=True)  # fmt: skip
        return path

    @contextmanager
    def stack(self, side: str, size: int, vhost: str, spec: Path, env: dict[str, str]) -> Iterator[LocalStack]:
        """``side``'s stack into the fresh ``vhost``, deleted after."""
        self.api.create_vhost(vhost)
        config: dict[str, Any] = {"rabbitmq:endpoint": self.broker.management_url}
        env = provider_credentials(self.broker.username, self.broker.password) | env
        try:
            if side == "program":
                config[f"{NAMESPACE}:rabbitmq"] = section(vhost, self.version, size, PolicyScope.STACK)
                with LocalStack(self.cli, self.stack_name(size), config, env) as stack:
                    yield stack
            else:
                config |= {"floor:spec": str(spec), "floor:vhost": vhost}
                with FloorStack(self.cli, self.stack_name(size), config, env) as stack:
                    yield stack
        finally:
            self.api.delete_vhost(vhost)

    def run(self, side: str, state: str, size: int, turn: int, spec: Path) -> Figures | None:
        """An ``up`` of ``side`` (and with skip-checkpoints a no-change preview) and its state's figures."""
        vhost = f"{side[0]}-{state}-{self.version}-{size}-{turn}"  # the same length for both sides
        parallel = ("--parallel", str(self.parallel))
        with self.stack(side, size, vhost, spec, {"PULUMI_SKIP_CHECKPOINTS": STATES[state]}) as stack:
            try:
                up, _ = timed(lambda: stack.run("up", "--yes", "--skip-preview", *parallel))
                preview = float("nan")
                if state == "skip":
                    preview, _ = timed(lambda: stack.run("preview", "--expect-no-changes", *parallel))
            except PulumiFailed as failed:
                summary = " ".join(line.strip() for line in str(failed).splitlines()[-4:])
                print(f"{self.version:>7} {size:>9} {turn:>5} {side} {state} FAILED: {summary}", flush=True)
                return None
            state_bytes, resources, dependencies, property_dependencies, content = state_figures(stack, self.folder)
        return Figures(resources, up, preview, state_bytes, dependencies, property_dependencies, content)

    def rounds(self, state: str, size: int, spec: Path) -> tuple[list[Figures], list[Figures]]:
        """``ROUNDS`` rounds of program and floor, alternating which goes first; each round printed."""
        programs, floors = [], []
        for turn in range(1, ROUNDS + 1):
            order = ("program", "floor") if turn % 2 else ("floor", "program")
            before = load()
            done = {side: self.run(side, state, size, turn, spec) for side in order}
            program, floor = done["program"], done["floor"]
            if program is None or floor is None:
                continue
            programs.append(program)
            floors.append(floor)
            self.report(state, size, str(turn), program, floor, f"{before:.1f}-{load():.1f}")
        return programs, floors

    def report(self, state: str, size: int, label: str, program: Figures, floor: Figures, loads: str) -> None:
        same = program.resources == floor.resources >= 0 and program.content == floor.content != "differ"
        if state == "ckpt":
            print(f"{self.version:>7} {size:>9} {label:>5} checkpoints up: program {program.up:.1f} s, floor "
                  f"{floor.up:.1f} s, ratio {ratio(program.up, floor.up, same)}; resources {program.resources} / "
                  f"{floor.resources}; load {loads}", flush=True)  # fmt: skip
        else:
            print(
                row(
                    self.version, size, label, program.resources, floor.resources, f"{program.up:.1f}",
                    f"{floor.up:.1f}", ratio(program.up, floor.up, same), f"{program.preview:.1f}",
                    f"{floor.preview:.1f}", ratio(program.preview, floor.preview, same), program.state_bytes,
                    floor.state_bytes, ratio(program.state_bytes, floor.state_bytes, same),
                    f"{program.dependencies / size:.1f}", f"{floor.dependencies / size:.1f}",
                    f"{program.property_dependencies / size:.1f}", f"{floor.property_dependencies / size:.1f}", loads,
                ),
                flush=True,
            )  # fmt: skip
        if not same:
            inputs = "the same" if program.content == floor.content != "differ" else "not the same"
            print(f"  program {program.resources} provider resources, floor {floor.resources} (-1: the rounds "
                  f"differ), {inputs} types, names and inputs: no ratio", flush=True)  # fmt: skip

    def measure(self) -> None:
        for size in SIZES:
            spec = self.spec(size)
            for state in ("skip", "ckpt") if size <= self.checkpointed_max else ("skip",):
                programs, floors = self.rounds(state, size, spec)
                if programs:
                    self.report(state, size, "best", best(programs), best(floors), "")


def measure_floor(cli: PulumiCli, parallel: int, checkpointed_max: int) -> None:
    """This part on each of ``VERSIONS``, each on a broker of its own."""
    print(f"Pulumi's floor: {', '.join(VERSIONS)}; {ROUNDS} rounds; endpoints {', '.join(map(str, SIZES))}; "
          f"checkpoints up to {checkpointed_max}; load {load():.1f}", flush=True)  # fmt: skip
    print(row(*(title for title, _ in COLUMNS)), flush=True)
    for version in VERSIONS:
        with (
            broker_of(version, "NSB_BENCH_PULUMI_VERSIONS")() as broker,
            tempfile.TemporaryDirectory(prefix="nsb-bench-floor-") as folder,
        ):
            FloorRun(cli, version, broker, parallel, checkpointed_max, Path(folder)).measure()


def main() -> None:
    """``python -m bench.pulumi_floor spec RAW_JSON STACK OUT``: write the spec (``bench pulumi`` runs it)."""
    if len(sys.argv) != 5 or sys.argv[1] != "spec":
        raise SystemExit("python -m bench.pulumi_floor spec RAW_JSON STACK OUT (bench pulumi runs it)")
    Path(sys.argv[4]).write_text(json.dumps(floor_spec(json.loads(sys.argv[2]), sys.argv[3])))


if __name__ == "__main__":
    main()
