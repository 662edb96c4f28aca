"""Resource rules of the policy pack: the real program's resources pass, and each mutation is reported
by the right rule against the right urn.

Resources come from the real program under mocks (``record_stack``) and reach the rules as the engine
hands them over (camelCase, numbers as floats, ``unknown_checking_proxy``), via ``policies.offline``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable, Iterable, Sequence
from copy import deepcopy
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_rabbitmq as rabbitmq
import pytest
from pulumi_policy import (
    EnforcementLevel,
    PolicyCustomTimeouts,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
)
from pulumi_policy.deserialize import SPECIAL_SIG_KEY, deserialize_properties
from pulumi_policy.proxy import (
    UNKNOWN_BOOLEAN_VALUE,
    UNKNOWN_NUMBER_VALUE,
    UNKNOWN_STRING_VALUE,
    unknown_checking_proxy,
)

from nsb_delays.components.encoding import arguments_json
from nsb_delays.components.model import sqs
from nsb_delays.components.model.rabbitmq.delivery_limits import delivery_limit_policy_name
from nsb_delays.components.model.rabbitmq.graph import delay_queue_arguments
from nsb_delays.components.model.rabbitmq.names import (
    DEFAULT_GENERATION,
    Generation,
    delay_level_name,
    delivery_exchange_name,
    endpoint_binding_key,
    queue_binding_key,
)
from nsb_delays.components.model.rabbitmq.routing import MAX_DESTINATION_BYTES
from nsb_delays.components.rabbitmq import RabbitMqDelayInfrastructure
from nsb_delays.components.recording import PROJECT, RecordedResource, record
from nsb_delays.components.resource_types import (
    RABBITMQ_BINDING,
    RABBITMQ_EXCHANGE,
    RABBITMQ_POLICY,
    RABBITMQ_QUEUE,
    SQS_QUEUE,
)
from nsb_delays.infra.program import record_stack
from nsb_delays.policies import graph_rules, sqs_rules
from nsb_delays.policies.offline import (
    PackConfig,
    PolicyConfigError,
    Violation,
    default_providers,
    parse_pack_config,
    policy_resources,
    run_policies,
)
from nsb_delays.policies.pack import POLICIES, POLICIES_BY_NAME
from nsb_delays.stack.config import load_stack, parse_stack_config, read_stack_yaml

STACK = "dev"


@functools.cache
def dev_recorded() -> tuple[RecordedResource, ...]:
    return tuple(record_stack(load_stack(STACK), stack=STACK))


@functools.cache
def other_vhost_recorded() -> tuple[RecordedResource, ...]:
    """The dev stack's resources again in vhost 'other' (stack 'other': URNs of their own), to put beside the dev
    stack's: the same queue names in two vhosts."""
    return tuple(record_stack(load_stack(STACK).with_values("rabbitmq", vhost="other"), stack="other"))


def providers_for(recorded: Sequence[RecordedResource], **stack_config: Any) -> list[RecordedResource]:
    config = {**read_stack_yaml(STACK), **stack_config}
    return default_providers(recorded, config, project=PROJECT, stack=STACK)


def run(
    recorded: Iterable[RecordedResource],
    config: dict[str, Any] | None = None,
    providers: Sequence[RecordedResource] | None = None,
) -> list[Violation]:
    recorded = list(recorded)
    providers = providers_for(recorded) if providers is None else providers
    return run_policies(policy_resources(recorded, providers), parse_pack_config(config or {}))


def reported(violations: Iterable[Violation]) -> list[tuple[str, str | None]]:
    return sorted((v.policy, v.urn) for v in violations)


def find(recorded: Iterable[RecordedResource], type_token: str, physical_name: str) -> RecordedResource:
    matches = [r for r in recorded if r.type == type_token and r.physical_name == physical_name]
    assert len(matches) == 1, f"expected one {type_token} named {physical_name!r}, found {len(matches)}"
    return matches[0]


def changed(
    recorded: Iterable[RecordedResource], target: RecordedResource, change: Callable[[dict[str, Any]], None]
) -> list[RecordedResource]:
    """A copy of the resources with ``change`` applied to a deep copy of ``target``'s inputs."""
    inputs = deepcopy(target.inputs)
    change(inputs)
    return [dataclasses.replace(r, inputs=inputs) if r is target else r for r in recorded]


