"""``nsb-delays verify`` finds no drift on a broker and SQS provisioned from the stack, and names each
deliberate breakage (wrong TTL, missing binding, missing endpoint binding, redrive policy on a
``-delay.fifo`` queue) with its expected and actual value."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pika
import pytest
import yaml
from click.testing import CliRunner

from nsb_delays.brokers.delivery import connection_parameters
from nsb_delays.brokers.management import ManagementApi
from nsb_delays.brokers.verify import (
    Drift,
    requirement_drifts,
    sqs_queue_drifts,
    topology_drifts,
    verify_rabbitmq,
    verify_sqs,
)
from nsb_delays.components.model import sqs
from nsb_delays.components.model.rabbitmq.graph import (
    delay_levels,
    delay_queue_arguments,
    endpoint_topology,
    level_ttl_ms,
)
from nsb_delays.components.model.rabbitmq.names import (
    Generation,
    QueueType,
    RoutingTopology,
    delay_level_name,
    delivery_exchange_name,
    endpoint_binding_key,
    lower_level_binding_key,
    queue_binding_key,
)
from nsb_delays.components.model.rabbitmq.objects import Topology
from nsb_delays.components.model.rabbitmq.versions import REQUIRED_FEATURE_FLAGS, parse_reported_broker_version
from nsb_delays.infra.cli import cli
from nsb_delays.stack.config import load_stack, parse_stack_config, read_stack_yaml
from servers.rabbitmq import LocalMoto, LocalRabbitMq
from tests.provisioning import provision_rabbitmq, provision_sqs_queues


@pytest.fixture
def aws_test_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")


def provisioned_stack(
    tmp_path: Path, rabbitmq: LocalRabbitMq, moto: LocalMoto, vhost: str, prefix: str, delivery_limit_policies: bool
) -> Path:
    """A copy of the dev stack file pointing at the test broker, applied to ``vhost`` and moto."""
    raw = read_stack_yaml("dev")
    raw["rabbitmq:endpoint"] = rabbitmq.management_url
    raw["nsb-delays:rabbitmq"]["vhost"] = vhost
    raw["nsb-delays:rabbitmq"]["deliveryLimitPolicies"] = delivery_limit_policies
    raw["nsb-delays:sqs"]["queueNamePrefix"] = prefix
    path = tmp_path / f"Pulumi.{vhost}.yaml"
    path.write_text(yaml.safe_dump({"config": raw}))
    stack = load_stack(str(path))
    provision_rabbitmq(rabbitmq.management_url, stack)
    provision_sqs_queues(moto, stack)
    return path


def run_verify(path: Path, rabbitmq: LocalRabbitMq, moto: LocalMoto, *options: str):
    return CliRunner().invoke(
        cli,
        [
            "verify", "--stack", str(path), "--management-url", rabbitmq.management_url,
            "--username", rabbitmq.username, "--password", rabbitmq.password,
            "--sqs-endpoint-url", moto.endpoint_url, *options,
        ],
    )  # fmt: skip


def test_a_provisioned_stack_has_no_drift(
    tmp_path: Path,
    rabbitmq: LocalRabbitMq,
    moto_server: LocalMoto,
    new_vhost,
    delivery_limit_policies: bool,
    aws_test_credentials,
) -> None:
    vhost = new_vhost("verify-ok")
    path = provisioned_stack(tmp_path, rabbitmq, moto_server, vhost, "verify-ok-", delivery_limit_policies)
    result = run_verify(path, rabbitmq, moto_server)
    assert result.exit_code == 0, result.output
    assert "no drift" in result.output and "0 drift(s)" in result.output


def test_each_breakage_is_reported_with_expected_and_actual(
    tmp_path: Path,
    rabbitmq: LocalRabbitMq,
    management: ManagementApi,
    moto_server: LocalMoto,
    new_vhost,
    delivery_limit_policies: bool,
    aws_test_credentials,
) -> None:
    vhost = new_vhost("verify-broken")
    path = provisioned_stack(tmp_path, rabbitmq, moto_server, vhost, "verify-broken-", delivery_limit_policies)
    stack = load_stack(str(path))
    # 1. level 3 queue re-declared with a wrong TTL (9 s instead of 8 s)
    level3 = delay_level_name(3, Generation.V2)
    management.delete_queue(vhost, level3)
    connection = pika.BlockingConnection(connection_parameters(rabbitmq.amqp_url, vhost))
    channel = connection.channel()
    wrong_ttl = level_ttl_ms(3) + 1000
    arguments = delay_queue_arguments(3, Generation.V2) | {"x-message-ttl": wrong_ttl}
    channel.queue_declare(level3, durable=True, arguments=arguments)
    channel.queue_bind(level3, level3, queue_binding_key(3))
    connection.close()
    # 2. the level 5 -> level 4 exchange binding removed; 3. Shipping's delivery binding removed
    live = management.bindings(vhost)
    (level_binding,) = [
        b for b in live if b["source"] == delay_level_name(5, Generation.V2) and b["destination_type"] == "exchange"
    ]
    (endpoint_binding,) = [
        b for b in live if b["source"] == delivery_exchange_name(Generation.V2) and b["destination"] == "Shipping"
    ]
    management.delete_binding(vhost, level_binding)
    management.delete_binding(vhost, endpoint_binding)
    # 4. a redrive policy on Billing's -delay.fifo queue
    client = moto_server.client("sqs")
    dead_letters = client.create_queue(QueueName="verify-broken-dlq.fifo", Attributes={"FifoQueue": "true"})
    dlq_arn = client.get_queue_attributes(QueueUrl=dead_letters["QueueUrl"], AttributeNames=["QueueArn"])
    redrive = json.dumps({"deadLetterTargetArn": dlq_arn["Attributes"]["QueueArn"], "maxReceiveCount": "5"})
    delay_queue = sqs.delay_queue_name("Billing", stack.sqs.queue_name_prefix)
    client.set_queue_attributes(
        QueueUrl=client.get_queue_url(QueueName=delay_queue)["QueueUrl"], Attributes={"RedrivePolicy": redrive}
    )

    result = run_verify(path, rabbitmq, moto_server, "--json")
    assert result.exit_code == 1, result.output
    drifts = [Drift(**d) for d in json.loads(result.output)["drifts"]]
    level5, level4 = delay_level_name(5, Generation.V2), delay_level_name(4, Generation.V2)
    delivery = delivery_exchange_name(Generation.V2)
    assert sorted(drifts) == sorted(
        [
            Drift("different", f"queue {level3}", "arguments.x-message-ttl", str(level_ttl_ms(3)), str(wrong_ttl)),
            Drift("missing", f"binding {level5} -> exchange {level4} ({lower_level_binding_key(5)!r})", "",
                  "bound", "(absent)"),
            Drift("missing", f"binding {delivery} -> exchange Shipping ({endpoint_binding_key('Shipping')!r})", "",
                  "bound", "(absent)"),
            Drift("unexpected", f"SQS queue {delay_queue}", "RedrivePolicy", "(absent)", redrive_seen(client, delay_queue)),
        ]
    )  # fmt: skip
    table = run_verify(path, rabbitmq, moto_server)
    assert table.exit_code == 1
    assert "4 drift(s)" in table.output
    assert f"arguments.x-message-ttl │ {level_ttl_ms(3)}     │ {wrong_ttl}" in table.output


def redrive_seen(client, queue: str) -> str:
    url = client.get_queue_url(QueueName=queue)["QueueUrl"]
    return client.get_queue_attributes(QueueUrl=url, AttributeNames=["RedrivePolicy"])["Attributes"]["RedrivePolicy"]


@dataclass
class RecordingApi(ManagementApi):
    """The management API, recording each call it makes."""

    calls: list[str] = field(default_factory=list, init=False)

    def send(self, method: str, path: str, body: Any = None) -> Any:
        self.calls.append(f"{method} {path}")
        return super().send(method, path, body)

    def copy(self) -> RecordingApi:
        twin = dataclasses.replace(self)  # a session of its own, recording into the same list
        twin.calls = self.calls
        return twin


def test_verify_reads_each_kind_once_and_the_version_with_the_definitions(
    tmp_path: Path,
    rabbitmq: LocalRabbitMq,
    moto_server: LocalMoto,
    new_vhost,
    delivery_limit_policies: bool,
    aws_test_credentials,
) -> None:
    """No overview (statistics the broker gathers for it) and no vhost listing: the version comes with the vhost's
    definitions, and their 400 ``vhost_not_found`` says the vhost is missing; only then is the overview read."""
    vhost = new_vhost("verify-reads")
    path = provisioned_stack(tmp_path, rabbitmq, moto_server, vhost, "verify-reads-", delivery_limit_policies)
    raw = yaml.safe_load(path.read_text())["config"]["nsb-delays:rabbitmq"]
    config = load_stack(str(path)).rabbitmq
    assert config is not None and not config.grants  # endpoint users add one read each of users and permissions
    api = RecordingApi(rabbitmq.management_url, rabbitmq.username, rabbitmq.password)
    assert verify_rabbitmq(api, config) == []
    assert sorted(api.calls) == [f"GET definitions/{vhost}", "GET feature-flags", f"GET operator-policies/{vhost}"]
    assert api.definitions(vhost)["rabbit_version"] == api.overview()["rabbitmq_version"] == rabbitmq.version()

    api.calls.clear()
    elsewhere = parse_stack_config({"rabbitmq": raw | {"vhost": "no-such-vhost"}}, config.stack).rabbitmq
    assert elsewhere is not None
    assert verify_rabbitmq(api, elsewhere) == [Drift("missing", "vhost no-such-vhost", "", "exists", "(absent)")]
    assert sorted(api.calls) == ["GET definitions/no-such-vhost", "GET feature-flags", "GET overview"]


def test_an_unreachable_broker_is_an_error_not_a_pass(
    tmp_path: Path, aws_test_credentials, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The URL comes from the stack file's rabbitmq:endpoint (no flag, no RABBITMQ_ENDPOINT)."""
    monkeypatch.delenv("RABBITMQ_ENDPOINT", raising=False)
    raw = read_stack_yaml("dev")
    raw["rabbitmq:endpoint"] = "http://127.0.0.1:9"
    path = tmp_path / "Pulumi.unreachable.yaml"
    path.write_text(yaml.safe_dump({"config": raw}))
    result = CliRunner().invoke(cli, ["verify", "--stack", str(path), "--username", "u",
                                      "--password", "p", "--skip-sqs"])  # fmt: skip
    assert result.exit_code == 2 and "127.0.0.1:9" in result.output


