"""The pack's name and its rules, in one list that ``__main__`` serves and ``nsb-delays check`` runs.

The order is the pack's: each resource rule, then each stack rule, as ``check`` reports them and the policy
reference lists them. Each rule module registers what it declares (``rule.REGISTERED``); a rule left out of
this list, or listed twice, stops the pack from loading.
"""

from __future__ import annotations

from pulumi_policy import EnforcementLevel, Policy

from . import access_rules, declaration_rules, endpoint_rules, graph_rules, sqs_rules
from .rule import REGISTERED

PACK_NAME = "nsb-delays"
DEFAULT_ENFORCEMENT_LEVEL = EnforcementLevel.ADVISORY  # every rule states its own level
POLICIES: list[Policy] = [
    # each resource
    graph_rules.delay_level_queue_arguments,
    declaration_rules.typed_queue_arguments,
    declaration_rules.queue_arguments_as_read,
    declaration_rules.refused_by_broker_version,
    graph_rules.delay_exchange_settings,
    graph_rules.delay_binding_keys,
    endpoint_rules.endpoint_delivery_binding,
    sqs_rules.sqs_delay_queue_settings,
    sqs_rules.sqs_delay_queue_deduplication,
    sqs_rules.sqs_delay_queue_retention,
    sqs_rules.sqs_delay_queue_no_redrive,
    sqs_rules.sqs_delay_queue_name,
    sqs_rules.sqs_queue_max_message_size,
    sqs_rules.sqs_queue_encrypted,
    access_rules.rabbitmq_endpoint_https,
    access_rules.rabbitmq_user_password_secret,
    access_rules.rabbitmq_user_no_broad_tags,
    graph_rules.delay_queue_broker_policy,
    graph_rules.delay_queue_protected,
    graph_rules.exchange_alternate_by_policy,
    # the whole stack
    graph_rules.delay_level_chain_complete,
    endpoint_rules.endpoint_destinations_exist,
    sqs_rules.sqs_delay_queue_pairs,
    declaration_rules.unique_physical_names,
    endpoint_rules.endpoint_retirement_order,
    endpoint_rules.endpoint_queue_delivery_limit,
    graph_rules.delay_graph_parking,
    access_rules.rabbitmq_user_no_wildcard_permissions,
    endpoint_rules.transport_version_delivery_limit,
]
POLICIES_BY_NAME: dict[str, Policy] = {policy.name: policy for policy in POLICIES}

if len(POLICIES_BY_NAME) != len(POLICIES):
    raise RuntimeError("two policies in the nsb-delays pack share a name")
if sorted(POLICIES_BY_NAME) != sorted(policy.name for policy in REGISTERED):
    raise RuntimeError("the nsb-delays pack's list and the rules its modules declare differ")