def set_queue_argument(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """Set one queue argument, in settings.argumentsJson (an all-string map moves there, as it must for a number)."""

    def change(inputs: dict[str, Any]) -> None:
        settings = inputs["settings"]
        if "argumentsJson" in settings:
            arguments = json.loads(settings["argumentsJson"])
        else:
            arguments = dict(settings.pop("arguments", {}))
        arguments[key] = value
        settings["argumentsJson"] = json.dumps(arguments)

    return change


def level_queue(level: int, generation: str = DEFAULT_GENERATION) -> RecordedResource:
    return find(dev_recorded(), RABBITMQ_QUEUE, delay_level_name(level, generation))


def delay_fifo(endpoint: str) -> RecordedResource:
    config = load_stack(STACK).sqs
    assert config is not None
    return find(dev_recorded(), SQS_QUEUE, sqs.delay_queue_name(endpoint, config.queue_name_prefix))


# --- the real program passes --------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.name)
def test_the_dev_stack_passes_every_rule(policy: Any) -> None:
    violations = run(dev_recorded())
    assert [v for v in violations if v.policy == policy.name] == []


def test_rules_have_descriptions_that_say_how_to_fix_and_levels() -> None:
    assert len(POLICIES_BY_NAME) == len(POLICIES) == 29
    for policy in POLICIES:
        assert "Fix:" in policy.description, policy.name
        assert policy.enforcement_level in (EnforcementLevel.MANDATORY, EnforcementLevel.ADVISORY)
    advisory = [p.name for p in POLICIES if p.enforcement_level == EnforcementLevel.ADVISORY]
    assert advisory == [
        "queue-arguments-as-read",
        "sqs-delay-queue-deduplication",
        "endpoint-retirement-order",
        "delay-graph-parking",
    ]


def test_the_program_tags_sqs_queues_with_the_model_tag_keys() -> None:
    """The pack finds endpoint input queues by these tags; the component must keep writing them."""
    roles = {r.inputs["tags"][sqs.ROLE_TAG] for r in dev_recorded() if r.type == SQS_QUEUE}
    assert roles == {"input", "delay"}
    assert all(sqs.ENDPOINT_TAG in r.inputs["tags"] for r in dev_recorded() if r.type == SQS_QUEUE)


# --- delay-level queues ---------------------------------------------------------------------------------------


def test_a_wrong_ttl_is_reported_with_the_expected_value() -> None:
    target = level_queue(5)
    violations = run(changed(dev_recorded(), target, set_queue_argument("x-message-ttl", 31_000)))
    assert reported(violations) == [("delay-level-queue-arguments", target.urn)]
    assert "'x-message-ttl' is 31000" in violations[0].message and "expected 32000" in violations[0].message


def test_a_float_ttl_in_arguments_json_is_a_wrong_type() -> None:
    target = level_queue(0)
    violations = run(changed(dev_recorded(), target, set_queue_argument("x-message-ttl", 1000.0)))
    assert reported(violations) == [("delay-level-queue-arguments", target.urn)]
    assert "(float)" in violations[0].message


def test_a_string_ttl_through_the_arguments_map_is_reported_by_both_rules() -> None:
    target = level_queue(3)

    def string_map(inputs: dict[str, Any]) -> None:
        arguments = json.loads(inputs["settings"].pop("argumentsJson"))
        inputs["settings"]["arguments"] = {key: str(value) for key, value in arguments.items()}

    violations = run(changed(dev_recorded(), target, string_map))
    assert reported(violations) == [
        ("delay-level-queue-arguments", target.urn),
        ("queue-arguments-typed", target.urn),
    ]
    typed = next(v for v in violations if v.policy == "queue-arguments-typed")
    assert "x-message-ttl" in typed.message and "argumentsJson" in typed.message


def test_a_numeric_argument_in_the_string_map_of_any_queue_is_reported() -> None:
    target = find(dev_recorded(), RABBITMQ_QUEUE, "Sales")

    def max_length(inputs: dict[str, Any]) -> None:
        inputs["settings"]["arguments"] = {"x-max-length": "5000", "x-queue-mode": "lazy", "x-queue-type": "classic"}

    violations = run(changed(dev_recorded(), target, max_length))
    assert reported(violations) == [("queue-arguments-typed", target.urn)]
    assert "'x-max-length'" in violations[0].message


def test_a_broken_dead_letter_link_is_reported() -> None:
    target = level_queue(5)
    violations = run(
        changed(dev_recorded(), target, set_queue_argument("x-dead-letter-exchange", "nsb.v2.delay-level-03"))
    )
    assert reported(violations) == [("delay-level-queue-arguments", target.urn)]
    assert "expected 'nsb.v2.delay-level-04'" in violations[0].message


def test_a_dead_letter_routing_key_is_an_unexpected_argument() -> None:
    target = level_queue(0)
    violations = run(changed(dev_recorded(), target, set_queue_argument("x-dead-letter-routing-key", "x")))
    assert reported(violations) == [("delay-level-queue-arguments", target.urn)]
    assert "unexpected argument 'x-dead-letter-routing-key'" in violations[0].message


@pytest.mark.parametrize(("key", "value"), [("x-queue-type", "classic"), ("x-dead-letter-strategy", "at-most-once")])
def test_v2_queue_type_and_strategy_are_enforced(key: str, value: str) -> None:
    target = level_queue(12)
    violations = run(changed(dev_recorded(), target, set_queue_argument(key, value)))
    assert reported(violations) == [("delay-level-queue-arguments", target.urn)]
    assert repr(key) in violations[0].message


def test_a_missing_overflow_argument_is_reported() -> None:
    target = level_queue(27)

    def drop_overflow(inputs: dict[str, Any]) -> None:
        arguments = json.loads(inputs["settings"]["argumentsJson"])
        del arguments["x-overflow"]
        inputs["settings"]["argumentsJson"] = json.dumps(arguments)

    violations = run(changed(dev_recorded(), target, drop_overflow))
    assert reported(violations) == [("delay-level-queue-arguments", target.urn)]
    assert "'x-overflow' is missing" in violations[0].message


def test_a_non_durable_level_queue_is_reported() -> None:
    target = level_queue(9)
    violations = run(changed(dev_recorded(), target, lambda i: i["settings"].update(durable=False)))
    assert reported(violations) == [("delay-level-queue-arguments", target.urn)]


def test_v1_names_need_v1_arguments() -> None:
    v1 = record(lambda: RabbitMqDelayInfrastructure("d", {"generation": "v1"}))
    assert reported(run(v1, providers=[])) == []
    target = find(v1, RABBITMQ_QUEUE, delay_level_name(4, "v1"))
    v2_arguments = arguments_json(delay_queue_arguments(4, "v2"))
    violations = run(changed(v1, target, lambda i: i["settings"].update(argumentsJson=v2_arguments)), providers=[])
    # It also dead-letters into the v2 chain, which this stack does not declare: the stack rule says so.
    assert {(v.policy, v.urn) for v in violations} == {
        ("delay-level-queue-arguments", target.urn),
        ("delay-level-chain-complete", target.urn),
    }
    assert any("'x-queue-mode' is missing" in v.message for v in violations)


def test_unprotected_delay_queue_is_reported() -> None:
    target = level_queue(7)
    recorded = [dataclasses.replace(r, protect=False) if r is target else r for r in dev_recorded()]
    assert reported(run(recorded)) == [("delay-queue-protected", target.urn)]


# --- exchanges and bindings -----------------------------------------------------------------------------------


def test_a_fanout_level_exchange_is_reported() -> None:
    target = find(dev_recorded(), RABBITMQ_EXCHANGE, delay_level_name(7, Generation.V2))
    violations = run(changed(dev_recorded(), target, lambda i: i["settings"].update(type="fanout")))
    assert reported(violations) == [("delay-exchange-settings", target.urn)]


def test_a_non_durable_delivery_exchange_is_reported() -> None:
    target = find(dev_recorded(), RABBITMQ_EXCHANGE, delivery_exchange_name(Generation.V2))
    violations = run(changed(dev_recorded(), target, lambda i: i["settings"].update(durable=False)))
    assert reported(violations) == [("delay-exchange-settings", target.urn)]


def binding(recorded: Iterable[RecordedResource], source: str, destination: str) -> RecordedResource:
    matches = [
        r
        for r in recorded
        if r.type == RABBITMQ_BINDING and r.inputs["source"] == source and r.inputs["destination"] == destination
    ]
    assert len(matches) == 1
    return matches[0]


def test_a_wrong_level_binding_key_is_reported_once() -> None:
    name = delay_level_name(4, Generation.V2)
    target = binding(dev_recorded(), name, name)
    violations = run(changed(dev_recorded(), target, lambda i: i.update(routingKey=queue_binding_key(5))))
    assert reported(violations) == [("delay-level-binding-keys", target.urn)]
    assert f"expected {queue_binding_key(4)!r}" in violations[0].message


def test_an_extra_binding_from_a_level_exchange_is_reported() -> None:
    extra = record(
        lambda: rabbitmq.Binding(
            "shortcut",
            source=delay_level_name(6, Generation.V2),
            destination="Sales",
            destination_type="queue",
            routing_key="#",
            vhost="/",
        )
    )
    violations = run([*dev_recorded(), *extra])
    assert reported(violations) == [("delay-level-binding-keys", extra[0].urn)]
    assert "not part of the delay graph" in violations[0].message


def test_a_wrong_endpoint_delivery_key_is_reported() -> None:
    target = binding(dev_recorded(), delivery_exchange_name(Generation.V2), "Sales")
    violations = run(changed(dev_recorded(), target, lambda i: i.update(routingKey="#.Sale")))
    assert reported(violations) == [("endpoint-delivery-binding", target.urn)]
    assert "expected '#.Sales'" in violations[0].message


@pytest.mark.parametrize("endpoint", ["Sales.*", "Sales Team", "x" * (MAX_DESTINATION_BYTES + 1)])
def test_delivery_binding_destinations_that_cannot_be_routed_are_reported(endpoint: str) -> None:
    target = binding(dev_recorded(), delivery_exchange_name(Generation.V2), "Sales")
    key = endpoint_binding_key(endpoint)
    violations = run(changed(dev_recorded(), target, lambda i: i.update(destination=endpoint, routingKey=key)))
    rule = [v for v in violations if v.policy == "endpoint-delivery-binding"]
    assert [v.urn for v in rule] == [target.urn]
    assert repr(endpoint) in rule[0].message


# --- SQS ---------------------------------------------------------------------------------------------------


def test_a_901_second_fifo_delay_is_reported() -> None:
    target = delay_fifo("Sales")
    violations = run(changed(dev_recorded(), target, lambda i: i.update(delaySeconds=901.0)))
    assert reported(violations) == [("sqs-delay-queue-settings", target.urn)]
    assert "delaySeconds is 901.0, expected exactly 900" in violations[0].message


def test_a_delay_queue_that_is_not_fifo_is_reported() -> None:
    target = delay_fifo("Billing")
    violations = run(changed(dev_recorded(), target, lambda inputs: inputs.pop("fifoQueue")))
    assert reported(violations) == [("sqs-delay-queue-settings", target.urn)]


def test_content_based_deduplication_is_advice_not_a_refusal() -> None:
    """NServiceBus neither creates nor checks it, and its explicit deduplication ids override it (advisory)."""
    target = delay_fifo("Billing")
    violations = run(changed(dev_recorded(), target, lambda inputs: inputs.update(contentBasedDeduplication=True)))
    assert reported(violations) == [("sqs-delay-queue-deduplication", target.urn)]
    assert not violations[0].mandatory
    assert "harmless to NServiceBus: it sets an explicit MessageDeduplicationId" in violations[0].message


def test_a_redrive_policy_on_the_delay_queue_is_reported() -> None:
    target = delay_fifo("Shipping")
    redrive = json.dumps({"deadLetterTargetArn": "arn:aws:sqs:us-east-1:123456789012:dlq", "maxReceiveCount": 5})
    violations = run(changed(dev_recorded(), target, lambda i: i.update(redrivePolicy=redrive)))
    assert reported(violations) == [("sqs-delay-queue-no-redrive", target.urn)]


def test_a_separate_redrive_policy_resource_on_the_delay_queue_is_reported() -> None:
    url = "https://sqs.us-east-1.amazonaws.com/123456789012/dev-Sales-delay.fifo"
    extra = record(lambda: aws.sqs.RedrivePolicy("dlq", queue_url=url, redrive_policy="{}"))
    violations = run([*dev_recorded(), *extra])
    assert reported(violations) == [("sqs-delay-queue-no-redrive", extra[0].urn)]


def test_retention_below_the_minimum_is_reported_and_the_minimum_is_configurable() -> None:
    target = delay_fifo("Sales")
    short = sqs.DELAY_QUEUE_MIN_RETENTION_SECONDS - 1.0
    violations = run(changed(dev_recorded(), target, lambda i: i.update(messageRetentionSeconds=short)))
    assert reported(violations) == [("sqs-delay-queue-retention", target.urn)]
    fourteen_days = {"sqs-delay-queue-retention": {"minRetentionSeconds": sqs.MAX_MESSAGE_RETENTION_SECONDS}}
    flipped = run(dev_recorded(), fourteen_days)
    assert reported(flipped) == sorted(
        ("sqs-delay-queue-retention", delay_fifo(e).urn) for e in ("Sales", "Billing", "Shipping")
    )


def test_an_endpoint_queue_that_takes_262144_bytes_is_refused_and_the_default_passes() -> None:
    """NServiceBus.AmazonSQS sends up to 1 MiB inline: a queue of the provider's 262,144 bytes, written or left out,
    refuses the larger messages; SqsEndpoint's 1,048,576 on both queues passes (the dev stack)."""
    input_queue, delay_queue = find(dev_recorded(), SQS_QUEUE, "dev-Billing"), delay_fifo("Billing")
    assert {input_queue.inputs["maxMessageSize"], delay_queue.inputs["maxMessageSize"]} == {sqs.MAX_MESSAGE_SIZE}
    assert [v for v in run(dev_recorded()) if v.policy == "sqs-queue-max-message-size"] == []
    for target in (input_queue, delay_queue):
        written = run(changed(dev_recorded(), target, lambda i: i.update(maxMessageSize=262_144.0)))
        assert reported(written) == [("sqs-queue-max-message-size", target.urn)]
        assert written[0].mandatory
        assert "maxMessageSize is 262144.0, the minimum is 1,048,576" in written[0].message
        assert "refuses every message over 262,144 bytes" in written[0].message
        assert "Set maxMessageSize=1048576" in written[0].message
    left_out = run(changed(dev_recorded(), input_queue, lambda i: i.pop("maxMessageSize")))
    assert reported(left_out) == [("sqs-queue-max-message-size", input_queue.urn)]
    assert "not set, so the AWS provider creates the queue with its default 262,144 bytes" in left_out[0].message


def test_a_deliberately_smaller_max_message_size_passes_once_the_pack_config_allows_it() -> None:
    target = delay_fifo("Shipping")
    smaller = changed(dev_recorded(), target, lambda i: i.update(maxMessageSize=262_144.0))
    allowed = {"sqs-queue-max-message-size": {"minMaxMessageSize": 262_144}}
    assert run(smaller, allowed) == []
    assert [v.mandatory for v in run(smaller, {"sqs-queue-max-message-size": "advisory"})] == [False]
    left_out = changed(dev_recorded(), target, lambda i: i.pop("maxMessageSize"))
    assert run(left_out, allowed) == []  # the provider's default is then what the stack allows
    below = run(left_out, {"sqs-queue-max-message-size": {"minMaxMessageSize": 262_145}})
    assert reported(below) == [("sqs-queue-max-message-size", target.urn)]


def test_a_queue_outside_any_endpoint_keeps_its_own_max_message_size() -> None:
    """Only the queues NServiceBus endpoints receive from (SqsEndpoint's role tag, or a '-delay.fifo' name)."""
    extra = record(lambda: aws.sqs.Queue("reports", name="reports", max_message_size=2048))
    assert [v for v in run([*dev_recorded(), *extra]) if v.policy == "sqs-queue-max-message-size"] == []


def test_a_delay_queue_name_sqs_or_nservicebus_would_not_use_is_reported() -> None:
    target = delay_fifo("Sales")
    for name in (
        "dev-Sales.v2-delay.fifo",
        "x" * (sqs.MAX_QUEUE_NAME_LENGTH - len(sqs.DELAY_QUEUE_SUFFIX) + 1) + sqs.DELAY_QUEUE_SUFFIX,
    ):
        violations = run(changed(dev_recorded(), target, lambda i, n=name: i.update(name=n)))
        rule = [v for v in violations if v.policy == "sqs-delay-queue-name"]
        assert [v.urn for v in rule] == [target.urn], name
        assert repr(name) in rule[0].message


def test_an_unencrypted_queue_is_reported_and_kms_can_be_required() -> None:
    target = find(dev_recorded(), SQS_QUEUE, "dev-Billing")
    violations = run(changed(dev_recorded(), target, lambda i: i.update(sqsManagedSseEnabled=False)))
    assert reported(violations) == [("sqs-queue-encrypted", target.urn)]
    kms_only = run(dev_recorded(), {"sqs-queue-encrypted": {"allowSqsManagedSse": False}})
    assert len(kms_only) == len([r for r in dev_recorded() if r.type == SQS_QUEUE])
    with_kms = changed(dev_recorded(), target, lambda i: i.update(kmsMasterKeyId="alias/nsb"))
    assert target.urn not in {v.urn for v in run(with_kms, {"sqs-queue-encrypted": {"allowSqsManagedSse": False}})}


# --- security -------------------------------------------------------------------------------------------------


def provider_violations(endpoint: str, config: dict[str, Any] | None = None) -> list[Violation]:
    providers = providers_for(dev_recorded(), **{"rabbitmq:endpoint": endpoint})
    return [v for v in run(dev_recorded(), config, providers) if v.policy == "rabbitmq-endpoint-https"]


def test_a_plain_http_endpoint_is_reported_on_the_default_provider() -> None:
    violations = provider_violations("http://rabbit.example.com:15672")
    assert [v.urn for v in violations] == ["urn:pulumi:dev::nsb-delays::pulumi:providers:rabbitmq::default"]
    assert "'http://rabbit.example.com:15672'" in violations[0].message


def test_https_passes_and_http_is_allowed_only_where_the_config_says() -> None:
    assert provider_violations("https://rabbit.example.com:15671") == []
    assert provider_violations("http://127.0.0.1:15672") == []
    assert provider_violations("http://[::1]:15672") == []
    strict = {"rabbitmq-endpoint-https": {"allowLoopbackHttp": False}}
    assert len(provider_violations("http://127.0.0.1:15672", strict)) == 1
    local = {"rabbitmq-endpoint-https": {"allowHttpEndpoint": True}}
    assert provider_violations("http://rabbitmq:15672", local) == []


def test_an_explicit_provider_with_http_is_reported() -> None:
    def program() -> None:
        provider = rabbitmq.Provider("broker", endpoint="http://10.0.0.5:15672", username="u", password="p")
        settings = rabbitmq.QueueSettingsArgs(durable=True)
        rabbitmq.Queue("q", name="Sales", vhost="/", settings=settings, opts=pulumi.ResourceOptions(provider=provider))

    recorded = record(program)
    violations = [v for v in run(recorded) if v.policy == "rabbitmq-endpoint-https"]
    assert [v.urn for v in violations] == [next(r.urn for r in recorded if r.type == "pulumi:providers:rabbitmq")]


def users(password: Any, secret: bool = True) -> list[RecordedResource]:
    recorded = record(lambda: rabbitmq.User("app-user", name="app", password=password, tags=["management"]))
    if secret:
        return recorded
    return changed(recorded, recorded[0], lambda i: i.update(password=password))


def test_a_secret_user_password_passes_and_a_plain_one_is_reported() -> None:
    assert run(users("s3cret-from-config")) == []
    plain = users("s3cret-in-source", secret=False)
    violations = run(plain)
    assert reported(violations) == [("rabbitmq-user-password-secret", plain[0].urn)]
    assert "'app'" in violations[0].message and "require_secret" in violations[0].message


def test_an_empty_user_password_is_reported() -> None:
    violations = run(users("", secret=False))
    assert [v.policy for v in violations] == ["rabbitmq-user-password-secret"]


# --- broker policies over delay queues ------------------------------------------------------------------------


def broker_policy(
    pattern: str, definition: dict[str, Any], apply_to: str = "queues", operator: bool = False
) -> list[RecordedResource]:
    def program() -> None:
        if operator:
            args = rabbitmq.OperatorPolicyPolicyArgs(
                pattern=pattern, priority=1, apply_to=apply_to, definition=definition
            )
            rabbitmq.OperatorPolicy("limits", name="limits", vhost="/", policy=args)
        else:
            policy = rabbitmq.PolicyPolicyArgs(pattern=pattern, priority=1, apply_to=apply_to, definition=definition)
            rabbitmq.Policy("ttl", name="ttl", vhost="/", policy=policy)

    return record(program)


def test_a_message_ttl_policy_over_the_v2_levels_is_reported() -> None:
    policy = broker_policy(r"nsb.v2.delay-level-.*", {"message-ttl": 60000})
    violations = run([*dev_recorded(), *policy])
    assert reported(violations) == [("delay-queue-broker-policy", policy[0].urn)]
    assert "message-ttl" in violations[0].message and "28 delay-level queues" in violations[0].message


@pytest.mark.parametrize("key", sorted(graph_rules.DELAY_BREAKING_POLICY_KEYS))
def test_every_delay_breaking_key_in_a_catch_all_operator_policy_is_reported(key: str) -> None:
    policy = broker_policy(".*", {key: 1000}, apply_to="all", operator=True)
    violations = run(policy, providers=[])
    assert reported(violations) == [("delay-queue-broker-policy", policy[0].urn)]
    assert "56 delay-level queues" in violations[0].message  # both generations


@pytest.mark.parametrize(
    ("pattern", "definition", "apply_to"),
    [
        (r"^(?!nsb\.(v2\.)?delay-level-).*", {"message-ttl": 60000}, "queues"),  # the suggested exclusion
        (r"nsb.v2.delay-level-.*", {"message-ttl": 60000}, "exchanges"),
        (r"nsb.v2.delay-level-.*", {"message-ttl": 60000}, "classic_queues"),  # v2 levels are quorum
        (r"^(?!nsb\.(v2\.)?delay-level-).*", {"delivery-limit": 5}, "queues"),  # no endpoint queue in this run
    ],
)
def test_broker_policies_that_leave_delay_queues_alone_pass(
    pattern: str, definition: dict[str, Any], apply_to: str
) -> None:
    assert run(broker_policy(pattern, definition, apply_to), providers=[]) == []


# --- the engine's wrapping and unknown values ------------------------------------------------------------------


def engine_args(
    resource: RecordedResource, props: dict[str, Any], config: dict[str, Any] | None = None
) -> ResourceValidationArgs:
    """Arguments as the pulumi-policy server builds them (the official unit-test pattern): ``props`` are the
    deserialized inputs, secrets unwrapped; the SDK's secret inputs arrive as additional secret outputs."""
    secret = [key for key, value in resource.inputs.items() if isinstance(value, dict) and SPECIAL_SIG_KEY in value]
    options = PolicyResourceOptions(
        resource.protect, [], None, [], PolicyCustomTimeouts(0, 0, 0), secret, resource.parent
    )
    return ResourceValidationArgs(
        resource.type, unknown_checking_proxy(props), resource.urn, resource.name, options, None, config
    )


def engine_props(resource: RecordedResource) -> dict[str, Any]:
    return deserialize_properties(deepcopy(resource.inputs))


def collect(policy: Any, args: ResourceValidationArgs) -> list[str]:
    messages: list[str] = []
    policy.validate(args, lambda message, urn=None: messages.append(message))
    return messages


def test_rules_called_directly_with_engine_wrapped_props() -> None:
    target = level_queue(2)
    props = engine_props(target)
    assert collect(graph_rules.delay_level_queue_arguments, engine_args(target, props)) == []
    set_queue_argument("x-message-ttl", "4000")(props)
    assert len(collect(graph_rules.delay_level_queue_arguments, engine_args(target, props))) == 1


def leaf_paths(value: Any, path: tuple[str, ...] = ()) -> Iterable[tuple[str, ...]]:
    if isinstance(value, dict) and value:
        for key, item in value.items():
            yield from leaf_paths(item, (*path, key))
    elif path:
        yield path


def with_unknown(inputs: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    props = deepcopy(inputs)
    *parents, last = path
    holder = props
    for key in parents:
        holder = holder[key]
    original = holder[last]
    sentinel = (
        UNKNOWN_BOOLEAN_VALUE
        if isinstance(original, bool)
        else UNKNOWN_NUMBER_VALUE
        if isinstance(original, float)
        else UNKNOWN_STRING_VALUE
    )
    holder[last] = sentinel
    return props


def test_an_unknown_value_never_crashes_a_resource_rule_nor_fails_a_good_resource() -> None:
    """Every leaf of each sample made unknown in turn: clean resources stay clean (no false violation in preview)."""
    clean = [level_queue(0), level_queue(27), delay_fifo("Sales"), find(dev_recorded(), SQS_QUEUE, "dev-Sales")]
    clean += [find(dev_recorded(), RABBITMQ_EXCHANGE, delivery_exchange_name(Generation.V2))]
    clean += [
        binding(dev_recorded(), delivery_exchange_name(Generation.V2), "Sales"),
        binding(dev_recorded(), *[delay_level_name(3, Generation.V2)] * 2),
    ]
    clean += users("pw") + providers_for(dev_recorded())
    broken = broker_policy(".*", {"message-ttl": 1})
    resource_rules = [policy for policy in POLICIES if isinstance(policy, ResourceValidationPolicy)]
    checked = 0
    for resource in [*clean, *broken]:
        for path in leaf_paths(engine_props(resource)):
            props = with_unknown(engine_props(resource), path)
            messages = [m for policy in resource_rules for m in collect(policy, engine_args(resource, props))]
            if resource in clean:
                assert messages == [], (resource.name, path)
            checked += 1
    assert checked > 40


def test_an_unknown_field_does_not_hide_a_known_violation() -> None:
    target = level_queue(5)
    props = with_unknown(engine_props(target), ("settings", "durable"))
    set_queue_argument("x-message-ttl", 1)(props)
    messages = collect(graph_rules.delay_level_queue_arguments, engine_args(target, props))
    assert len(messages) == 1 and "'x-message-ttl' is 1" in messages[0]


@pytest.mark.parametrize("key", ["name", "vhost", "source", "destination", "routingKey", "settings", "tags"])
def test_an_unknown_name_or_key_is_no_reason_for_a_stack_violation(key: str) -> None:
    """Absence cannot be judged while a name is unknown: no crash, and no missing-object reports."""
    recorded = [
        dataclasses.replace(r, inputs=with_unknown(r.inputs, (key,))) if key in r.inputs else r for r in dev_recorded()
    ]
    assert run(recorded) == []


# --- policy config -------------------------------------------------------------------------------------------


def test_enforcement_levels_follow_the_pack_config() -> None:
    target = level_queue(1)
    broken = changed(dev_recorded(), target, set_queue_argument("x-message-ttl", 1))
    assert [v.mandatory for v in run(broken)] == [True]
    assert [v.mandatory for v in run(broken, {"all": "advisory"})] == [False]
    assert run(broken, {"delay-level-queue-arguments": "disabled"}) == []
    overridden = run(broken, {"all": "advisory", "delay-level-queue-arguments": {"enforcementLevel": "mandatory"}})
    assert [v.mandatory for v in overridden] == [True]


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ({"no-such-rule": "advisory"}, "'no-such-rule': no such policy"),
        ({"all": "loud"}, "unknown enforcement level 'loud'"),
        ({"sqs-delay-queue-retention": {"minRetentionSeconds": 60}}, "below the minimum 345600"),
        ({"sqs-delay-queue-retention": {"minRetentionSeconds": "4d"}}, "expected integer"),
        ({"sqs-queue-max-message-size": {"minMaxMessageSize": 512}}, "below the minimum 1024"),
        ({"sqs-queue-max-message-size": {"minMaxMessageSize": 2_097_152}}, "above the maximum 1048576"),
        ({"rabbitmq-endpoint-https": {"allowHttp": True}}, "'allowHttp' is not a config property"),
        ({"endpoint-destinations-exist": {"externalEndpoints": ["a", 1]}}, "[1]: expected string"),
    ],
)
def test_a_bad_pack_config_names_the_key(raw: dict[str, Any], fragment: str) -> None:
    with pytest.raises(PolicyConfigError) as error:
        parse_pack_config(raw, "cfg.json")
    assert fragment in str(error.value)


