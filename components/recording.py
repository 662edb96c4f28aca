"""Run the Pulumi program under ``pulumi.runtime.set_mocks`` and keep every registered resource.

No Pulumi CLI or provider plugin can run here, so this is how the program is exercised offline:
unit tests assert on the recorded inputs, ``nsb-delays check`` feeds them to the policy rules, and
the broker tests apply them to a real RabbitMQ and SQS emulator the way the providers would.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import json
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pulumi
from google.protobuf import json_format

from .model.settings import PACKAGE
from .resource_types import SQS_QUEUE, STACK_REFERENCE

PROJECT = PACKAGE
SECRET_SIG = "4dabf18193072939515e22adb298388d"  # how the engine marks a secret value


@dataclass(frozen=True)
class RecordedResource:
    """One ``RegisterResource`` as the engine would see it: camelCase inputs, numbers as floats."""

    type: str
    name: str
    inputs: dict[str, Any]
    custom: bool
    urn: str
    parent: str | None
    protect: bool
    retain_on_delete: bool
    provider: str | None
    import_id: str | None = None  # set when the program adopts an existing object (``import_``)
    dependencies: tuple[str, ...] = ()  # URNs this resource waits for
    property_dependencies: dict[str, tuple[str, ...]] = field(default_factory=dict)  # input -> URNs it came from
    outputs: dict[str, Any] = field(default_factory=dict)  # a component's registered outputs (``register_outputs``)
    options: dict[str, Any] = field(default_factory=dict)  # every other option it was registered with (``OPTIONS``)

    @property
    def physical_name(self) -> str | None:
        value = self.inputs.get("name")
        return value if isinstance(value, str) else None

    def settings(self) -> dict[str, Any]:
        return dict(self.inputs.get("settings") or {})

    def queue_arguments(self) -> dict[str, Any]:
        """Queue arguments as the provider sends them: ``argumentsJson`` decoded (ints stay ints), else the
        string map ``arguments`` (endpoint queues, whose arguments are all strings), else none."""
        settings = self.settings()
        if settings.get("argumentsJson"):
            return dict(json.loads(settings["argumentsJson"]))
        return dict(settings.get("arguments") or {})


class RecordingMocks(pulumi.runtime.Mocks):
    """Mocks that return inputs as outputs (plus SQS url/arn) and remember every registration."""

    def __init__(
        self,
        region: str = "us-east-1",
        account: str = "123456789012",
        stack_outputs: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self.region = region
        self.account = account
        self.stack_outputs = dict(stack_outputs or {})  # what each referenced stack exports

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        if args.typ == STACK_REFERENCE:
            name = str(args.inputs.get("name", args.name))
            return name, {"name": name, "outputs": dict(self.stack_outputs.get(name, {})), "secretOutputNames": []}
        outputs = dict(args.inputs)
        if args.typ == SQS_QUEUE:
            name = outputs.get("name", args.name)
            outputs["arn"] = f"arn:aws:sqs:{self.region}:{self.account}:{name}"
            outputs["url"] = f"https://sqs.{self.region}.amazonaws.com/{self.account}/{name}"
            return outputs["url"], outputs
        physical = outputs.get("name")
        vhost = outputs.get("vhost", "/")
        return (f"{physical}@{vhost}" if physical else f"{args.name}_id"), outputs

    # pulumi declares (outputs, failures) but MockMonitor.Invoke takes a dict as well (and a tuple's None fails)
    def call(self, args: pulumi.runtime.MockCallArgs) -> dict[str, Any]:  # type: ignore[override]  # pulumi 3 Mocks
        return {}


# The fields of a registration kept apart above; what the SDK adds about the program's own source (its file and line,
# its stack) is left out: the same resource registered from another line is the same resource.
_KEPT_APART = frozenset(
    {"type", "name", "parent", "custom", "object", "protect", "dependencies", "provider", "propertyDependencies",
     "importId", "retainOnDelete", "sourcePosition", "stackTrace", "parentStackTraceHandle"}
)  # fmt: skip


def registration_options(request: Any) -> dict[str, Any]:
    """The options of a ``RegisterResourceRequest`` that are set (``ignoreChanges``, ``deleteBeforeReplace``,
    ``aliasSpecs``, ``additionalSecretOutputs``, …), camelCase as the engine reads them. The fields kept apart are
    cleared from a copy first: the inputs and the stack trace were most of the cost of turning a request into JSON
    (9,143 registrations: 1.3 s, now 0.2 s)."""
    options = type(request)()
    options.CopyFrom(request)
    for descriptor in request.DESCRIPTOR.fields:
        if descriptor.json_name in _KEPT_APART:
            options.ClearField(descriptor.name)
    return dict(json_format.MessageToDict(options))


class _CapturingMonitor(pulumi.runtime.mocks.MockMonitor):
    """The SDK's mock monitor, also keeping each registration with its options (parent, protect, …)."""

    def __init__(self, mocks: pulumi.runtime.Mocks, sink: list[RecordedResource] | None = None) -> None:
        super().__init__(mocks)
        self.recorded: list[RecordedResource] = sink if sink is not None else []
        self.outputs: dict[str, dict[str, Any]] = {}

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)  # type: ignore[no-untyped-call]  # pulumi MockMonitor
        if request.type != "pulumi:pulumi:Stack":
            self.recorded.append(
                RecordedResource(
                    type=request.type,
                    name=request.name,
                    inputs=pulumi.runtime.rpc.deserialize_properties(request.object),
                    custom=bool(request.custom),
                    urn=response.urn,
                    parent=request.parent or None,
                    protect=bool(request.protect),
                    retain_on_delete=bool(request.retainOnDelete),
                    provider=request.provider or None,
                    import_id=request.importId or None,
                    dependencies=tuple(request.dependencies),
                    property_dependencies={
                        key: tuple(value.urns) for key, value in request.propertyDependencies.items() if value.urns
                    },
                    options=registration_options(request),
                )
            )
        return response

    def RegisterResourceOutputs(self, request: Any) -> Any:
        """A component's ``register_outputs``: kept, since the policy pack sees a component's outputs (the engine's
        ``AnalyzeStack`` is given each resource's outputs: pulumi/pulumi ``pkg/resource/deploy/step_generator.go``)."""
        self.outputs[request.urn] = pulumi.runtime.rpc.deserialize_properties(request.outputs)
        return super().RegisterResourceOutputs(request)  # type: ignore[no-untyped-call]  # pulumi MockMonitor

    def with_outputs(self) -> list[RecordedResource]:
        return [
            dataclasses.replace(r, outputs=self.outputs[r.urn]) if r.urn in self.outputs else r for r in self.recorded
        ]


