"""Who can reach the broker and what they may do there: the management API over https, users' passwords as
secrets, and no user whose tags or permissions let it delete, drain or re-time the delay graph's messages.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from pulumi_policy import PolicyConfigSchema, ResourceValidationArgs, StackValidationArgs

from nsb_delays.components.model import permissions
from nsb_delays.components.resource_types import RABBITMQ_PERMISSIONS, RABBITMQ_PROVIDER, RABBITMQ_USER

from .props import UNKNOWN, Report, config_value, resolved, value_at
from .rule import MANDATORY, names_option, quoted, resource_rule, stack_rule
from .stack_view import broker_of, brokers, generations_present, where

# --- the management API ------------------------------------------------------------------------------------

HTTPS_SCHEMA = PolicyConfigSchema(
    properties={
        "allowHttpEndpoint": {
            "type": "boolean",
            "default": False,
            "description": "Accept a plain-http management endpoint on any host (local stacks only).",
        },
        "allowLoopbackHttp": {
            "type": "boolean",
            "default": True,
            "description": "Accept plain http to localhost/127.0.0.0/8/::1, where credentials never leave the host.",
        },
    }
)
LOOPBACK_HOSTS = frozenset({"localhost"})


def _is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@resource_rule(
    name="rabbitmq-endpoint-https",
    description=(
        "The RabbitMQ provider talks to the management API over https (plain http only to loopback, or when "
        "the policy config sets allowHttpEndpoint for a local stack). Fix: an https rabbitmq:endpoint."
    ),
    level=MANDATORY,
    types=(RABBITMQ_PROVIDER,),
    config_schema=HTTPS_SCHEMA,
)
def rabbitmq_endpoint_https(args: ResourceValidationArgs, report: Report) -> None:
    endpoint = value_at(args.props, "endpoint")
    if not isinstance(endpoint, str) or not endpoint:
        return
    parts = urlsplit(endpoint)
    if parts.scheme == "https":
        return
    config = args.get_config()
    if config_value(config, HTTPS_SCHEMA, "allowHttpEndpoint"):
        return
    loopback = parts.scheme == "http" and _is_loopback(parts.hostname or "")
    if loopback and config_value(config, HTTPS_SCHEMA, "allowLoopbackHttp"):
        return
    report(
        f"RabbitMQ provider endpoint {endpoint!r} is not https: the management API credentials and every "
        "definition travel in clear text. Use https://… (rabbitmq:endpoint), or for a local stack set this "
        "policy's allowHttpEndpoint=true in --policy-pack-config.",
    )


# --- users -------------------------------------------------------------------------------------------------


@resource_rule(
    name="rabbitmq-user-password-secret",
    description=(
        "A rabbitmq User's password is a non-empty Pulumi secret, never plain text in program or state. "
        "Fix: read it with Config().require_secret() after `pulumi config set --secret`."
    ),
    level=MANDATORY,
    types=(RABBITMQ_USER,),
)
def rabbitmq_user_password_secret(args: ResourceValidationArgs, report: Report) -> None:
    """How a rule can see that an input is secret: pulumi-policy's validation path unwraps secrets before any rule
    runs (sdk/python/lib/pulumi_policy/policy.py ``_PolicyAnalyzerServicer.Analyze`` calls
    ``deserialize_properties`` without ``proxy_secrets``; deserialize.py ``_deserialize_property`` then returns the
    bare value; only ``Remediate`` keeps ``Secret`` wrappers), so ``props`` never say it. What remains is the
    resource's options: ``_get_resource_options`` hands over ``additionalSecretOutputs``, where the SDKs list the
    secret inputs. pulumi_rabbitmq's ``User`` always lists ``password`` there (user.py ``_internal_init``), so
    through that SDK only an empty password fails here; a password in plain text in the stack file is refused
    earlier, by the stack config (``stack.config._check_passwords``)."""
    name = value_at(args.props, "name")
    password = value_at(args.props, "password")
    if password is UNKNOWN:
        return
    if not password:
        report(f"RabbitMQ user {quoted(name)} has an empty password. Set a secret password.")
        return
    if "password" not in (args.opts.additional_secret_outputs or []):
        report(
            f"RabbitMQ user {quoted(name)}: the password is not a secret, so it is stored in plain text in the "
            "stack state. Pass pulumi.Output.secret(...) or Config().require_secret(...), set with "
            "`pulumi config set --secret`.",
        )


EXEMPT_USERS_SCHEMA = PolicyConfigSchema(
    properties={
        "exemptUsers": names_option(
            "Users this stack declares that are not endpoint users (an operator's account), "
            "which may hold these rights."
        )
    }
)


def exempt_users(config: Mapping[str, Any]) -> frozenset[str]:
    return frozenset(config_value(config, EXEMPT_USERS_SCHEMA, "exemptUsers") or [])


@resource_rule(
    name="rabbitmq-user-no-broad-tags",
    description=(
        f"No RabbitMQ user the stack declares has a broad tag ({', '.join(permissions.BROAD_TAGS)}): either lets it "
        "delete or re-time delayed messages through the management API. Fix: the endpoint user's least grants "
        f"({permissions.MANAGEMENT_TAG!r} at most), or list an operator's account in exemptUsers."
    ),
    level=MANDATORY,
    types=(RABBITMQ_USER,),
    config_schema=EXEMPT_USERS_SCHEMA,
)
def rabbitmq_user_no_broad_tags(args: ResourceValidationArgs, report: Report) -> None:
    """Mandatory, as the pack's rules for whatever can lose messages are: ``administrator`` can grant itself every
    permission in the delay graph's vhost (and so delete its level queues), ``policymaker`` can set a policy with
    ``expires`` or ``message-ttl`` over the level queues (``delay-queue-broker-policy`` guards only the stack's own
    policies), and an endpoint needs neither once its delivery-limit policies are pre-created
    (``components.model.permissions``)."""
    name = value_at(args.props, "name")
    exempt = exempt_users(args.get_config())
    tags = resolved(value_at(args.props, "tags"))
    if name in exempt or (name is UNKNOWN and exempt) or not isinstance(tags, list):
        return
    broad = [tag for tag in permissions.BROAD_TAGS if tag in tags]
    if broad:
        report(
            f"RabbitMQ user {quoted(name)} has the tag(s) {', '.join(map(repr, broad))}: it can grant itself every "
            "permission (administrator) and delete the level queues with their delayed messages, or put a policy with "
            "expires or message-ttl over them (policymaker). "
            f"An endpoint needs {permissions.MANAGEMENT_TAG!r} at most; declare it as an endpoint user (an endpoint's "
            "`user:` in the stack, RabbitMqEndpointUser), or list an operator's account in this policy's exemptUsers.",
        )


# What a permission matching every name lets a user do to the delay graph (RabbitMQ's access control guide, the
# table of operations and the permission each needs; binding needs write on the destination and read on the source,
# so write and read together also let it bind or unbind any level).
EVERYTHING_CONSEQUENCES = {
    "configure": "delete or re-declare any level queue or exchange (a deleted level queue takes its messages)",
    "write": "publish into any level with any routing key",
    "read": "consume, get or purge the delayed messages of every level queue",
}


@stack_rule(
    name="rabbitmq-user-no-wildcard-permissions",
    description=(
        "No RabbitMQ user has a configure, write or read permission matching every name ('.*' in any spelling) in a "
        "vhost where the stack declares the delay graph: it could delete, drain or misroute every endpoint's delayed "
        "messages. Fix: the endpoint user's least grants (RabbitMqEndpointUser), or list an operator's account in "
        "exemptUsers."
    ),
    level=MANDATORY,
    config_schema=EXEMPT_USERS_SCHEMA,
)
def rabbitmq_user_no_wildcard_permissions(args: StackValidationArgs, report: Report) -> None:
    """Mandatory, as the pack's rules for whatever can lose messages are: a ``.*`` permission in the vhost of the
    delay graph lets one endpoint's bug or stolen password delete, drain or misroute every endpoint's delayed
    messages, and no endpoint needs it (``components.model.permissions.endpoint_user_grants``). The vhost holds
    the delay graph when this stack declares a level exchange or queue of either generation there."""
    exempt = exempt_users(args.get_config())
    graphs = {key: generations_present(broker) for key, broker in brokers(args.resources).items()}  # once a vhost
    for resource in args.resources:
        if resource.resource_type != RABBITMQ_PERMISSIONS or value_at(resource.props, "vhost") is UNKNOWN:
            continue
        key = broker_of(resource)
        generations = graphs.get(key, [])
        user = value_at(resource.props, "user")
        granted = resolved(value_at(resource.props, "permissions"))
        if not generations or user in exempt or (user is UNKNOWN and exempt) or not isinstance(granted, Mapping):
            continue
        broad = {
            kind: pattern
            for kind in EVERYTHING_CONSEQUENCES
            if isinstance(pattern := granted.get(kind), str) and permissions.is_everything(pattern)
        }
        if broad:
            who = f"user {user!r}" if isinstance(user, str) else "a user"
            report(
                f"{who} has {', '.join(f'{kind} {pattern!r}' for kind, pattern in broad.items())} in {where(key)}, "
                f"which holds the {'/'.join(generations)} delay graph: it can "
                f"{'; '.join(EVERYTHING_CONSEQUENCES[kind] for kind in broad)}. Give the endpoint its least grants "
                "(an endpoint's `user:` in the stack, RabbitMqEndpointUser), or list an operator's account in this "
                "policy's exemptUsers.",
                resource.urn,
            )