def test_pack_config_defaults_come_from_the_schemas() -> None:
    config = PackConfig()
    assert config.config(sqs_rules.sqs_delay_queue_retention) == {}
    schema = sqs_rules.sqs_delay_queue_retention.config_schema
    assert schema is not None
    assert schema.properties["minRetentionSeconds"]["default"] == sqs.DELAY_QUEUE_MIN_RETENTION_SECONDS


def test_main_only_constructs_the_pack(monkeypatch: pytest.MonkeyPatch) -> None:
    """What `pulumi preview --policy-pack policies` runs, with the blocking server replaced by a recorder."""
    import runpy
    from pathlib import Path

    import pulumi_policy

    constructed: list[dict[str, Any]] = []
    monkeypatch.setattr(pulumi_policy, "PolicyPack", lambda **kwargs: constructed.append(kwargs))
    runpy.run_path(str(Path(graph_rules.__file__).with_name("__main__.py")), run_name="__main__")
    assert [c["name"] for c in constructed] == ["nsb-delays"]
    assert [p.name for p in constructed[0]["policies"]] == [p.name for p in POLICIES]


def test_derived_exemptions_join_the_users_own() -> None:
    user = parse_pack_config({"sqs-delay-queue-pairs": {"withoutDelayedDelivery": ["prod-Reports"]}})
    merged = user.with_defaults("sqs-delay-queue-pairs", {"withoutDelayedDelivery": ["dev-Sales"]})
    assert merged.config(POLICIES_BY_NAME["sqs-delay-queue-pairs"]) == {
        "withoutDelayedDelivery": ["dev-Sales", "prod-Reports"]
    }
    with pytest.raises(PolicyConfigError, match="minRetentionSeconds"):
        PackConfig().with_defaults("sqs-delay-queue-retention", {"minRetentionSeconds": 1})


