"""Which RabbitMQ versions the project supports, and how a version is read (a stack's ``brokerVersion``, a broker's
report).

The minimum and the feature flags are NServiceBus.RabbitMQ's (``src/NServiceBus.Transport.RabbitMQ/Administration/
BrokerVerifier.cs``: 3.10.0, ``stream_queue``, ``quorum_queue``): the v2 graph needs at-least-once dead-lettering.
"""

from __future__ import annotations

import re

__all__ = [
    "DEFAULT_BROKER_VERSION",
    "FEATURE_FLAG_FIX",
    "MINIMUM_BROKER_VERSION",
    "REQUIRED_FEATURE_FLAGS",
    "broker_version_mismatch",
    "parse_broker_version",
    "parse_reported_broker_version",
    "shown_version",
]


MINIMUM_BROKER_VERSION = (3, 10, 0)  # the oldest broker this project supports (verify refuses older)
REQUIRED_FEATURE_FLAGS = ("quorum_queue", "stream_queue")
FEATURE_FLAG_FIX = "rabbitmqctl enable_feature_flag {flag}"
# The broker the stack targets (stack config rabbitmq.brokerVersion): decides whether classic queues carry an
# explicit x-queue-type and whether NServiceBus's delivery-limit policies can be declared.
DEFAULT_BROKER_VERSION = "4.0"

_BROKER_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def parse_reported_broker_version(text: str) -> tuple[int, int, int]:
    """The version a broker reports (``GET /api/overview`` ``rabbitmq_version``, ``rabbitmqctl version``):
    ``"3.10.8"`` -> ``(3, 10, 8)``; a pre-release or build suffix (``3.13.0-rc.2``, ``3.12.1+1``) is dropped."""
    match = _BROKER_VERSION.match(text.strip()) if isinstance(text, str) else None
    if not match:
        raise ValueError(f"broker version {text!r} is not of the form MAJOR.MINOR[.PATCH]")
    major, minor, patch = (int(part or 0) for part in match.groups())
    return major, minor, patch


def parse_broker_version(text: str) -> tuple[int, int, int]:
    """A stack's ``brokerVersion``: exactly ``"3.10"`` or ``"4.0.5"`` -> ``(3, 10, 0)`` / ``(4, 0, 5)``, no older than
    the oldest broker supported; ValueError naming the value and the rule."""
    if not isinstance(text, str) or not _BROKER_VERSION.fullmatch(text):
        raise ValueError(f"{text!r} is not a RabbitMQ version: expected MAJOR.MINOR or MAJOR.MINOR.PATCH, e.g. '3.10'")
    version = parse_reported_broker_version(text)
    if version < MINIMUM_BROKER_VERSION:
        minimum = shown_version(MINIMUM_BROKER_VERSION)
        raise ValueError(f"{text!r} is below RabbitMQ {minimum}, the oldest broker supported")
    return version


def shown_version(version: tuple[int, ...]) -> str:
    """``(3, 12, 0)`` -> ``"3.12"``: a version threshold as the docs and messages write it."""
    return ".".join(map(str, version[:2]))


def broker_version_mismatch(broker_version: str, reported: str) -> str | None:
    """The fix when a stack's ``broker_version`` does not describe a broker that reports ``reported`` (``GET
    /api/overview`` ``rabbitmq_version``), or None when it does.

    The rule: the same ``MAJOR.MINOR``. Every version the model decides by is a minor release (queue types stored
    from 4.0, delivery-limit policies accepted from 3.12, the quorum default delivery limit from 4.0), so a patch is
    never compared; any other difference may make the broker refuse, half-way through an ``up``, what the model
    declares for the version the stack names (RabbitMQ 3.10 refuses the 4.0 delivery-limit policies)."""
    version = parse_reported_broker_version(reported)
    if version < MINIMUM_BROKER_VERSION:
        return f"upgrade the broker: RabbitMQ {shown_version(MINIMUM_BROKER_VERSION)} is the oldest supported"
    if parse_broker_version(broker_version)[:2] == version[:2]:
        return None
    return f"set it to {shown_version(version)!r}"
