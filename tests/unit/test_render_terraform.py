"""The OpenTofu/Terraform module declares what the Pulumi program registers: read back, every resource's inputs are
the recording's, and it waits for at least what the program's resource waits for. (The engine tier applies it.)"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from nsb_delays.components.recording import RecordedResource
from nsb_delays.infra.cli import cli
from nsb_delays.infra.program import record_stack
from nsb_delays.infra.render.terraform import (
    BLOCKS,
    MANIFEST,
    RABBITMQ_PROVIDER_VERSION,
    REMOVED_FILE,
    SQS_QUEUE,
    TerraformRenderError,
    directory_problem,
    literal,
    local_name,
    resource_type,
    sqs_queue_attributes,
    terraform_module,
    write_module,
)
from nsb_delays.stack.config import ConfigError, StackConfig, parse_stack_config
from nsb_delays.stack.stack_file import load_stack

PROJECT = Path(__file__).resolve().parents[2]
REFERENCE = re.compile(r"^\$\{(rabbitmq_\w+|aws_\w+)\.([\w-]+)\.name\}$")
VARIABLE = re.compile(r"^\$\{var\.(\w+)\}$")

DEV = load_stack("dev")
assert DEV.sqs is not None
SQS_SPECS = {spec.name: spec for _, spec in DEV.sqs.queue_specs()}

# terraform-provider-aws internal/service/sqs/queue.go ``queueSchema`` (read at commit 00a35305dc1b, 2026): each
# attribute the module sets, its schema type and the range its ``ValidateFunc`` accepts (None: no range).
AWS_SQS_QUEUE_SCHEMA: dict[str, tuple[type, tuple[int, int] | None]] = {
    "name": (str, None),
    "fifo_queue": (bool, None),
    "content_based_deduplication": (bool, None),
    "delay_seconds": (int, (0, 900)),
    "max_message_size": (int, (1024, 1_048_576)),
    "message_retention_seconds": (int, (60, 1_209_600)),
    "sqs_managed_sse_enabled": (bool, None),
    "tags": (dict, None),
}

WITH_USERS = {
    "rabbitmq": {
        "brokerVersion": "4.3",
        "endpoints": ["Billing", {"name": "Sales", "user": {"passwordKey": "salesPassword", "sendsTo": ["Billing"]}}],
    },
    "salesPassword": {"secure": "v1:cA=="},
}


def camel_case(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def read_back(value: Any, key: str, names: dict[str, str]) -> Any:
    """A module value as the Pulumi input it stands for: a reference as the name it refers to, a block's fields in
    camelCase, numbers as the engine's floats."""
    if isinstance(value, str):
        reference = REFERENCE.match(value)
        if reference:
            return names[f"{reference[1]}.{reference[2]}"]
        return value.replace("$${", "${").replace("%%{", "%{")
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return float(value)
    if isinstance(value, list):
        return [read_back(item, key, names) for item in value]
    if isinstance(value, dict):
        if key in BLOCKS:
            return {camel_case(k): read_back(v, k, names) for k, v in value.items()}
        return {k: read_back(v, k, names) for k, v in value.items()}
    return value


def module_of(config: StackConfig) -> tuple[dict[str, dict[str, Any]], list[RecordedResource]]:
    files = terraform_module(config, "dev").files
    resources: dict[str, dict[str, Any]] = {}
    for file_name in ("rabbitmq.tf.json", "sqs.tf.json"):
        if file_name in files:
            for kind, named in json.loads(files[file_name])["resource"].items():
                resources |= {f"{kind}.{name}": body for name, body in named.items()}
    return resources, record_stack(config, stack="dev")