def test_all_string_arguments_in_arguments_json_are_advised_against() -> None:
    """Such a queue works once created, but adopting it by import fails: the provider reads the string map."""
    target = find(dev_recorded(), RABBITMQ_QUEUE, "Sales")

    def as_json(inputs: dict[str, Any]) -> None:
        inputs["settings"]["argumentsJson"] = json.dumps(inputs["settings"].pop("arguments"))

    violations = run(changed(dev_recorded(), target, as_json))
    assert reported(violations) == [("queue-arguments-as-read", target.urn)]
    assert "settings.arguments" in violations[0].message and "import" in violations[0].message
    assert run(dev_recorded()) == []


def test_a_queue_without_an_explicit_type_is_advised_against() -> None:
    """RabbitMQ 4.x (and 3.13 with the backport) add x-queue-type: classic; the provider reads it back and every plan replaces."""
    resources = record_stack(parse_stack_config({"rabbitmq": {"generation": "v1", "endpoints": ["Sales"]}}))
    target = find(resources, RABBITMQ_QUEUE, delay_level_name(3, "v1"))

    def implicit_type(inputs: dict[str, Any]) -> None:
        arguments = json.loads(inputs["settings"]["argumentsJson"])
        del arguments["x-queue-type"]
        inputs["settings"]["argumentsJson"] = json.dumps(arguments)

    violations = run(changed(resources, target, implicit_type))
    assert reported(violations) == [("queue-arguments-as-read", target.urn)]  # not a wrong NServiceBus argument
    assert "x-queue-type" in violations[0].message and "replaces the queue" in violations[0].message
    # a stack for a broker that keeps declarations as they are (brokerVersion below 4.0) declares no type
    assert run(changed(resources, target, implicit_type), {"queue-arguments-as-read": {"brokerVersion": "3.10"}}) == []
    three_ten = record_stack(
        parse_stack_config(
            {
                "rabbitmq": {
                    "generation": "v1",
                    "endpoints": ["Sales"],
                    "brokerVersion": "3.10",
                    "deliveryLimitPolicies": False,
                }
            }
        )
    )
    assert run(three_ten, {"queue-arguments-as-read": {"brokerVersion": "3.10"}}) == []


