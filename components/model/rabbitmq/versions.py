"""Which RabbitMQ versions the project supports, how a version is read (a stack's ``brokerVersion``, a broker's
report), and what a newer broker refuses that an older one took.

The minimum and the feature flags are NServiceBus.RabbitMQ's (``src/NServiceBus.Transport.RabbitMQ/Administration/
BrokerVerifier.cs``: 3.10.0, ``stream_queue``, ``quorum_queue``): the v2 graph needs at-least-once dead-lettering.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Self

__all__ = [
    "DEFAULT_BROKER_VERSION",
    "DEPRECATIONS_DENIED_FROM",
    "FEATURE_FLAG_FIX",
    "MAX_POLICY_PATTERN_BYTES",
    "MINIMUM_BROKER_VERSION",
    "POLICY_KEY_REFUSALS",
    "POLICY_PATTERN_BOUNDED_FROM",
    "QUEUE_ARGUMENT_REFUSALS",
    "REQUIRED_FEATURE_FLAGS",
    "BrokerVersion",
    "Version",
    "VersionRefusal",
    "broker_version_mismatch",
    "broker_version_of",
    "dotted_version",
    "parse_reported_broker_version",
    "pattern_bytes",
    "policy_pattern_refusal",
    "refusals_of",
    "shown_version",
]


MINIMUM_BROKER_VERSION = (3, 10, 0)  # the oldest broker this project supports (verify refuses older)
REQUIRED_FEATURE_FLAGS = ("quorum_queue", "stream_queue")
FEATURE_FLAG_FIX = "rabbitmqctl enable_feature_flag {flag}"


_BROKER_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


class Version(tuple[int, int, int]):
    """A version parsed once, where it entered: compared as ``(major, minor, patch)`` with another version or with the
    model's plain-tuple thresholds (``version >= (4, 0, 0)``), and shown as it was given: ``str(version)`` is the
    text itself (``"4.3"``, ``"3.10.0"``). Equal numbers are equal versions, whatever their text."""

    text: str

    @classmethod
    def _made(cls, text: str, numbers: Iterable[int]) -> Self:
        version = tuple.__new__(cls, numbers)
        version.text = text
        return version

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.text!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        """Copied and pickled with its text (``tuple``'s own would call ``__new__`` with the numbers)."""
        return type(self)._made, (self.text, tuple(self))


class BrokerVersion(Version):
    """A RabbitMQ version. ``BrokerVersion(text)`` is a stack's ``brokerVersion``: exactly ``"3.10"`` or ``"4.0.5"``
    (``(3, 10, 0)`` / ``(4, 0, 5)``), no older than the oldest broker supported, else ValueError naming the value and
    the rule; ``parse_reported_broker_version`` reads what a broker says it runs."""

    def __new__(cls, text: object) -> BrokerVersion:
        if not isinstance(text, str) or not _BROKER_VERSION.fullmatch(text):
            raise ValueError(
                f"{text!r} is not a RabbitMQ version: expected MAJOR.MINOR or MAJOR.MINOR.PATCH, e.g. '3.10'"
            )
        version = parse_reported_broker_version(text)
        if version < MINIMUM_BROKER_VERSION:
            minimum = shown_version(MINIMUM_BROKER_VERSION)
            raise ValueError(f"{text!r} is below RabbitMQ {minimum}, the oldest broker supported")
        return version

    @property
    def series(self) -> bool:
        """Whether it names a release series, not one release: ``"4.3"`` (no patch) is any 4.3.x."""
        match = _BROKER_VERSION.fullmatch(self.text)
        return match is not None and match.group(3) is None


def parse_reported_broker_version(text: str) -> BrokerVersion:
    """The version a broker reports (``GET /api/overview`` ``rabbitmq_version``, ``rabbitmqctl version``), read once
    where it is read: ``"3.10.8"`` -> ``(3, 10, 8)``; a pre-release or build suffix (``3.13.0-rc.2``, ``3.12.1+1``) is
    dropped from the numbers and kept in the text. Any version, however old: the caller judges it."""
    match = _BROKER_VERSION.match(text.strip()) if isinstance(text, str) else None
    if not match:
        raise ValueError(f"broker version {text!r} is not of the form MAJOR.MINOR[.PATCH]")
    return BrokerVersion._made(text.strip(), (int(part or 0) for part in match.groups()))


# The broker the stack targets (stack config rabbitmq.brokerVersion): decides whether classic queues carry an
# explicit x-queue-type and whether NServiceBus's delivery-limit policies can be declared (the same on every 4.x),
# and which declarations the policy pack refuses (QUEUE_ARGUMENT_REFUSALS). The default is the current release
# series, what a team installs today; a program refuses a broker of another MAJOR.MINOR (infra/broker_check.py).
DEFAULT_BROKER_VERSION = BrokerVersion("4.3")
# RabbitMQ 4.3.0 denies by default what 4.0 deprecated (rabbitmq/rabbitmq-server v4.3.0: the -rabbit_deprecated_feature
# attributes of deps/rabbit/src/rabbit_queue_location.erl queue_master_locator and rabbit_channel.erl global_qos turn
# from permitted_by_default to denied_by_default; rabbit_channel:handle_method/3 then handles a global basic.qos as
# global = false), and takes only classic queue version 2. Measured on 4.3.6. What
# 4.3.6 still takes: x-queue-mode (rabbit_classic_queue.erl capabilities/0 still lists it among the classic queue's
# arguments; the v1 graph's level queues carry it), transient non-exclusive queues (4.3.6's rabbit_amqqueue.erl declares
# transient_nonexcl_queues permitted_by_default, read from its compiled module; the v4.3.0 to v4.3.5 tags declare
# denied_by_default), and the management metrics collection (rabbit_mgmt_agent_config.erl,
# management_metrics_collection, permitted_by_default). The project declares neither kind of object.
DEPRECATIONS_DENIED_FROM = (4, 3, 0)


@dataclass(frozen=True)
class VersionRefusal:
    """A queue argument or a policy key that brokers from ``refused_from`` refuse (with any value but ``allowed``)."""

    key: str
    refused_from: tuple[int, int, int]
    allowed: tuple[object, ...]  # values still taken; empty: any value is refused
    refusal: str  # what the broker does with it
    fix: str

    def refuses(self, value: object, broker_version: tuple[int, int, int]) -> bool:
        allowed = {str(v) for v in self.allowed}
        return broker_version >= self.refused_from and str(value) not in allowed


QUEUE_ARGUMENT_REFUSALS = (
    # rabbit_amqqueue.erl check_queue_version/2 (v4.3.0): ok only when Val == 2, else "unsupported queue version";
    # v4.0.5 to v4.2.x take 1 and 2. Measured: 406 PRECONDITION_FAILED "invalid arg 'x-queue-version'" on 4.3.6.
    VersionRefusal(
        "x-queue-version",
        DEPRECATIONS_DENIED_FROM,
        (2,),
        "RabbitMQ 4.3 refuses the declaration (PRECONDITION_FAILED: unsupported queue version): it keeps classic "
        "queues of version 2 only",
        "remove x-queue-version or set it to 2",
    ),
    # rabbit_classic_queue.erl validate_arguments/1 (v4.3.0): unless rabbit_queue_location:master_locator_permitted()
    # (queue_master_locator, denied by default from 4.3.0), a protocol_error that closes the connection.
    VersionRefusal(
        "x-queue-master-locator",
        DEPRECATIONS_DENIED_FROM,
        (),
        "RabbitMQ 4.3 refuses the declaration and closes the connection (INTERNAL_ERROR: deprecated feature "
        "queue_master_locator, denied by default)",
        "declare x-queue-leader-locator instead (client-local or balanced)",
    ),
)
POLICY_KEY_REFUSALS = (
    # rabbit_classic_queue.erl validate_policy/1 (v4.3.0): "use of deprecated queue-master-locator argument is not
    # permitted" unless queue_master_locator is permitted.
    VersionRefusal(
        "queue-master-locator",
        DEPRECATIONS_DENIED_FROM,
        (),
        "RabbitMQ 4.3 refuses the policy (deprecated feature queue_master_locator, denied by default)",
        "set queue-leader-locator instead (client-local or balanced)",
    ),
)


# RabbitMQ 4.3.3 and later refuse a policy (and operator policy) whose pattern passes 1,024 bytes: rabbitmq-server
# v4.3.3, deps/rabbit_common/src/rabbit_re.erl compile/2 (MAX_PATTERN_LENGTH), answered by
# rabbit_parameter_validation:regex/2 as "pattern must not exceed 1024 bytes" (measured on 4.3.6); they also match every
# pattern under a match limit (rabbit_re:run/3). Older brokers take any length.
MAX_POLICY_PATTERN_BYTES = 1024
POLICY_PATTERN_BOUNDED_FROM = (4, 3, 3)


def pattern_bytes(pattern: str) -> int:
    """A pattern's length as RabbitMQ bounds it: UTF-8 bytes (``byte_size`` of the binary), not characters."""
    return len(pattern.encode("utf-8"))


def policy_pattern_refusal(pattern: str, broker_version: BrokerVersion) -> str | None:
    """Why a broker of ``broker_version`` (a stack's brokerVersion) refuses a policy ``pattern``, or None. A series
    (``"4.3"``, no patch) means any patch of it, so it is held to the strictest, 4.3.3's bound."""
    version = broker_version
    bounded = version >= POLICY_PATTERN_BOUNDED_FROM or (
        version.series and version[:2] >= POLICY_PATTERN_BOUNDED_FROM[:2]
    )
    size = pattern_bytes(pattern)
    if not bounded or size <= MAX_POLICY_PATTERN_BYTES:
        return None
    return (
        f"its pattern has {size} bytes and RabbitMQ {dotted_version(POLICY_PATTERN_BOUNDED_FROM)} and later refuse a "
        f"pattern over {MAX_POLICY_PATTERN_BYTES} ('pattern must not exceed {MAX_POLICY_PATTERN_BYTES} bytes')"
    )


def refusals_of(
    refusals: tuple[VersionRefusal, ...], declared: Mapping[str, object], broker_version: BrokerVersion
) -> list[tuple[VersionRefusal, object]]:
    """Each of ``declared`` (queue arguments, a policy definition) that a broker of ``broker_version`` refuses."""
    return [(r, declared[r.key]) for r in refusals if r.key in declared and r.refuses(declared[r.key], broker_version)]


def dotted_version(version: tuple[int, ...]) -> str:
    """``(4, 3, 3)`` -> ``"4.3.3"``: a version with its patch, as a broker reports it."""
    return ".".join(map(str, version))


def shown_version(version: tuple[int, ...]) -> str:
    """``(3, 12, 0)`` -> ``"3.12"``: a version threshold as the docs and messages write it."""
    return ".".join(map(str, version[:2]))


def broker_version_of(reported: BrokerVersion) -> str:
    """The ``brokerVersion`` a stack gives a broker that reports ``reported``: its ``MAJOR.MINOR`` (``"4.3.6"`` ->
    ``"4.3"``), the only part ``broker_version_mismatch`` compares."""
    return shown_version(reported)


def broker_version_mismatch(broker_version: BrokerVersion, reported: BrokerVersion) -> str | None:
    """The fix when a stack's ``broker_version`` does not describe a broker that reports ``reported`` (``GET
    /api/overview`` ``rabbitmq_version``, ``parse_reported_broker_version``), or None when it does.

    The rule: the same ``MAJOR.MINOR``. Every version the model decides by is a minor release (queue types stored
    from 4.0, delivery-limit policies accepted from 3.12, the quorum default delivery limit from 4.0), so a patch is
    never compared; any other difference may make the broker refuse, half-way through an ``up``, what the model
    declares for the version the stack names (RabbitMQ 3.10 refuses the 4.0 delivery-limit policies)."""
    if reported < MINIMUM_BROKER_VERSION:
        return f"upgrade the broker: RabbitMQ {shown_version(MINIMUM_BROKER_VERSION)} is the oldest supported"
    if broker_version[:2] == reported[:2]:
        return None
    return f"set it to {broker_version_of(reported)!r}"