@pytest.mark.parametrize("config", [DEV, parse_stack_config(WITH_USERS, "dev")], ids=["dev", "users"])
def test_each_resource_is_the_programs_with_the_same_inputs(config: StackConfig) -> None:
    resources, recorded = module_of(config)
    custom = {f"{resource_type(r.type)}.{local_name(r.name)}": r for r in recorded if r.custom}
    assert set(resources) == set(custom)
    names = {address: body.get("name", "") for address, body in resources.items()}
    for address, body in resources.items():
        inputs = {
            camel_case(key): read_back(value, key, names)
            for key, value in body.items()
            if key not in ("depends_on", "lifecycle")
        }
        expected = dict(custom[address].inputs)
        if address.startswith(f"{SQS_QUEUE}."):  # every attribute explicit: the program's, and the model's others
            explicit = sqs_queue_attributes(SQS_SPECS[body["name"]])
            assert {camel_case(key): read_back(value, key, names) for key, value in explicit.items()}.items() >= {
                key: value for key, value in expected.items() if key != "tags"
            }.items(), address
            expected |= {camel_case(key): read_back(value, key, names) for key, value in explicit.items()}
        if "password" in expected:  # a secret: the module takes it from a sensitive variable
            assert VARIABLE.match(inputs.pop("password")) and expected.pop("password")
        assert inputs == expected, address
        assert ("lifecycle" in body) == custom[address].protect


def test_a_resource_waits_for_what_the_programs_waits_for() -> None:
    """The combined policies after the queues they apply to (RabbitMQ 4.3 keeps the default limit of a quorum queue
    declared while its delivery-limit policy is created), a user after the queues it uses."""
    config = parse_stack_config(WITH_USERS, "dev")
    resources, _ = module_of(config)

    def waits_for(body: dict[str, Any]) -> set[str]:
        referenced = {
            f"{m[1]}.{m[2]}" for m in (REFERENCE.match(v) for v in _strings(body)) if m is not None
        }  # fmt: skip
        return referenced | set(body.get("depends_on", []))

    limit = next(a for a in resources if a.startswith("rabbitmq_policy.") and "delivery-limit" in a)
    assert {"rabbitmq_queue.rabbitmq-Sales-Sales", "rabbitmq_queue.rabbitmq-Billing-Billing"} <= waits_for(
        resources[limit]
    )
    user = resources["rabbitmq_user.rabbitmq-user-Sales-user"]
    assert {"rabbitmq_queue.rabbitmq-Sales-Sales", "rabbitmq_queue.rabbitmq-Billing-Billing"} <= waits_for(user)
    binding = next(b for a, b in resources.items() if a.startswith("rabbitmq_binding.rabbitmq-Sales-"))
    assert waits_for(binding) and all(a.startswith("rabbitmq_exchange.") or a.startswith("rabbitmq_queue.")
                                      for a in waits_for(binding))  # fmt: skip


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    if isinstance(value, dict):
        return [s for item in value.values() for s in _strings(item)]
    return []


def test_the_versions_pin_the_provider_pulumi_rabbitmq_wraps() -> None:
    files = terraform_module(load_stack("dev"), "dev").files
    assert 'source  = "cyrilgdn/rabbitmq"' in files["versions.tf"]
    assert f'version = "{RABBITMQ_PROVIDER_VERSION}"' in files["versions.tf"]


def test_a_users_password_is_a_sensitive_variable_named_for_its_key() -> None:
    files = terraform_module(parse_stack_config(WITH_USERS, "dev"), "dev").files
    variables = json.loads(files["variables.tf.json"])["variable"]
    assert variables == {
        "sales_password": {
            "type": "string",
            "sensitive": True,
            "description": "The password of RabbitMQ user 'Sales'",
        }
    }


@pytest.mark.parametrize(
    ("token", "expected"),
    [
        ("rabbitmq:index/queue:Queue", "rabbitmq_queue"),
        ("rabbitmq:index/topicPermissions:TopicPermissions", "rabbitmq_topic_permissions"),
        ("rabbitmq:index/operatorPolicy:OperatorPolicy", "rabbitmq_operator_policy"),
        ("aws:sqs/queue:Queue", "aws_sqs_queue"),
    ],
)
def test_a_pulumi_token_is_the_providers_resource_type(token: str, expected: str) -> None:
    assert resource_type(token) == expected


