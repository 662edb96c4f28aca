"""The management API reads ``nsb-delays discover`` classifies (``stack.discovery``): the vhost's definitions, the
broker's version and, for the endpoint users it proposes, the names of the users the broker has."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nsb_delays.components.model.rabbitmq.versions import broker_version_of, parse_reported_broker_version

from .management import ManagementApi, ManagementError


@dataclass(frozen=True)
class BrokerRead:
    definitions: dict[str, Any]
    broker_version: str  # as a stack's brokerVersion: MAJOR.MINOR of what the broker reports
    users: tuple[str, ...]


def read_broker(api: ManagementApi, vhost: str, *, users: bool = True) -> BrokerRead:
    """``GET /api/overview`` (the version), ``GET /api/definitions/<vhost>`` (every exchange, queue, binding and policy
    of the vhost in one read) and, with ``users``, ``GET /api/users``. ``ManagementError`` for an unreachable broker,
    a refused login or a vhost that does not exist."""
    reported = parse_reported_broker_version(str(api.overview().get("rabbitmq_version", "")))
    if not api.vhost_exists(vhost):
        raise ManagementError(f"vhost {vhost!r} does not exist on the broker at {api.address}: check --vhost")
    definitions = api.definitions(vhost)
    names = tuple(str(user["name"]) for user in api.users()) if users else ()
    return BrokerRead(definitions, broker_version_of(reported), names)
