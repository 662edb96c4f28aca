"""``nsb-delays check``: the dev stack is clean; a deliberately broken stack lists each violation once and
fails; policy config and a baseline change the outcome the way `--policy-pack-config` would."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from nsb_delays.components.model.rabbitmq.names import LEVEL_COUNT
from nsb_delays.infra.cli import cli
from nsb_delays.infra.commands.check import derived_config
from nsb_delays.policies.offline import PackConfig
from nsb_delays.policies.pack import POLICIES
from nsb_delays.stack.config import load_stack, stack_file

RABBITMQ_PROVIDER_URN = "urn:pulumi:broken::nsb-delays::pulumi:providers:rabbitmq::default"


def check(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["check", *args])
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


def write_stack(tmp_path: Path, name: str, change: Any) -> str:
    document = yaml.safe_load(stack_file("dev").read_text())
    change(document["config"])
    path = tmp_path / f"Pulumi.{name}.yaml"
    path.write_text(yaml.safe_dump(document))
    return str(path)


def break_stack(config: dict[str, Any]) -> None:
    """Three mistakes a stack file can make without failing config validation."""
    config["rabbitmq:endpoint"] = "http://rabbit.example.com:15672"
    config["nsb-delays:rabbitmq"]["protectDelayQueues"] = False
    config["nsb-delays:sqs"]["encrypted"] = False
    # Not a mistake: an endpoint without unrestricted delayed delivery has no -delay.fifo queue, and the
    # check exempts it from the stack config (a preview user lists it in withoutDelayedDelivery).
    config["nsb-delays:sqs"]["endpoints"][0] = {"name": "Sales", "delayedDelivery": False}


def test_the_dev_stack_is_clean() -> None:
    code, output = check("--stack", "dev")
    assert code == 0, output
    assert f"{len(POLICIES)} rules: 0 mandatory, 0 advisory violation(s)" in output


def test_the_dev_stack_as_a_pull_request_comment() -> None:
    code, output = check("--stack", "dev", "--format", "markdown")
    assert code == 0
    assert output.startswith("### :white_check_mark: `nsb-delays` policy check on `dev`: no violations")


def test_a_broken_stack_lists_each_violation_once_and_fails(tmp_path: Path) -> None:
    stack = write_stack(tmp_path, "broken", break_stack)
    code, output = check("--stack", stack, "--format", "json")
    assert code == 1
    violations = json.loads(output)["violations"]
    keys = [(v["policy"], v["urn"]) for v in violations]
    assert len(keys) == len(set(keys)), "a violation is listed twice"
    counts: dict[str, int] = {}
    for policy, _ in keys:
        counts[policy] = counts.get(policy, 0) + 1
    sqs_queues = 2 * 3 - 1  # three endpoints, Sales without its delay queue
    assert counts == {
        "delay-queue-protected": LEVEL_COUNT,
        "rabbitmq-endpoint-https": 1,
        "sqs-queue-encrypted": sqs_queues,
    }
    assert ("rabbitmq-endpoint-https", RABBITMQ_PROVIDER_URN) in keys
    assert all(v["enforcement"] == "mandatory" for v in violations)


def test_the_text_and_markdown_reports_name_rule_and_resource(tmp_path: Path) -> None:
    stack = write_stack(tmp_path, "broken", break_stack)
    code, text = check("--stack", stack)
    assert code == 1
    assert "rabbitmq-endpoint-https" in text and "pulumi:providers:rabbitmq::default" in text
    assert f"{LEVEL_COUNT + 1 + 5} mandatory" in text
    code, markdown = check("--stack", stack, "--format", "markdown")
    assert code == 1
    assert markdown.startswith("### :x: `nsb-delays` policy check on `broken`: 34 mandatory violations")
    assert f"| `delay-queue-protected` | {LEVEL_COUNT} |" in markdown
    assert "| `rabbitmq-endpoint-https` | `pulumi:providers:rabbitmq::default` |" in markdown


def test_a_policy_config_file_changes_levels_and_thresholds(tmp_path: Path) -> None:
    stack = write_stack(tmp_path, "broken", break_stack)
    relaxed = tmp_path / "relaxed.json"
    relaxed.write_text(
        json.dumps(
            {
                "delay-queue-protected": "advisory",
                "sqs-queue-encrypted": "disabled",
                "rabbitmq-endpoint-https": {"allowHttpEndpoint": True},
            }
        )
    )
    code, output = check("--stack", stack, "--policy-config", str(relaxed), "--format", "json")
    assert code == 0, output
    assert {v["enforcement"] for v in json.loads(output)["violations"]} == {"advisory"}
    strict = tmp_path / "strict.json"
    strict.write_text(json.dumps({"rabbitmq-endpoint-https": {"allowLoopbackHttp": False}}))
    code, output = check("--stack", "dev", "--policy-config", str(strict), "--format", "json")
    assert code == 1
    assert [v["policy"] for v in json.loads(output)["violations"]] == ["rabbitmq-endpoint-https"]


def test_a_bad_policy_config_or_stack_exits_2_naming_the_problem(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"sqs-delay-queue-retention": {"minRetentionSeconds": 10}}))
    code, output = check("--stack", "dev", "--policy-config", str(bad))
    assert code == 2
    assert "'sqs-delay-queue-retention'" in output and "below the minimum" in output
    code, output = check("--stack", str(tmp_path / "Pulumi.missing.yaml"))
    assert code == 2 and "does not exist" in output


def test_a_baseline_with_an_endpoint_this_stack_drops_gets_the_retirement_advice(tmp_path: Path) -> None:
    def add_endpoint(config: dict[str, Any]) -> None:
        config["nsb-delays:rabbitmq"]["endpoints"].append("Invoicing")

    baseline = write_stack(tmp_path, "deployed", add_endpoint)
    code, output = check("--stack", "dev", "--baseline", baseline, "--format", "json")
    assert code == 0  # advisory: the change is allowed, the reviewer is told the safe order
    violations = json.loads(output)["violations"]
    assert [(v["policy"], v["enforcement"]) for v in violations] == [("endpoint-retirement-order", "advisory")]
    assert "'Invoicing'" in violations[0]["message"]


def test_markdown_cells_survive_github_rendering() -> None:
    from nsb_delays.infra.commands.check import markdown_cell

    assert markdown_cell("key '#.<endpoint>' | a\nb & c") == "key '#.&lt;endpoint&gt;' \\| a b &amp; c"


def test_a_broker_version_the_stack_cannot_work_with_exits_2_naming_both_settings(tmp_path: Path) -> None:
    """brokerVersion unquoted (YAML reads 3.10 as 3.1), and 3.11 with deliveryLimitPolicies: true (the broker
    would refuse the policies half-way through ``up``): refused before anything is declared."""

    def unquoted(config: dict[str, Any]) -> None:
        config["nsb-delays:rabbitmq"]["brokerVersion"] = 3.10

    code, output = check("--stack", write_stack(tmp_path, "unquoted", unquoted))
    assert code == 2 and "Traceback" not in output
    assert "rabbitmq.brokerVersion: expected a string such as '3.10' or '4.0', got float" in output

    def old_broker(config: dict[str, Any]) -> None:
        config["nsb-delays:rabbitmq"]["brokerVersion"] = "3.11"
        config["nsb-delays:rabbitmq"]["deliveryLimitPolicies"] = True

    code, output = check("--stack", write_stack(tmp_path, "old", old_broker))
    assert code == 2 and "Traceback" not in output
    assert "deliveryLimitPolicies is true with brokerVersion '3.11'" in output
    assert "remove deliveryLimitPolicies (below 4.0 it defaults to false" in output


def test_the_stack_broker_version_reaches_the_queue_arguments_advice(tmp_path: Path) -> None:
    """A v1 stack for RabbitMQ 3.10 declares classic queues without x-queue-type (the broker keeps them so);
    ``check`` gives the policy the stack's brokerVersion, so it does not advise the type 4.0 would need."""

    def v1_on_3_10(config: dict[str, Any]) -> None:
        rabbitmq = config["nsb-delays:rabbitmq"]
        rabbitmq.update(generation="v1", brokerVersion="3.10", deliveryLimitPolicies=False)

    stack = write_stack(tmp_path, "three-ten", v1_on_3_10)
    code, output = check("--stack", stack)
    assert code == 0 and "queue-arguments-as-read" not in output


def test_every_rule_that_judges_by_the_broker_version_gets_the_stacks(tmp_path: Path) -> None:
    """The four rules with a ``brokerVersion`` option judge a 3.13 stack as 3.13: an outranking policy without a
    delivery limit is no reason for NServiceBus to refuse there (it writes no policy below RabbitMQ 4.0)."""
    stack = load_stack("dev").with_values("rabbitmq", brokerVersion="3.13", deliveryLimitPolicies=False)
    derived = derived_config(stack, PackConfig(), None)
    taking = sorted(p.name for p in POLICIES if p.config_schema and "brokerVersion" in p.config_schema.properties)
    assert taking == [
        "endpoint-queue-delivery-limit", "queue-arguments-as-read", "refused-by-broker-version",
        "transport-version-delivery-limit",
    ]  # fmt: skip
    assert {name: derived.properties[name]["brokerVersion"] for name in taking} == dict.fromkeys(taking, "3.13")