def test_names_and_strings_are_safe_in_the_module() -> None:
    assert local_name("rabbitmq-delays-v2-nsb.v2.delay-level-27") == "rabbitmq-delays-v2-nsb_v2_delay-level-27"
    assert local_name("1st") == "_1st"
    assert literal("a${b}%{c}") == "a$${b}%%{c}"


def test_a_stack_without_a_section_is_refused() -> None:
    with pytest.raises(TerraformRenderError, match="neither"):
        terraform_module(StackConfig(), "empty")


def two_endpoints(*names: str) -> StackConfig:
    return parse_stack_config({"rabbitmq": {"brokerVersion": "4.3", "endpoints": list(names)}}, "dev")


def test_an_endpoint_dropped_from_the_stack_leaves_the_module_and_stays_on_the_broker(tmp_path: Path) -> None:
    """As the Pulumi program retains an endpoint's queues when the stack drops it (``retainOnDelete``), a render
    after the endpoint left gives each of its queues a ``removed`` block with ``destroy = false``."""
    directory = tmp_path / "module"
    assert directory_problem(directory) is None
    assert write_module(directory, terraform_module(two_endpoints("Sales", "Billing"), "dev")) == []
    assert not (directory / REMOVED_FILE).exists()
    assert directory_problem(directory) is None  # an earlier render: rendered again in place
    dropped = write_module(directory, terraform_module(two_endpoints("Sales"), "dev"))
    assert dropped == ["rabbitmq_queue.rabbitmq-Billing-Billing"]
    removed = json.loads((directory / REMOVED_FILE).read_text())["removed"]
    assert removed == [{"from": "rabbitmq_queue.rabbitmq-Billing-Billing", "lifecycle": {"destroy": False}}]
    # rendered once more, the block stays (a state that has not applied it yet still needs it), named once
    assert write_module(directory, terraform_module(two_endpoints("Sales"), "dev")) == []
    assert json.loads((directory / REMOVED_FILE).read_text())["removed"] == removed
    # back in the stack: declared again, no longer removed
    write_module(directory, terraform_module(two_endpoints("Sales", "Billing"), "dev"))
    assert not (directory / REMOVED_FILE).exists()
    assert json.loads((directory / MANIFEST).read_text())["removed"] == []


def test_a_directory_with_other_files_or_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "main.tf").write_text("# the team's own\n")
    assert "not empty and not a module nsb-delays rendered" in str(directory_problem(tmp_path))
    assert "is a file" in str(directory_problem(tmp_path / "main.tf"))


def test_the_provider_version_is_the_one_the_engines_provider_wraps() -> None:
    """One version for both owners: the module pins the provider the engine's pulumi-rabbitmq build replaces the
    bridged one with (tools/engine/rabbitmq/go.mod), which tools/opentofu/build.sh builds for OpenTofu."""
    go_mod = (PROJECT / "tools" / "engine" / "rabbitmq" / "go.mod").read_text()
    pinned = re.search(
        r"terraform-provider-rabbitmq => github\.com/cyrilgdn/terraform-provider-rabbitmq v(\S+)", go_mod
    )
    assert pinned is not None and pinned[1] == RABBITMQ_PROVIDER_VERSION


def test_a_binding_refers_to_the_queue_it_binds_not_the_exchange_of_the_same_name() -> None:
    """A delay level's exchange and queue share a name: the binding between them waits for both, by reference to
    each (a binding created before its queue is refused: 404 no queue)."""
    resources, _ = module_of(load_stack("dev"))
    binding = resources["rabbitmq_binding.rabbitmq-delays-v2-nsb_v2_delay-level-18-to-queue-nsb_v2_delay-level-18"]
    assert binding["source"] == "${rabbitmq_exchange.rabbitmq-delays-v2-nsb_v2_delay-level-18.name}"
    assert binding["destination"] == "${rabbitmq_queue.rabbitmq-delays-v2-nsb_v2_delay-level-18.name}"
    assert "depends_on" not in binding


