"""The topology operator's custom resources declare what the Pulumi program registers: read back, each queue,
exchange, binding, policy, user and grant of the recording is there once with the same arguments and types; every
``spec`` is valid against the operator's own CRDs (v1.20.1, vendored in tests/unit/vendor/topology-operator), with
no field the CRD would prune; names are valid and unique. (The engine tier declares them through the operator's
code: tests/engine/test_topology_operator.py.)"""

from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from nsb_delays.components.recording import RecordedResource
from nsb_delays.components.resource_types import (
    RABBITMQ_BINDING,
    RABBITMQ_EXCHANGE,
    RABBITMQ_PERMISSIONS,
    RABBITMQ_POLICY,
    RABBITMQ_QUEUE,
    RABBITMQ_TOPIC_PERMISSIONS,
    RABBITMQ_USER,
)
from nsb_delays.infra.cli import cli
from nsb_delays.infra.program import record_stack
from nsb_delays.infra.render import topology_operator
from nsb_delays.infra.render.topology_operator import (
    API_VERSION,
    ClusterReference,
    TopologyOperatorRenderError,
    credential_secrets,
    credentials_secret_name,
    dump_topology,
    object_name,
    topology_documents,
)
from nsb_delays.stack.config import StackConfig, parse_stack_config
from nsb_delays.stack.stack_file import load_stack
from tests.unit.test_render_terraform import WITH_USERS

VENDOR = Path(__file__).parent / "vendor" / "topology-operator"
CLUSTER = ClusterReference("rabbitmq", "messaging")
SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
CRD_FILES = {
    "Queue": "queues", "Exchange": "exchanges", "Binding": "bindings", "Policy": "policies",
    "OperatorPolicy": "operatorpolicies", "User": "users", "Permission": "permissions",
    "TopicPermission": "topicpermissions",
}  # fmt: skip
STACKS = {"dev": lambda: load_stack("dev"), "users": lambda: parse_stack_config(WITH_USERS, "dev")}


def topology_stream(stack: StackConfig) -> str:
    """The YAML stream ``render --format topology-operator`` writes for ``stack`` as stack ``dev``."""
    return dump_topology(topology_documents(stack, "dev", CLUSTER), "dev")


def integers(value: Any) -> Any:
    """The engine's floats as the integers they stand for (what a broker compares)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: integers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [integers(v) for v in value]
    return value


def read_back(document: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A document as the Pulumi resource type and the inputs the broker compares."""
    spec, kind = document["spec"], document["kind"]
    if kind == "Queue":
        arguments = {**spec.get("arguments", {}), **({"x-queue-type": spec["type"]} if "type" in spec else {})}
        return RABBITMQ_QUEUE, {"name": spec["name"], "vhost": spec["vhost"], "durable": spec["durable"],
                                "autoDelete": spec["autoDelete"], "arguments": arguments,
                                "retained": spec["deletionPolicy"] == "retain"}  # fmt: skip
    if kind == "Exchange":
        keys = ("name", "vhost", "type", "durable", "autoDelete")
        return RABBITMQ_EXCHANGE, {**{k: spec[k] for k in keys}, "arguments": spec.get("arguments", {})}
    if kind == "Binding":
        keys = ("vhost", "source", "destination", "destinationType", "routingKey")
        return RABBITMQ_BINDING, {**{k: spec[k] for k in keys}, "arguments": spec.get("arguments", {})}
    if kind == "Policy":
        keys = ("name", "vhost", "pattern", "applyTo", "priority")
        return RABBITMQ_POLICY, {**{k: spec[k] for k in keys}, "definition": spec["definition"]}
    if kind == "User":
        return RABBITMQ_USER, {"name": document["metadata"]["annotations"]["nsb-delays.io/username"],
                               "tags": spec.get("tags", [])}  # fmt: skip
    if kind == "Permission":
        return RABBITMQ_PERMISSIONS, {"user": spec["user"], "vhost": spec["vhost"], "permissions": spec["permissions"]}
    assert kind == "TopicPermission", kind
    return RABBITMQ_TOPIC_PERMISSIONS, {"user": spec["user"], "vhost": spec["vhost"], **spec["permissions"]}