def test_broker_requirements_for_v2() -> None:
    flags = dict.fromkeys(REQUIRED_FEATURE_FLAGS, "enabled")
    reported = parse_reported_broker_version
    assert requirement_drifts(reported("3.10.0"), flags, "v2") == []
    old = [Drift("different", "broker", "version", ">= 3.10.0", "3.9.29")]
    assert requirement_drifts(reported("3.9.29"), flags, "v2") == old
    assert requirement_drifts(reported("3.9.29"), {}, "v1") == []
    flags = {"quorum_queue": "enabled", "stream_queue": "disabled"}
    missing = requirement_drifts(reported("3.13.0-rc.2"), flags, "v2")
    assert missing == [Drift("different", "broker", "feature flag stream_queue", "enabled", "disabled")]
    assert parse_reported_broker_version("3.13.0-rc.2") == (3, 13, 0)
    with pytest.raises(ValueError, match="'latest' is not of the form"):
        parse_reported_broker_version("latest")


def test_delay_queue_retention_may_exceed_four_days_and_content_deduplication_is_drift_with_its_reason() -> None:
    (_, spec) = sqs.endpoint_queues("Sales")
    attributes = spec.attributes() | {"MessageRetentionPeriod": str(sqs.MAX_MESSAGE_RETENTION_SECONDS)}
    assert sqs_queue_drifts(spec, attributes) == []
    short = attributes | {"MessageRetentionPeriod": "60", "ContentBasedDeduplication": "true"}
    drifts = sqs_queue_drifts(spec, short)
    assert [(d.kind, d.field) for d in drifts] == [
        ("different", "MessageRetentionPeriod"),
        ("unexpected", "ContentBasedDeduplication"),
    ]
    assert drifts[1].fix == sqs.CONTENT_DEDUPLICATION_NOTE and drifts[1].fix.startswith("harmless to NServiceBus")