def refused_by_version(resources: Iterable[RecordedResource], version: str | None) -> list[Violation]:
    config = {"refused-by-broker-version": {"brokerVersion": version}} if version else None
    return [v for v in run(resources, config) if v.policy == "refused-by-broker-version"]


def test_what_the_stacks_broker_version_refuses_is_refused() -> None:
    """RabbitMQ 4.3 refuses x-queue-version 1 and the deprecated x-queue-master-locator (measured on 4.3.6, taken by
    4.0.5): a queue of the stack that declares them is refused when brokerVersion is 4.3, named with the fix."""
    target = find(dev_recorded(), RABBITMQ_QUEUE, "Sales")

    def old_arguments(inputs: dict[str, Any]) -> None:
        set_queue_argument("x-queue-version", 1)(inputs)
        set_queue_argument("x-queue-master-locator", "min-masters")(inputs)

    resources = changed(dev_recorded(), target, old_arguments)
    on_4_3 = refused_by_version(resources, "4.3")
    assert [v.urn for v in on_4_3] == [target.urn] * 2
    assert "queue 'Sales': x-queue-version: 1 with brokerVersion '4.3'" in on_4_3[0].message
    assert "x-queue-leader-locator" in on_4_3[1].message and all(v.mandatory for v in on_4_3)
    assert refused_by_version(resources, None) == on_4_3  # the default: 4.3
    assert refused_by_version(resources, "4.0") == []  # 4.0 takes them
    assert refused_by_version(changed(dev_recorded(), target, set_queue_argument("x-queue-version", 2)), "4.3") == []


