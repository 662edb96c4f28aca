"""``verify`` of the endpoint users (``user:`` of an endpoint): each exists with exactly the tags, permissions and topic
permissions ``components.model.permissions.endpoint_user_grants`` gives it, and no other topic permission in the
vhost. Each drift's fix is ``pulumi up --refresh`` or the ``rabbitmqctl`` command that sets exactly the expected value.
"""

from __future__ import annotations

import shlex
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from nsb_delays.components.model.permissions import UserGrants

from .drift import ABSENT, Drift, field_drifts, shown
from .management import ManagementApi


def user_tags(tags: Any) -> list[str]:
    """A user's ``tags`` from ``GET /api/users/<name>``, sorted (RabbitMQ keeps no order). RabbitMQ 3.10.8 and
    4.0.5 answer a JSON list (``rabbit_mgmt_format:internal_user/1`` -> ``tags_as_binaries/1``, read from the
    installed plugins' debug info); the HTTP API reference (``priv/www/api/index.html``, ``/api/users/name``) calls
    ``tags`` "a comma-separated list of tags", which older brokers answered as one string: both are read."""
    if isinstance(tags, str):
        return sorted(tag.strip() for tag in tags.split(",") if tag.strip())
    return sorted(str(tag) for tag in tags or [])


def _rabbitmqctl(*words: str) -> str:
    return " ".join(["rabbitmqctl", *(shlex.quote(word) for word in words)])


# The provider reads a user's live tags, permissions and every topic permission of the user in the vhost back on
# refresh, and an update of topic permissions clears them all before it sets the declared ones
# (cyrilgdn/terraform-provider-rabbitmq rabbitmq/resource_topic_permissions.go ``ReadTopicPermissions``,
# ``UpdateTopicPermissions``): a refreshing update restores exactly the grants, extra entries removed.
REFRESH_FIX = "pulumi up --refresh (the refresh reads the live user back, the update restores the stack's grants)"


def user_drifts(
    grants: UserGrants, user: dict[str, Any] | None, permissions: dict[str, Any] | None, topic: Iterable[dict[str, Any]]
) -> list[Drift]:
    """One endpoint user as the management API shows it (``user``/``permissions`` None when absent) vs ``grants``:
    tags, the three permission regexes, each topic permission's write/read, and no topic permission beyond them.
    Each fix is ``pulumi up --refresh`` or the ``rabbitmqctl`` command that sets exactly the expected value."""
    name, vhost = grants.user, grants.vhost
    if user is None:
        return [Drift("missing", f"user {name}", "", "exists", ABSENT, REFRESH_FIX)]
    drifts = []
    tags = user_tags(user.get("tags"))
    if tags != sorted(grants.tags):
        fix = f"{REFRESH_FIX}, or {_rabbitmqctl('set_user_tags', name, *grants.tags)}"
        drifts.append(Drift("different", f"user {name}", "tags", shown(sorted(grants.tags)), shown(tags), fix))
    wanted = {"configure": grants.configure, "write": grants.write, "read": grants.read}
    subject = f"permissions of {name}"
    fix = f"{REFRESH_FIX}, or {_rabbitmqctl('set_permissions', '-p', vhost, name, *wanted.values())}"
    if permissions is None:
        drifts.append(Drift("missing", subject, "", shown(wanted), ABSENT, fix))
    else:
        drifts += field_drifts(subject, wanted, permissions, fix)
    live = {str(entry.get("exchange")): entry for entry in topic}
    for grant in grants.topic:
        subject = f"topic permission of {name} on {grant.exchange}"
        entry = live.get(grant.exchange)
        command = _rabbitmqctl("set_topic_permissions", "-p", vhost, name, grant.exchange, grant.write, grant.read)
        fix = f"{REFRESH_FIX}, or {command}"
        expected = {"write": grant.write, "read": grant.read}
        if entry is None:
            drifts.append(Drift("missing", subject, "", shown(expected), ABSENT, fix))
        else:
            drifts += field_drifts(subject, expected, entry, fix)
    for exchange in sorted(set(live) - {grant.exchange for grant in grants.topic}):
        entry = live[exchange]
        fix = f"{REFRESH_FIX}, or {_rabbitmqctl('clear_topic_permissions', '-p', vhost, name, exchange)}"
        actual = {"write": entry.get("write"), "read": entry.get("read")}
        drifts.append(Drift("unexpected", f"topic permission of {name} on {exchange}", "", ABSENT, shown(actual), fix))
    return drifts


def endpoint_user_drifts(api: ManagementApi, grants: UserGrants) -> list[Drift]:
    """``user_drifts`` of one planned user, read from the broker (its permissions only when the user exists)."""
    user = api.user(grants.user)
    if user is None:
        return user_drifts(grants, None, None, [])
    permissions = api.permissions(grants.vhost, grants.user)
    return user_drifts(grants, user, permissions, api.topic_permissions(grants.vhost, grants.user))


def endpoint_users_drifts(api: ManagementApi, planned: Sequence[UserGrants]) -> list[Drift]:
    """``user_drifts`` of every planned user, from one listing of the users and, per vhost, one of the permissions
    and one of the topic permissions (never one call per user)."""
    if not planned:
        return []
    users = {str(user["name"]): user for user in api.users()}
    permissions: dict[tuple[str, str], dict[str, Any]] = {}
    topic: defaultdict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for vhost in sorted({grants.vhost for grants in planned}):
        permissions |= {(vhost, str(entry["user"])): entry for entry in api.vhost_permissions(vhost)}
        for entry in api.vhost_topic_permissions(vhost):
            topic[vhost, str(entry["user"])].append(entry)
    return [
        drift
        for grants in planned
        for drift in user_drifts(
            grants,
            users.get(grants.user),
            permissions.get((grants.vhost, grants.user)),
            topic.get((grants.vhost, grants.user), []),
        )
    ]