def test_content_based_deduplication_does_not_drop_nservicebus_delayed_messages(moto_server: LocalMoto) -> None:
    """Two delayed messages with equal bodies, sent as NServiceBus sends them (explicit deduplication id = message
    id, SendMessage: "your MessageDeduplicationId overrides the generated one"), both arrive."""
    client = moto_server.client("sqs")
    attributes = {"FifoQueue": "true", "ContentBasedDeduplication": "true"}
    url = client.create_queue(QueueName="content-dedup-delay.fifo", Attributes=attributes)["QueueUrl"]
    for message_id in ("first", "second"):
        client.send_message(QueueUrl=url, MessageBody="same body", MessageGroupId=message_id,
                            MessageDeduplicationId=message_id)  # fmt: skip
    for group in ("third", "fourth"):  # a sender without ids: the second equal body is a duplicate
        client.send_message(QueueUrl=url, MessageBody="same body", MessageGroupId=group)
    received = client.receive_message(QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"])["Messages"]
    ids = {m["Attributes"]["MessageDeduplicationId"] for m in received}
    assert len(received) == 3 and {"first", "second"} <= ids


def test_a_queue_of_262144_bytes_is_drift_with_the_command_that_fixes_it(moto_server: LocalMoto) -> None:
    """A queue created as terraform-provider-aws creates it without max_message_size: moto, like SQS, refuses a
    300 KB message there that NServiceBus.AmazonSQS sends inline; verify names it, and its command fixes it."""
    config = parse_stack_config({"sqs": {"queueNamePrefix": "small-", "endpoints": ["Sales"]}}).sqs
    assert config is not None
    client = moto_server.client("sqs")
    (_, input_queue), (_, delay_queue) = config.queue_specs()
    small = {sqs.MAXIMUM_MESSAGE_SIZE_ATTRIBUTE: str(sqs.PROVIDER_DEFAULT_MAXIMUM_MESSAGE_SIZE)}
    url = client.create_queue(QueueName=input_queue.name, Attributes=input_queue.attributes() | small)["QueueUrl"]
    client.create_queue(QueueName=delay_queue.name, Attributes=delay_queue.attributes())
    with pytest.raises(client.exceptions.ClientError, match="Message must be shorter than 262144 bytes"):
        client.send_message(QueueUrl=url, MessageBody="x" * 300_000)

    drifts = verify_sqs(client, config)
    assert drifts == [Drift("different", "SQS queue small-Sales", "MaximumMessageSize", "1048576", "262144")]
    assert "SQS refuses every message of 262,145 to 1,048,576 bytes" in drifts[0].fix
    command = drifts[0].fix.split("pulumi up, or ")[1]
    assert command == f"aws sqs set-queue-attributes --queue-url {url} --attributes MaximumMessageSize=1048576"
    name, value = command.rsplit("--attributes ", 1)[1].split("=")
    client.set_queue_attributes(QueueUrl=url, Attributes={name: value})  # what the command does
    assert verify_sqs(client, config) == []
    client.send_message(QueueUrl=url, MessageBody="x" * 300_000)


def test_queues_that_were_never_created_are_missing(moto_server: LocalMoto) -> None:
    config = parse_stack_config({"sqs": {"queueNamePrefix": "never-created-", "endpoints": ["Sales"]}}).sqs
    assert config is not None
    drifts = verify_sqs(moto_server.client("sqs"), config)
    assert [(d.kind, d.subject) for d in drifts] == [
        ("missing", f"SQS queue {sqs.input_queue_name('Sales', 'never-created-')}"),
        ("missing", f"SQS queue {sqs.delay_queue_name('Sales', 'never-created-')}"),
    ]


def listings(topology: Topology) -> tuple[list[dict], list[dict], list[dict]]:
    """The management API's view of a vhost holding exactly ``topology``."""
    exchanges = [
        {"name": e.name, "type": e.type, "durable": e.durable, "auto_delete": e.auto_delete, "arguments": {}}
        for e in topology.exchanges
    ]
    queues = [
        {"name": q.name, "durable": q.durable, "auto_delete": q.auto_delete, "arguments": dict(q.arguments)}
        for q in topology.queues
    ]
    bindings = [
        {"source": b.source, "destination": b.destination, "destination_type": b.destination_type,
         "routing_key": b.routing_key}
        for b in topology.bindings
    ]  # fmt: skip
    return exchanges, queues, bindings


def test_argument_types_and_stray_bindings_are_drift_but_other_endpoints_are_not() -> None:
    topology = delay_levels("v2") + endpoint_topology(
        "Sales",
        generation=Generation.V2,
        routing_topology=RoutingTopology.CONVENTIONAL,
        queue_type=QueueType.QUORUM,
    )
    exchanges, queues, bindings = listings(topology)
    assert topology_drifts(topology, "v2", exchanges, queues, bindings) == []
    level0 = delay_level_name(0, Generation.V2)
    for queue in queues:
        if queue["name"] == level0:
            queue["arguments"]["x-message-ttl"] = str(level_ttl_ms(0))  # what the provider's `arguments` sends
    stray = {"source": level0, "destination": "Sales", "destination_type": "queue", "routing_key": "#"}
    other_endpoint = {
        "source": delivery_exchange_name(Generation.V2), "destination": "Other", "destination_type": "exchange",
        "routing_key": endpoint_binding_key("Other"),
    }  # fmt: skip
    drifts = topology_drifts(topology, "v2", exchanges, queues, [*bindings, stray, other_endpoint])
    ttl = level_ttl_ms(0)
    assert drifts == [
        Drift("different", f"queue {level0}", "arguments.x-message-ttl", str(ttl), json.dumps(str(ttl))),
        Drift("unexpected", f"binding {level0} -> queue Sales ('#')", "", "(absent)", "bound"),
    ]


def test_missing_credentials_and_encrypted_secrets_are_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RABBITMQ_ENDPOINT", "RABBITMQ_USERNAME", "RABBITMQ_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    result = CliRunner().invoke(cli, ["verify", "--stack", "dev", "--skip-sqs"])
    assert result.exit_code == 2
    assert "--username, --password not given" in result.output
    raw = read_stack_yaml("dev") | {"rabbitmq:password": {"secure": "v1:abc"}}
    path = tmp_path / "Pulumi.secret.yaml"
    path.write_text(yaml.safe_dump({"config": raw}))
    result = CliRunner().invoke(cli, ["verify", "--stack", str(path), "--username", "u", "--skip-sqs"])
    assert result.exit_code == 2
    assert "rabbitmq:password is a Pulumi secret" in result.output


def test_the_default_queue_type_that_rabbitmq_4_writes_into_arguments_is_not_drift() -> None:
    """RabbitMQ 4.0 lists a v1 level queue declared without x-queue-type with ``x-queue-type: classic``
    (rabbitmq-server#12109); a vhost whose default queue type is quorum makes it a quorum queue: drift."""
    topology = delay_levels("v1")
    exchanges, queues, bindings = listings(topology)
    for queue in queues:
        queue["arguments"]["x-queue-type"] = "classic"
    assert topology_drifts(topology, "v1", exchanges, queues, bindings) == []
    queues[0]["arguments"]["x-queue-type"] = "quorum"
    assert topology_drifts(topology, "v1", exchanges, queues, bindings) == [
        Drift("unexpected", f"queue {queues[0]['name']}", "arguments.x-queue-type", "(absent)", '"quorum"')
    ]
