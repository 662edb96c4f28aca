"""The component provider's ``SqsEndpoint`` as the Pulumi engine drives it: a real plugin process, called over gRPC.

The RabbitMQ components go through the real engine (``tests/engine/test_components_from_other_languages.py``: a YAML program
up on a broker). ``SqsEndpoint`` cannot: its children need pulumi-aws's provider, which does not build from Go
modules here (its upstream is patched). So for it this test stands in for the engine. The engine's
Python language host starts a source-based plugin as ``python <plugin directory> <engine address>``
(pulumi/pulumi ``sdk/python/cmd/pulumi-language-python/main.go``, ``RunPlugin``); the plugin
(``provider.serve`` -> ``pulumi.provider.server.main``) prints the port of its
``ResourceProvider`` gRPC server on stdout. The engine then calls ``GetPluginInfo``, ``GetSchema``,
``Configure`` and, for each component in the program, ``Construct`` with the address of its
resource monitor, where the component registers itself and its children.

It lives in the broker tier for its time (a plugin process), not for a service. Here the test is the engine and the resource monitor: it records every ``RegisterResource`` and
answers like the engine (URN ``urn:pulumi:<stack>::<project>::<parent types>$<type>::<name>``,
a custom resource's inputs echoed as its outputs), then compares the registrations with what the
Python components register under ``components.recording`` for the same arguments.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import empty_pb2, json_format, struct_pb2
from pulumi.runtime.proto import (
    engine_pb2,
    engine_pb2_grpc,
    provider_pb2,
    provider_pb2_grpc,
    resource_pb2,
    resource_pb2_grpc,
)

from nsb_delays.components import rabbitmq, sqs
from nsb_delays.components.provider import PACKAGE
from nsb_delays.components.recording import PROJECT, RecordedResource, record
from nsb_delays.components.resource_types import SQS_QUEUE

COMPONENTS_DIR = Path(rabbitmq.__file__).parent
STACK = "test"
STACK_URN = f"urn:pulumi:{STACK}::{PROJECT}::pulumi:pulumi:Stack::{PROJECT}-{STACK}"
SIGNATURE = "4dabf18193072939515e22adb298388d"
SECRET, OUTPUT_VALUE, RESOURCE_REFERENCE = (
    "1b47061264138c4ac30d75fd1eb44270",
    "d0e6a833031e9bbcd3f4e8bde6ca49a4",
    "5cf8f73096256a8f31e491e813e4eb8e",
)
# What the engine's resource monitor supports (pkg/resource/deploy/source_eval.go, SupportsFeature).
ENGINE_FEATURES = [
    resource_pb2.RESOURCE_MONITOR_FEATURE_SECRETS,
    resource_pb2.RESOURCE_MONITOR_FEATURE_RESOURCE_REFERENCES,
    resource_pb2.RESOURCE_MONITOR_FEATURE_OUTPUT_VALUES,
    resource_pb2.RESOURCE_MONITOR_FEATURE_ALIAS_SPECS,
    resource_pb2.RESOURCE_MONITOR_FEATURE_DELETED_WITH,
]


def plain(value: Any) -> Any:
    """A wire value with the engine's special objects (secrets, output values, references) unwrapped."""
    if isinstance(value, dict):
        signature = value.get(SIGNATURE)
        if signature in (SECRET, OUTPUT_VALUE):
            return plain(value.get("value"))
        if signature == RESOURCE_REFERENCE:
            return value["urn"]
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


def struct_to_plain(struct: struct_pb2.Struct) -> dict[str, Any]:
    return plain(json_format.MessageToDict(struct))


@dataclass
class Registration:
    """One ``RegisterResource`` the monitor received, in the terms ``RecordedResource`` uses."""

    type: str
    name: str
    urn: str
    custom: bool
    parent: str | None
    inputs: dict[str, Any]
    protect: bool
    retain_on_delete: bool
    import_id: str | None
    dependencies: tuple[str, ...]
    property_dependencies: dict[str, tuple[str, ...]]