def record(
    build: Callable[[], Any],
    *,
    stack: str = "test",
    preview: bool = False,
    sink: list[RecordedResource] | None = None,
    stack_outputs: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[RecordedResource]:
    """Run ``build`` as a Pulumi program under recording mocks and return what it registered.

    Each call sets fresh mocks, so calls do not leak into each other. Raises whatever ``build``
    raises; pass ``sink`` to see what was registered before the error (a config error: nothing). ``build`` runs
    in the recording thread (``_in_the_recording_thread``): an ``Output`` it uses must be made inside it.
    """
    if threading.current_thread().name.startswith(_RECORDER_NAME):  # before anything of the outer one is reset
        raise RuntimeError("record() was called inside a recording's build: record each program on its own")
    monitor = _CapturingMonitor(RecordingMocks(stack_outputs=stack_outputs), sink)
    recorded: list[RecordedResource] = []

    def run() -> None:
        pulumi.runtime.set_mocks(monitor.mocks, project=PROJECT, stack=stack, preview=preview, monitor=monitor)

        @pulumi.runtime.test  # type: ignore[untyped-decorator]  # pulumi.runtime.test is unannotated
        def program() -> None:
            build()

        with _full_collections_deferred():  # the outputs joined too: a record copied each, each copy a collection
            program()
            recorded.extend(monitor.with_outputs())

    _in_the_recording_thread(run)
    return recorded


def _in_the_recording_thread(run: Callable[[], None]) -> None:
    """Run ``run`` in the process's recording thread and wait for it; raise what it raised.

    The SDK walks the whole Python stack for each resource it registers (``traceback.extract_stack`` in
    ``pulumi.runtime.resource._get_stack_trace``), so a recording made deep in a caller's stack (a test runner's,
    a command's) costs more per resource; a thread starts with a short stack. It is one thread for the process,
    with one event loop, as the caller's thread was: the SDK's ``RegisterResource`` calls run on the loop's
    executor threads, and each of them makes itself an event loop that nothing closes. ``record`` refuses a
    recording inside a recording: it would wait for the one thread forever."""
    _RECORDER.submit(run).result()


@contextlib.contextmanager
def _full_collections_deferred() -> Iterator[None]:
    """CPython's full collections, a hundredth as often while a recording runs: each walks every object the recording
    holds so far (every registration, its outputs and its record) to free next to nothing, more than half of a large
    recording's time (docs/measurements.md, ``check``). The process's thresholds are restored after. A real ``pulumi
    up`` records nothing, and gained nothing from it when measured."""
    young, middle, full = gc.get_threshold()
    gc.set_threshold(young, middle, 100 * full)
    try:
        yield
    finally:
        gc.set_threshold(young, middle, full)


_RECORDER_NAME = "pulumi-recording"
_RECORDER = ThreadPoolExecutor(
    max_workers=1,
    thread_name_prefix=_RECORDER_NAME,
    initializer=lambda: asyncio.set_event_loop(asyncio.new_event_loop()),
)


def by_type(resources: list[RecordedResource], type_token: str) -> Iterator[RecordedResource]:
    return (r for r in resources if r.type == type_token)


def import_file(resources: list[RecordedResource]) -> dict[str, Any]:
    """The ``pulumi import --file`` document of what exists already: every provider resource the program adopts
    (its ``import_id``, ``adoptExisting``'s) and every component (``component: true``) that holds one or holds no
    provider resource at all, each under its parent, which the file lists too (a resource whose parent it leaves out
    is left out with it). What the program would create (parking, combined policies, endpoint users: their components
    too, so a user renamed after discovery leaves nothing behind) is left to the ``pulumi up`` after.

    The file's shape: pulumi/pulumi's ``pulumi import`` command (``pkg/cmd/pulumi``, ``importFile`` and
    ``importSpec``: ``type``, ``name``, ``id``, ``parent``, ``component``, ``logicalName``)."""
    children: dict[str | None, list[RecordedResource]] = {}
    for resource in resources:
        children.setdefault(resource.parent, []).append(resource)

    def customs_under(urn: str) -> list[RecordedResource]:
        below = children.get(urn, [])
        return [r for r in below if r.custom] + [c for r in below if not r.custom for c in customs_under(r.urn)]

    def adopted(resource: RecordedResource) -> bool:
        if resource.custom:
            return resource.import_id is not None
        under = customs_under(resource.urn)
        return not under or any(r.import_id for r in under)

    by_urn = {r.urn: r for r in resources}

    def listed(resource: RecordedResource) -> bool:  # and its parent, so that every parent the file names is in it
        parent = by_urn.get(resource.parent) if resource.parent else None
        return adopted(resource) and (parent is None or listed(parent))

    kept = [r for r in resources if listed(r)]
    keys = {r.urn: f"r{i}" for i, r in enumerate(kept)}
    entries = []
    for resource in kept:
        entry: dict[str, Any] = {"type": resource.type, "name": keys[resource.urn], "logicalName": resource.name}
        if resource.custom:
            entry["id"] = resource.import_id
        else:
            entry["component"] = True
        if resource.parent in keys:
            entry["parent"] = keys[resource.parent]
        entries.append(entry)
    return {"resources": entries}