def expected(resource: RecordedResource) -> list[dict[str, Any]]:
    """What the broker gets from the Pulumi provider for ``resource``, in ``read_back``'s terms."""
    inputs, settings = resource.inputs, resource.settings()
    vhost = inputs.get("vhost", "/")
    if resource.type == RABBITMQ_QUEUE:
        return [{"name": inputs["name"], "vhost": vhost, "durable": settings["durable"],
                 "autoDelete": settings.get("autoDelete", False), "arguments": integers(resource.queue_arguments()),
                 "retained": resource.retain_on_delete}]  # fmt: skip
    if resource.type == RABBITMQ_EXCHANGE:
        return [
            {
                "name": inputs["name"],
                "vhost": vhost,
                "type": settings["type"],
                "durable": settings["durable"],
                "autoDelete": settings.get("autoDelete", False),
                "arguments": settings.get("arguments") or {},
            }
        ]
    if resource.type == RABBITMQ_BINDING:
        keys = ("source", "destination", "destinationType", "routingKey")
        return [{"vhost": vhost, **{k: inputs[k] for k in keys}, "arguments": inputs.get("arguments") or {}}]
    if resource.type == RABBITMQ_POLICY:
        policy = inputs["policy"]
        # the provider sends a definition's integer strings as integers (resource_policy.go putPolicy)
        definition = {k: int(v) if isinstance(v, str) and v.isdigit() else v for k, v in policy["definition"].items()}
        return [{"name": inputs["name"], "vhost": vhost, "pattern": policy["pattern"], "applyTo": policy["applyTo"],
                 "priority": int(policy["priority"]), "definition": integers(definition)}]  # fmt: skip
    if resource.type == RABBITMQ_USER:
        return [{"name": inputs["name"], "tags": inputs.get("tags", [])}]
    if resource.type == RABBITMQ_PERMISSIONS:
        return [{"user": inputs["user"], "vhost": vhost, "permissions": inputs["permissions"]}]
    assert resource.type == RABBITMQ_TOPIC_PERMISSIONS, resource.type
    return [{"user": inputs["user"], "vhost": vhost, **grant} for grant in inputs["permissions"]]


def key(type_token: str, body: dict[str, Any]) -> str:
    return type_token + json.dumps(body, sort_keys=True)


@pytest.mark.parametrize("stack", list(STACKS))
def test_each_broker_object_of_the_program_is_declared_once_with_the_same_arguments_and_types(stack: str) -> None:
    config = STACKS[stack]()
    documents = topology_documents(config, "dev", CLUSTER)
    recorded = [r for r in record_stack(config, stack="dev") if r.custom and r.type.startswith("rabbitmq:")]
    rendered = Counter(key(*read_back(document)) for document in documents)
    wanted = Counter(key(r.type, body) for r in recorded for body in expected(r))
    assert rendered == wanted
    assert all(count == 1 for count in rendered.values())
    kinds = Counter(document["kind"] for document in documents)
    assert kinds["Queue"] == sum(r.type == RABBITMQ_QUEUE for r in recorded) > 0
    if stack == "users":
        assert {"User", "Permission", "TopicPermission"} <= set(kinds)


def test_integers_stay_integers_and_the_queue_type_is_the_spec_type() -> None:
    documents = topology_documents(load_stack("dev"), "dev", CLUSTER)
    delay_level = next(d for d in documents if d["kind"] == "Queue" and d["spec"]["name"] == "nsb.v2.delay-level-27")
    assert delay_level["spec"]["type"] == "quorum"
    assert "x-queue-type" not in delay_level["spec"]["arguments"]
    ttl = delay_level["spec"]["arguments"]["x-message-ttl"]
    assert isinstance(ttl, int) and ttl == 2**27 * 1000
    text = topology_stream(load_stack("dev"))
    assert "x-message-ttl: 134217728000\n" in text  # a YAML integer, not a string or a float
    policies = [d for d in documents if d["kind"] == "Policy"]
    assert all(isinstance(d["spec"]["priority"], int) for d in policies)