@dataclass
class EngineAndMonitor(engine_pb2_grpc.EngineServicer, resource_pb2_grpc.ResourceMonitorServicer):
    """The engine's ``Engine`` service (logs) and resource monitor, recording every registration."""

    registrations: list[Registration] = field(default_factory=list)
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    logs: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    # Engine
    def Log(self, request: engine_pb2.LogRequest, context: Any) -> empty_pb2.Empty:
        self.logs.append(request.message)
        return empty_pb2.Empty()

    def GetRootResource(self, request: Any, context: Any) -> engine_pb2.GetRootResourceResponse:
        return engine_pb2.GetRootResourceResponse(urn=STACK_URN)

    def SetRootResource(self, request: Any, context: Any) -> engine_pb2.SetRootResourceResponse:
        return engine_pb2.SetRootResourceResponse()

    # ResourceMonitor
    def GetDeploymentInfo(self, request: Any, context: Any) -> resource_pb2.DeploymentInfo:
        return resource_pb2.DeploymentInfo(project=PROJECT, stack=STACK, supportedFeatures=ENGINE_FEATURES)

    def SupportsFeature(self, request: Any, context: Any) -> resource_pb2.SupportsFeatureResponse:
        names = {"secrets", "resourceReferences", "outputValues", "aliasSpecs", "deletedWith"}
        return resource_pb2.SupportsFeatureResponse(hasSupport=request.id in names)

    def RegisterResource(
        self, request: resource_pb2.RegisterResourceRequest, context: Any
    ) -> resource_pb2.RegisterResourceResponse:
        parent_types = ""
        if request.parent and request.parent != STACK_URN:
            parent_types = request.parent.split("::")[2] + "$"
        urn = f"urn:pulumi:{STACK}::{PROJECT}::{parent_types}{request.type}::{request.name}"
        inputs = struct_to_plain(request.object)
        registration = Registration(
            type=request.type,
            name=request.name,
            urn=urn,
            custom=request.custom,
            parent=request.parent or None,
            inputs=inputs,
            protect=request.protect,
            retain_on_delete=request.retainOnDelete,
            import_id=request.importId or None,
            dependencies=tuple(request.dependencies),
            property_dependencies={k: tuple(v.urns) for k, v in request.propertyDependencies.items() if v.urns},
        )
        with self.lock:
            self.registrations.append(registration)
        if not request.custom:
            return resource_pb2.RegisterResourceResponse(urn=urn)
        outputs = dict(inputs)  # a created resource's outputs start from its inputs
        if request.type == SQS_QUEUE:
            outputs["url"] = f"https://sqs.us-east-1.amazonaws.com/123456789012/{inputs['name']}"
            outputs["arn"] = f"arn:aws:sqs:us-east-1:123456789012:{inputs['name']}"
            physical_id = outputs["url"]
        else:
            physical_id = f"{inputs.get('name', request.name)}@{inputs.get('vhost', '/')}"
        response_object = struct_pb2.Struct()
        response_object.update(outputs)
        return resource_pb2.RegisterResourceResponse(urn=urn, id=physical_id, object=response_object)

    def RegisterResourceOutputs(self, request: Any, context: Any) -> empty_pb2.Empty:
        with self.lock:
            self.outputs[request.urn] = struct_to_plain(request.outputs)
        return empty_pb2.Empty()

    def SignalAndWaitForShutdown(self, request: Any, context: Any) -> empty_pb2.Empty:
        return empty_pb2.Empty()


@dataclass
class PluginSession:
    engine: EngineAndMonitor
    monitor_address: str
    provider: provider_pb2_grpc.ResourceProviderStub
    stderr: list[str]

    def construct(self, type_name: str, name: str, inputs: dict[str, Any]) -> provider_pb2.ConstructResponse:
        struct = struct_pb2.Struct()
        struct.update(inputs)
        request = provider_pb2.ConstructRequest(
            project=PROJECT,
            stack=STACK,
            dryRun=False,
            parallel=4,
            monitorEndpoint=self.monitor_address,
            type=f"{PACKAGE}:index:{type_name}",
            name=name,
            parent=STACK_URN,
            inputs=struct,
            organization="organization",
            accepts_output_values=True,
        )
        return self.provider.Construct(request, timeout=60)

    def registered_under(self, component_urn: str) -> list[Registration]:
        return [r for r in self.engine.registrations if r.urn == component_urn or r.parent == component_urn]


