"""The pack behind the analyzer's own gRPC servicer (no server started): protobuf requests in, diagnostics out.

This is the path `pulumi preview --policy-pack policies` takes (Struct -> MessageToDict -> deserialize ->
unknown_checking_proxy, config through Configure), so it checks that the offline runner is faithful.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from google.protobuf import struct_pb2
from pulumi.runtime.proto import analyzer_pb2
from pulumi_policy import EnforcementLevel
from pulumi_policy.deserialize import SPECIAL_SECRET_SIG, SPECIAL_SIG_KEY
from pulumi_policy.policy import _PolicyAnalyzerServicer
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE

from nsb_delays.components.recording import RecordedResource
from nsb_delays.policies.pack import PACK_NAME, POLICIES
from tests.unit.test_policies import changed, dev_recorded, level_queue, providers_for, set_queue_argument
from tests.unit.test_policies_stack import touches

MANDATORY = analyzer_pb2.MANDATORY


def servicer(config: Mapping[str, Mapping[str, Any]] | None = None) -> _PolicyAnalyzerServicer:
    analyzer = _PolicyAnalyzerServicer(PACK_NAME, "0.1.0", POLICIES, EnforcementLevel.ADVISORY)
    if config:
        request = analyzer_pb2.ConfigureAnalyzerRequest()
        for name, values in config.items():
            properties = struct_pb2.Struct()
            properties.update(dict(values))
            level = values.get("enforcementLevel", "mandatory")
            request.policyConfig[name].CopyFrom(
                analyzer_pb2.PolicyConfig(
                    enforcementLevel=analyzer_pb2.EnforcementLevel.Value(level.upper()), properties=properties
                )
            )
        analyzer.Configure(request, None)
    return analyzer


def struct(inputs: Mapping[str, Any]) -> struct_pb2.Struct:
    value = struct_pb2.Struct()
    value.update(json.loads(json.dumps(inputs)))
    return value


def options(resource: RecordedResource) -> analyzer_pb2.AnalyzerResourceOptions:
    secret = [
        k for k, v in resource.inputs.items() if isinstance(v, dict) and v.get(SPECIAL_SIG_KEY) == SPECIAL_SECRET_SIG
    ]
    return analyzer_pb2.AnalyzerResourceOptions(
        protect=resource.protect, additionalSecretOutputs=secret, parent=resource.parent or ""
    )


def provider_message(resource: RecordedResource) -> analyzer_pb2.AnalyzerProviderResource | None:
    default = next(
        (p for p in providers_for(dev_recorded()) if p.type.endswith(":" + resource.type.split(":")[0])), None
    )
    if default is None or not resource.custom:
        return None
    return analyzer_pb2.AnalyzerProviderResource(
        type=default.type, properties=struct(default.inputs), urn=default.urn, name=default.name
    )


def analyze(resources: Iterable[RecordedResource], analyzer: _PolicyAnalyzerServicer | None = None) -> list[Any]:
    analyzer = analyzer or servicer()
    diagnostics: list[Any] = []
    for resource in resources:
        request = analyzer_pb2.AnalyzeRequest(
            type=resource.type,
            properties=struct(resource.inputs),
            urn=resource.urn,
            name=resource.name,
            options=options(resource),
            provider=provider_message(resource),
        )
        diagnostics += list(analyzer.Analyze(request, None).diagnostics)
    return diagnostics


def analyze_stack(resources: Iterable[RecordedResource]) -> list[Any]:
    request = analyzer_pb2.AnalyzeStackRequest(
        resources=[
            analyzer_pb2.AnalyzerResource(
                type=r.type,
                properties=struct(r.inputs),
                urn=r.urn,
                name=r.name,
                options=options(r),
                provider=provider_message(r),
                parent=r.parent or "",
            )
            for r in resources
        ]
    )
    return list(servicer().AnalyzeStack(request, None).diagnostics)


def test_the_dev_stack_passes_through_the_analyzer() -> None:
    recorded = [*dev_recorded(), *providers_for(dev_recorded())]
    assert analyze(recorded) == []
    assert analyze_stack(recorded) == []


def test_a_wrong_ttl_is_a_mandatory_diagnostic() -> None:
    target = level_queue(5)
    diagnostics = analyze(
        [r for r in changed(dev_recorded(), target, set_queue_argument("x-message-ttl", 1)) if r.name == target.name]
    )
    assert [(d.policyName, d.enforcementLevel) for d in diagnostics] == [("delay-level-queue-arguments", MANDATORY)]
    assert "'x-message-ttl' is 1" in diagnostics[0].message


def test_an_unknown_value_produces_no_diagnostic_at_all() -> None:
    """Not even the engine's 'can't run policy during preview' advisory: the rule skipped the check."""
    target = level_queue(5)
    unknown = changed(dev_recorded(), target, lambda i: i["settings"].update(argumentsJson=UNKNOWN_STRING_VALUE))
    assert analyze(r for r in unknown if r.name == target.name) == []


def test_configure_flips_a_threshold() -> None:
    analyzer = servicer({"sqs-delay-queue-retention": {"minRetentionSeconds": 1209600}})
    diagnostics = analyze(dev_recorded(), analyzer)
    assert {d.policyName for d in diagnostics} == {"sqs-delay-queue-retention"} and len(diagnostics) == 3


def test_a_missing_level_is_a_stack_diagnostic_with_the_referring_urn() -> None:
    missing = "nsb.v2.delay-level-05"
    diagnostics = analyze_stack(r for r in dev_recorded() if not touches(r, missing))
    assert [d.policyName for d in diagnostics] == ["delay-level-chain-complete"] * 2
    assert {d.urn for d in diagnostics} == {level_queue(6).urn, ""}