def test_a_policy_with_the_master_locator_is_refused_for_4_3() -> None:
    policy = broker_policy("^Sales$", {"queue-master-locator": "min-masters"}, apply_to="queues")
    violations = refused_by_version([*dev_recorded(), *policy], "4.3.6")
    assert [v.urn for v in violations] == [policy[0].urn]
    assert "queue-master-locator" in violations[0].message and "queue-leader-locator" in violations[0].message


@pytest.mark.parametrize(
    ("version", "refused"),
    [("4.3", True), ("4.3.3", True), ("4.3.6", True), ("4.3.2", False), ("4.0", False), ("3.10", False)],
)
def test_a_policy_pattern_over_the_brokers_bound_is_refused_from_4_3_3(version: str, refused: bool) -> None:
    """RabbitMQ 4.3.3 refuses a pattern over 1,024 bytes, counted in bytes ('é' is two); "4.3" means any 4.3 patch."""
    long = "^(" + "é" * 511 + ")$"  # 515 characters, 1,026 bytes
    fits = "^(" + "é" * 510 + ")$"  # 1,024 bytes
    for operator in (False, True):
        policy = broker_policy(long, {"alternate-exchange": "p"}, apply_to="exchanges", operator=operator)
        violations = refused_by_version([*dev_recorded(), *policy], version)
        assert [v.urn for v in violations] == ([policy[0].urn] if refused else [])
        if refused:
            assert "1026 bytes" in violations[0].message and "over 1024" in violations[0].message
            assert "4.3.3" in violations[0].message and violations[0].mandatory
    policy = broker_policy(fits, {"alternate-exchange": "p"}, apply_to="exchanges")
    assert refused_by_version([*dev_recorded(), *policy], version) == []