def test_each_sqs_queue_sets_every_attribute_the_transport_depends_on_as_the_providers_schema_takes_it() -> None:
    """Explicit even where the provider has a default (its ``max_message_size`` default is 262,144, a quarter of what
    the transport sends inline); each attribute of the provider's type and within what its validation accepts."""
    queues = json.loads(terraform_module(DEV, "dev").files["sqs.tf.json"])["resource"][SQS_QUEUE]
    assert {body["name"] for body in queues.values()} == set(SQS_SPECS)
    for body in queues.values():
        assert set(body) == set(AWS_SQS_QUEUE_SCHEMA), body["name"]
        for key, value in body.items():
            kind, bounds = AWS_SQS_QUEUE_SCHEMA[key]
            assert type(value) is kind, (body["name"], key)
            assert bounds is None or bounds[0] <= value <= bounds[1], (body["name"], key)
        spec = SQS_SPECS[body["name"]]
        assert body["max_message_size"] == spec.max_message_size == 1_048_576
        assert body["fifo_queue"] is spec.name.endswith(".fifo") and body["content_based_deduplication"] is False
    assert 'source  = "hashicorp/aws"' in terraform_module(DEV, "dev").files["versions.tf"]


@pytest.mark.parametrize("config", [load_stack("dev"), parse_stack_config(WITH_USERS, "dev")], ids=["dev", "users"])
def test_a_render_is_the_same_text_whatever_order_the_program_registered_in(config: StackConfig) -> None:
    """The program registers resources concurrently (their order varies from run to run); the module lists them by
    address and each ``depends_on`` sorted, so rendering an unchanged stack again changes no byte (the pipelines
    ``nsb-delays init --tool opentofu`` writes compare a render with the committed module: ``git diff --exit-code``)."""
    files = terraform_module(config, "dev").files
    for file_name in ("rabbitmq.tf.json", "sqs.tf.json"):
        if file_name in files:
            document = json.loads(files[file_name])["resource"]
            addresses = [f"{kind}.{name}" for kind, named in document.items() for name in named]
            assert addresses == sorted(addresses), file_name
            for named in document.values():
                for name, body in named.items():
                    assert body.get("depends_on", []) == sorted(body.get("depends_on", [])), name
    assert terraform_module(config, "dev").files == files


def test_a_stack_whose_passwords_are_not_its_secrets_renders_and_still_refuses_one_in_plain_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The module takes each password as a variable: an OpenTofu team's stack file has the users' password keys and
    no Pulumi secrets. A password written into the file is still refused."""
    section = {"nsb-delays:rabbitmq": WITH_USERS["rabbitmq"]}
    (tmp_path / "Pulumi.dev.yaml").write_text(yaml.safe_dump({"config": section}))
    monkeypatch.chdir(tmp_path)
    rendered = CliRunner().invoke(cli, ["render", "--stack", "dev", "--format", "terraform", "-o", "module"])
    assert rendered.exit_code == 0, rendered.output
    assert "sales_password" in (tmp_path / "module" / "variables.tf.json").read_text()
    with pytest.raises(ConfigError, match="salesPassword: missing"):
        parse_stack_config(WITH_USERS | {"salesPassword": None}, "dev")
    with pytest.raises(ConfigError, match="salesPassword: a password in plain text"):
        parse_stack_config(WITH_USERS | {"salesPassword": "s3cret"}, "dev", password_secrets=False)
    (tmp_path / "Pulumi.dev.yaml").write_text(yaml.safe_dump({"config": {**section, "nsb-delays:salesPassword": "x"}}))
    refused = CliRunner().invoke(cli, ["render", "--stack", "dev", "--format", "terraform", "-o", "module"])
    assert refused.exit_code == 2 and "a password in plain text" in refused.output