def crd_spec_schema(kind: str) -> dict[str, Any]:
    """The CRD's ``openAPIV3Schema`` of ``spec`` at v1beta1, strict: an object with ``properties`` and without
    ``x-kubernetes-preserve-unknown-fields`` takes no other field (the API server would prune it silently)."""
    crd = yaml.safe_load((VENDOR / f"rabbitmq.com_{CRD_FILES[kind]}.yaml").read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1beta1"]
    assert crd["spec"]["names"]["kind"] == kind
    return dict(strict(version["schema"]["openAPIV3Schema"]["properties"]["spec"]))


def strict(schema: Any) -> Any:
    if isinstance(schema, dict):
        schema = {k: strict(v) for k, v in schema.items()}
        if "properties" in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
            schema.setdefault("additionalProperties", False)
        return schema
    return [strict(item) for item in schema] if isinstance(schema, list) else schema


@pytest.mark.parametrize("stack", list(STACKS))
def test_every_document_is_valid_against_the_operators_crd(stack: str) -> None:
    documents = list(yaml.safe_load_all(topology_stream(STACKS[stack]())))
    schemas = {kind: crd_spec_schema(kind) for kind in {d["kind"] for d in documents}}
    for document in documents:
        assert document["apiVersion"] == API_VERSION
        assert set(document) == {"apiVersion", "kind", "metadata", "spec"}
        jsonschema.validate(document["spec"], schemas[document["kind"]])
        assert document["spec"]["rabbitmqClusterReference"] == {"name": "rabbitmq", "namespace": "messaging"}
        if document["kind"] != "User":
            assert document["spec"]["vhost"] == "/"


def test_the_crd_schemas_refuse_what_they_should() -> None:
    """The strict schemas catch a field the operator does not have and a wrong enum (so the test above can fail)."""
    queue = crd_spec_schema("Queue")
    reference = {"name": "rabbitmq"}
    jsonschema.validate({"name": "q", "rabbitmqClusterReference": reference, "deletionPolicy": "retain"}, queue)
    for bad in ({"deletionPolicy": "keep"}, {"arguments": "x"}, {"exclusive": True}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({"name": "q", "rabbitmqClusterReference": reference, **bad}, queue)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(
            {"rabbitmqClusterReference": reference, "destinationType": "topic"}, crd_spec_schema("Binding")
        )


def test_the_crds_are_v1_20_1s_and_only_the_queue_of_the_kinds_has_a_deletion_policy() -> None:
    for kind in CRD_FILES:
        has_policy = "deletionPolicy" in crd_spec_schema(kind)["properties"]
        assert has_policy == (kind == "Queue"), kind


@pytest.mark.parametrize("stack", list(STACKS))
def test_names_are_dns_1123_subdomains_unique_per_kind(stack: str) -> None:
    documents = topology_documents(STACKS[stack](), "dev", CLUSTER)
    names = Counter((d["kind"], d["metadata"]["name"]) for d in documents)
    assert all(count == 1 for count in names.values())
    for _, name in names:
        assert len(name) <= 253 and SUBDOMAIN.match(name), name


def test_object_names_keep_a_valid_name_and_hash_a_changed_one() -> None:
    assert object_name("rabbitmq-shared-queues-error") == "rabbitmq-shared-queues-error"
    assert object_name("rabbitmq-delays-v2-nsb.v2.delay-level-27") == "rabbitmq-delays-v2-nsb.v2.delay-level-27"
    assert re.fullmatch(r"rabbitmq-billing-billing-[0-9a-f]{8}", object_name("rabbitmq-Billing-Billing"))
    # names that would be equal once lower-cased or once their other characters are replaced are not
    colliding = ["Sales", "sales", "SALES", "a_b", "a-b", "a b", "a/b", "a.b", "_a", "a", "-a-", "a__b", "a_-b",
                 "a..b", "a.-b", "a-.b", "a._b", ".a"]  # fmt: skip
    made = [object_name(name) for name in colliding]
    assert len(set(made)) == len(colliding), made
    for name in [*made, object_name("_" * 10), object_name("x" * 300), object_name("Y" * 300), object_name("é")]:
        assert len(name) <= 253 and SUBDOMAIN.match(name), name
    assert object_name("x" * 300) != object_name("x" * 301)
    assert (
        credentials_secret_name("rabbitmq-user-sales-user-3afd7e6c") == "rabbitmq-user-sales-user-3afd7e6c-credentials"
    )
    assert len(credentials_secret_name("x" * 253)) <= 253


def test_a_user_imports_its_credentials_from_a_secret_named_for_it() -> None:
    documents = topology_documents(parse_stack_config(WITH_USERS, "dev"), "dev", CLUSTER)
    (user,) = [d for d in documents if d["kind"] == "User"]
    assert user["spec"]["importCredentialsSecret"] == {"name": credentials_secret_name(user["metadata"]["name"])}
    assert user["metadata"]["annotations"]["nsb-delays.io/password-key"] == "salesPassword"
    assert not [d for d in documents if d["kind"] == "Secret"]
    assert "password" not in repr(user["spec"]).lower().replace("credentials", "")
    secret = user["spec"]["importCredentialsSecret"]["name"]
    assert credential_secrets(documents) == [(secret, user["metadata"]["annotations"]["nsb-delays.io/username"],
                                              "salesPassword")]  # fmt: skip


def test_the_command_names_each_secret_to_create_first(tmp_path: Path) -> None:
    stack_file = tmp_path / "Pulumi.dev.yaml"
    stack_file.write_text(yaml.safe_dump({"config": {f"nsb-delays:{key}": value for key, value in WITH_USERS.items()}}))
    result = CliRunner().invoke(
        cli, ["render", "--stack", str(stack_file), "--format", "topology-operator", "--cluster", "rabbitmq"]
    )
    assert result.exit_code == 0, result.output
    ((secret, user, _),) = credential_secrets(yaml.safe_load_all(result.stdout))
    assert f"create first: Secret {secret} (username {user}, password the stack's salesPassword)" in result.stderr


def test_the_namespace_is_left_out_when_not_given() -> None:
    documents = topology_documents(load_stack("dev"), "dev", ClusterReference("rabbitmq"))
    assert {repr(d["spec"]["rabbitmqClusterReference"]) for d in documents} == {"{'name': 'rabbitmq'}"}


def test_what_cannot_be_expressed_is_refused() -> None:
    with pytest.raises(TopologyOperatorRenderError, match="no nsb-delays:rabbitmq section"):
        topology_documents(StackConfig(), "empty", CLUSTER)
    sqs_only = parse_stack_config({"sqs": {"endpoints": ["Sales"]}}, "dev")
    with pytest.raises(TopologyOperatorRenderError, match="'dev' has an nsb-delays:sqs section only"):
        topology_documents(sqs_only, "dev", CLUSTER)
    with pytest.raises(TopologyOperatorRenderError, match="--cluster"):
        topology_documents(load_stack("dev"), "dev", ClusterReference(""))


def test_the_command_writes_the_file_and_refuses_before_writing(tmp_path: Path) -> None:
    output = tmp_path / "topology.yaml"
    base = ["render", "--stack", "dev", "--format", "topology-operator", "-o", str(output)]
    refused = CliRunner().invoke(cli, base)
    assert refused.exit_code == 2 and "--cluster NAME" in refused.output and not output.exists()
    assert refused.exception is None or isinstance(refused.exception, SystemExit)
    other = CliRunner().invoke(cli, ["render", "--stack", "dev", "--format", "mermaid", "--cluster", "rabbitmq"])
    assert other.exit_code == 2 and "apply only to --format topology-operator" in other.output
    written = CliRunner().invoke(cli, [*base, "--cluster", "rabbitmq", "--namespace", "messaging"])
    assert written.exit_code == 0, written.output
    assert output.read_text() == topology_stream(load_stack("dev"))
    stdout = CliRunner().invoke(cli, [*base[:-2], "--cluster", "rabbitmq", "--namespace", "messaging"])
    assert stdout.exit_code == 0 and stdout.stdout == output.read_text()
    assert "note: the nsb-delays:sqs section is not in the topology-operator file" in stdout.stderr


def test_a_recording_the_operator_cannot_keep_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """An exchange the program retains (only a Queue has a deletionPolicy in v1.20.1), and an integer the operator's
    float64 decoding would change (beyond 2**53), are refused, naming the resource."""
    config = load_stack("dev")
    recorded = record_stack(config, stack="dev")

    def changed(resource: RecordedResource) -> RecordedResource:
        if resource.type == RABBITMQ_EXCHANGE and resource.inputs.get("name") == "error":
            return dataclasses.replace(resource, retain_on_delete=True)
        return resource

    monkeypatch.setattr(topology_operator, "record_stack", lambda *_, **__: [changed(r) for r in recorded])
    with pytest.raises(TopologyOperatorRenderError, match="retains or protects rabbitmq-shared-queues-error: "):
        topology_documents(config, "dev", CLUSTER)

    def huge(resource: RecordedResource) -> RecordedResource:
        if resource.type == RABBITMQ_QUEUE and resource.inputs.get("name") == "nsb.v2.delay-level-00":
            settings = {**resource.settings(), "argumentsJson": json.dumps({"x-message-ttl": 2**53 + 1})}
            return dataclasses.replace(resource, inputs={**resource.inputs, "settings": settings})
        return resource

    monkeypatch.setattr(topology_operator, "record_stack", lambda *_, **__: [huge(r) for r in recorded])
    with pytest.raises(TopologyOperatorRenderError, match=r"x-message-ttl = 9007199254740993 is beyond 2\*\*53"):
        topology_documents(config, "dev", CLUSTER)


@given(st.text(max_size=300))
def test_any_pulumi_name_makes_a_valid_name(pulumi_name: str) -> None:
    name = object_name(pulumi_name)
    assert len(name) <= 253 and SUBDOMAIN.match(name), (pulumi_name, name)
    assert object_name(name) == name  # a valid name is kept


def test_the_cluster_comes_from_the_stack_unless_an_option_gives_it(tmp_path: Path) -> None:
    """``nsb-delays:topologyOperator`` gives the cluster and its namespace; ``--cluster`` and ``--namespace`` each
    override their key; with neither, the render is refused naming both, and nothing is written."""
    stack_file = tmp_path / "Pulumi.dev.yaml"
    section = {"nsb-delays:rabbitmq": {"endpoints": ["Sales"]}}

    def references(*options: str, operator: dict[str, str] | None = None) -> Any:
        config = section | ({"nsb-delays:topologyOperator": operator} if operator is not None else {})
        stack_file.write_text(yaml.safe_dump({"config": config}))
        output = tmp_path / "topology.yaml"
        output.unlink(missing_ok=True)
        result = CliRunner().invoke(
            cli, ["render", "--stack", str(stack_file), "--format", "topology-operator", "-o", str(output), *options]
        )
        if result.exit_code != 0:
            assert not output.exists()
            return result.output
        documents = list(yaml.safe_load_all(output.read_text()))
        return {repr(document["spec"]["rabbitmqClusterReference"]) for document in documents}

    stack_only = references(operator={"cluster": "main", "namespace": "messaging"})
    assert stack_only == {repr({"name": "main", "namespace": "messaging"})}
    overridden = references("--cluster", "other", operator={"cluster": "main", "namespace": "messaging"})
    assert overridden == {repr({"name": "other", "namespace": "messaging"})}
    assert references("--cluster", "other") == {repr({"name": "other"})}
    refused = references(operator={"namespace": "messaging"})
    assert "give --cluster NAME, or set nsb-delays:topologyOperator.cluster in the stack" in refused