# --- delivery limits over endpoint queues (RabbitMQ 4.x, NServiceBus.RabbitMQ 10+) ---------------------------


def delivery_limit_violations(recorded: Iterable[RecordedResource]) -> list[Violation]:
    return [v for v in run(recorded) if v.policy == "endpoint-queue-delivery-limit"]


def test_a_catch_all_delivery_limit_policy_is_reported_for_every_quorum_endpoint_queue() -> None:
    """Not harmless: NServiceBus 10+ refuses to start on a queue whose delivery limit is not its own policy's."""
    policy = broker_policy(".*", {"delivery-limit": "5"}, apply_to="queues")
    violations = delivery_limit_violations([*dev_recorded(), *policy])
    receiving = ["Billing", "Billing-blue", "Sales", "Shipping"]
    assert [(v.urn, v.mandatory) for v in violations] == [(policy[0].urn, True)] * len(receiving)
    for queue, violation in zip(receiving, violations, strict=True):
        assert violation.message.startswith(f"policy 'ttl' reaches endpoint queue {queue!r}: delivery-limit is 5")
        assert f"refuses to start on {queue!r}" in violation.message


def shipping_policy(name: str, priority: int) -> list[RecordedResource]:
    """A user's policy over ``^Ship`` with no delivery limit: it outranks the endpoint queues' own at priority >= 0."""
    return record(
        lambda: rabbitmq.Policy(
            name, name=name, vhost="/",
            policy=rabbitmq.PolicyPolicyArgs(
                pattern="^Ship", priority=priority, apply_to="queues", definition={"max-length": "9"}
            ),
        )
    )  # fmt: skip


def test_an_operator_policy_limit_and_an_outranking_policy_are_reported_but_a_lower_one_is_not() -> None:
    operator = broker_policy("^Sales$", {"delivery-limit": "100"}, apply_to="all", operator=True)
    outranking = shipping_policy("ha", priority=1)
    lower = shipping_policy("low", priority=-1)
    violations = delivery_limit_violations([*dev_recorded(), *operator, *outranking, *lower])
    assert [v.urn for v in violations] == [operator[0].urn, outranking[0].urn]
    assert "operator policy 'limits' reaches endpoint queue 'Sales': delivery-limit is 100" in violations[0].message
    assert "policy 'ha' reaches endpoint queue 'Shipping': priority is 1, expected < 0" in violations[1].message