@pytest.fixture(scope="module")
def plugin() -> Iterator[PluginSession]:
    engine = EngineAndMonitor()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    engine_pb2_grpc.add_EngineServicer_to_server(engine, server)
    resource_pb2_grpc.add_ResourceMonitorServicer_to_server(engine, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    address = f"127.0.0.1:{port}"
    process = subprocess.Popen(
        [sys.executable, str(COMPONENTS_DIR), address],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stderr: list[str] = []
    threading.Thread(target=lambda: stderr.extend(process.stderr or []), daemon=True).start()
    try:
        line = process.stdout.readline() if process.stdout else ""
        assert line.strip().isdigit(), f"the plugin did not print its port: {line!r} {''.join(stderr)}"
        channel = grpc.insecure_channel(f"127.0.0.1:{line.strip()}")
        yield PluginSession(engine, address, provider_pb2_grpc.ResourceProviderStub(channel), stderr)
        channel.close()
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        server.stop(None)


def engine_urn(urn: str) -> str:
    """The SDK's mock monitor keeps the root stack in a child's type chain; the engine leaves it out
    (pulumi/pulumi ``pkg/resource/deploy/deployment.go``, ``generateURN``)."""
    return urn.replace("::pulumi:pulumi:Stack$", "::")


def comparable(resource: RecordedResource | Registration) -> tuple:
    return (
        resource.type,
        resource.name,
        engine_urn(resource.urn),
        resource.custom,
        json.dumps(resource.inputs, sort_keys=True),
        resource.protect,
        resource.retain_on_delete,
        resource.import_id,
        {key: tuple(map(engine_urn, urns)) for key, urns in resource.property_dependencies.items()},
    )


@dataclass(frozen=True)
class Case:
    """A component constructed over gRPC from camelCase inputs, and the same call in Python."""

    component: str
    name: str
    inputs: dict[str, Any]
    python: Callable[[str], Any]


CASES = [
    Case(
        "SqsEndpoint",
        "orders",
        {"endpoint": "Sales.Orders", "queueNamePrefix": "prod-", "messageRetentionSeconds": 86400},
        lambda name: sqs.SqsEndpoint(
            name, {"endpoint": "Sales.Orders", "queue_name_prefix": "prod-", "message_retention_seconds": 86400}
        ),
    ),
]


def test_the_plugin_serves_the_package_schema(plugin: PluginSession) -> None:
    assert plugin.provider.GetPluginInfo(empty_pb2.Empty()).version == version(PACKAGE)
    schema = json.loads(plugin.provider.GetSchema(provider_pb2.GetSchemaRequest(version=0)).schema)
    assert f"{PACKAGE}:index:SqsEndpoint" in schema["resources"]
    assert plugin.provider.Configure(provider_pb2.ConfigureRequest(acceptSecrets=True)).acceptOutputs


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_construct_registers_what_the_python_component_registers(plugin: PluginSession, case: Case) -> None:
    """Same resources, URNs, inputs (camelCase, numbers as floats), options and property dependencies."""
    response = plugin.construct(case.component, case.name, case.inputs)
    over_grpc = plugin.registered_under(response.urn)
    in_python = record(lambda: case.python(case.name), stack=STACK)
    assert len(over_grpc) == len(in_python) > 1
    # registrations race each other over gRPC: compare them in URN order
    assert sorted(map(comparable, over_grpc), key=str) == sorted(map(comparable, in_python), key=str)
    assert struct_to_plain(response.state) == plugin.engine.outputs[response.urn]