def test_the_delivery_limit_rules_judge_on_the_stacks_broker_version() -> None:
    """Below RabbitMQ 4.0 a quorum queue has no default delivery limit and NServiceBus.RabbitMQ writes no policy of its
    own, so a policy without a limit that outranks where its policy would be is no reason to refuse; a limit other
    than 100000 is, on any broker. The rules take the stack's brokerVersion (``nsb-delays check`` passes it)."""
    operator = broker_policy("^Sales$", {"delivery-limit": "100"}, apply_to="all", operator=True)
    outranking = shipping_policy("ha", priority=1)
    recorded = [*dev_recorded(), *operator, *outranking]
    rules = ("endpoint-queue-delivery-limit", "transport-version-delivery-limit")
    on_3_13 = {rule: {"brokerVersion": "3.13"} for rule in rules}
    violations = [v for v in run(recorded, on_3_13) if v.policy == "endpoint-queue-delivery-limit"]
    assert [v.urn for v in violations] == [operator[0].urn]
    assert violations[0].message.endswith("refuses to start on 'Sales'. Fix: remove 'delivery-limit' from it or "
                                          "exclude 'Sales' from its pattern.")  # fmt: skip
    with pytest.raises(PolicyConfigError, match=r"'brokerVersion': 'four' does not match"):
        run(recorded, {rule: {"brokerVersion": "four"} for rule in rules})  # the schema's pattern, before any rule
    too_old = {rule: {"brokerVersion": "3.9"} for rule in rules}
    assert sorted((v.policy, v.message) for v in run(recorded, too_old) if v.policy in rules) == [
        (rule, f"policy config {rule}.brokerVersion: '3.9' is below RabbitMQ 3.10, the oldest broker supported")
        for rule in rules
    ]  # fmt: skip


def test_a_delivery_limit_argument_on_an_endpoint_queue_is_reported() -> None:
    sales = find(dev_recorded(), RABBITMQ_QUEUE, "Sales")
    violations = delivery_limit_violations(changed(dev_recorded(), sales, set_queue_argument("x-delivery-limit", 5)))
    assert [v.urn for v in violations] == [sales.urn]
    assert "declares x-delivery-limit=5" in violations[0].message


def test_a_delivery_limit_argument_nservicebus_accepts_is_reported_as_not_its_policy() -> None:
    """x-delivery-limit 100000 is what NServiceBus.RabbitMQ 10.1.5+ accepts (``delivery_limit_decision``, as ``verify``
    and the check before provisioning judge it): reported, the limit is not its policy's, but not as a refusal."""
    sales = find(dev_recorded(), RABBITMQ_QUEUE, "Sales")
    recorded = changed(dev_recorded(), sales, set_queue_argument("x-delivery-limit", 100000))
    (violation,) = delivery_limit_violations(recorded)
    assert violation.urn == sales.urn and "refuses" not in violation.message
    assert "declares x-delivery-limit=100000: NServiceBus accepts exactly 100000, but the limit then depends on the " \
           "argument, not on 'nsb.Sales.delivery-limit'. Remove the argument" in violation.message  # fmt: skip


def test_nservicebus_own_policy_with_its_old_unlimited_value_is_reported_as_one_it_writes_over() -> None:
    """``nsb.Sales.delivery-limit`` with -1 (what 10.0.0 to 10.1.4 write): 10.1.6 writes its own policy over it at
    start, which needs the policymaker tag; it is not a refusal."""
    recorded = record_stack(load_stack(STACK).with_values("rabbitmq", policyScope="endpoint"), stack=STACK)
    own = find(recorded, RABBITMQ_POLICY, delivery_limit_policy_name("Sales"))
    old = changed(recorded, own, lambda inputs: inputs["policy"]["definition"].update({"delivery-limit": "-1"}))
    (violation,) = delivery_limit_violations(old)
    assert violation.urn == own.urn and "refuses" not in violation.message
    assert "NServiceBus.RabbitMQ 10+ starts on 'Sales' only if it may write policies: its own policy has delivery " \
           "limit -1: it PUTs policy 'nsb.Sales.delivery-limit' (delivery-limit 100000)" in violation.message  # fmt: skip


def test_the_programs_own_policies_pass_and_a_changed_one_is_reported() -> None:
    assert delivery_limit_violations(dev_recorded()) == []
    combined = find(dev_recorded(), RABBITMQ_POLICY, "nsb-delays.dev.delivery-limit.all")
    weakened = changed(
        dev_recorded(), combined, lambda inputs: inputs["policy"]["definition"].update({"delivery-limit": "20"})
    )
    violations = delivery_limit_violations(weakened)
    assert sorted(v.message.split("'")[3] for v in violations) == ["Billing", "Billing-blue", "Sales", "Shipping"]
    assert all(v.urn == combined.urn and v.mandatory for v in violations)
    assert "definition {'delivery-limit': '20'}" in violations[0].message
    assert "declare it as RabbitMqEndpointPolicies does" in violations[0].message


def test_per_endpoint_policies_pass_and_a_changed_one_is_reported() -> None:
    recorded = record_stack(load_stack(STACK).with_values("rabbitmq", policyScope="endpoint"), stack=STACK)
    assert delivery_limit_violations(recorded) == []
    own = find(recorded, RABBITMQ_POLICY, delivery_limit_policy_name("Sales"))
    weakened = changed(recorded, own, lambda inputs: inputs["policy"]["definition"].update({"delivery-limit": "20"}))
    (violation,) = delivery_limit_violations(weakened)
    assert violation.urn == own.urn and violation.mandatory
    assert (
        "definition is pattern '^Sales$', apply-to quorum_queues, priority 0, definition {'delivery-limit': '20'}"
        in (violation.message)
    )


def test_an_endpoint_queue_is_judged_in_its_own_vhost_when_another_vhost_has_one_of_the_same_name() -> None:
    """Two vhosts, each with a 'Sales' queue: the one given x-delivery-limit is reported, whichever comes last."""
    other = other_vhost_recorded()
    sales = find(dev_recorded(), RABBITMQ_QUEUE, "Sales")
    limited = changed(dev_recorded(), sales, set_queue_argument("x-delivery-limit", 5))
    for recorded in ([*limited, *other], [*other, *limited]):
        violations = delivery_limit_violations(recorded)
        assert [v.urn for v in violations] == [sales.urn]
