"""Which policy RabbitMQ applies to an exchange or queue, and the effective definition, computed from the lists.

The management API's ``policy``, ``operator_policy``, ``effective_policy_definition`` and ``delivery_limit`` of a
listed queue come from the queue process's statistics and lag a policy change by seconds; the policy lists
(``GET /api/policies/<vhost>``, ``GET /api/operator-policies/<vhost>``) are the broker's records. This module
works out from the records what the broker writes into each object's record, by the broker's own rules
(rabbitmq/rabbitmq-server ``deps/rabbit/src``, read at tags v3.10.8, v3.12.0, v3.13.0 and v4.0.5):

- ``rabbit_policy.erl`` ``match/2`` -> ``match_all/2`` (4.0: ``match/3``, ``match_all/3``): the policies that
  ``matches/2`` (4.0: ``matches/3``) accepts, sorted by ``priority_comparator/2`` (``priority(A) >= priority(B)``)
  with ``lists:sort/2``; the first one is applied. ``matches`` takes a policy when its apply-to fits the object
  (``matches_type/2`` for exchanges: ``exchanges``, ``all``; for queues 3.10's ``matches_type/2``: ``queues``,
  ``all``; 3.12+ ``matches_queue_type/3``: ``queues``, ``all``, and ``classic_queues`` / ``quorum_queues`` /
  ``streams`` by the queue's type), when ``is_applicable`` holds (queues only: ``rabbit_queue_type.erl``
  ``is_policy_applicable/2``: no key of the definition is in the queue type's ``capabilities()``
  ``unsupported_policies``; exchanges: always), and when ``re:run(Name, Pattern, [{capture, none}])`` matches —
  unanchored, on the name's bytes (no ``unicode`` option): ``patterns``, the project's one matching rule.
- Ties: two matching policies of the same highest priority compare ``>=`` both ways, so ``lists:sort/2`` keeps
  them in the order of the input list, which is ``rabbit_runtime_parameters:list/2`` (``mnesia:match_object`` on
  the ``rabbit_runtime_parameters`` set table in 3.10; ``rabbit_db_rtparams:get_all/2``, Mnesia or Khepri, in
  4.0): store order, which no client sees or controls. A tie is therefore reported (``PolicyMatch.tied``), never
  resolved.
- Operator policies are matched the same way (``match_op/1`` is ``match/2`` over ``list_op/1``); the effective
  definition is ``merge_operator_definitions/2``: the union of both definitions' keys, a key in both merged by
  ``merge_policy_value/3`` -> ``rabbit_policies.erl`` ``merge_policy_value/3``: the lower value for
  ``message-ttl``, ``max-length``, ``max-length-bytes``, ``max-in-memory-length``, ``max-in-memory-bytes``,
  ``expires``, ``delivery-limit`` (4.0: for ``delivery-limit`` the higher when either is negative, "the more
  conservative value": the limited one), 4.0: the operator's for ``queue-version`` and ``overflow``; the operator's
  for two booleans.
- A quorum queue's delivery limit: ``rabbit_quorum_queue.erl`` ``ra_machine_config/1`` (3.10, 3.12;
  4.0: ``gather_policy_config/2``) with
  ``rabbit_queue_type_util.erl`` ``args_policy_lookup/3``: the effective definition's ``delivery-limit`` and the
  ``x-delivery-limit`` argument, the lower of both (3.10/3.12 ``fun min/2``; 4.0 ``resolve_delivery_limit/2``: the
  higher when either is negative: the limited one); none at all: no limit (3.x) or ``?DEFAULT_DELIVERY_LIMIT``
  20 (4.0); a negative limit is none (4.0 ``rabbit_fifo.erl`` ``init``), shown by the management API as
  ``unlimited``.

Python's ``re`` is not PCRE: a pattern it cannot compile makes the outcome unknown (``PolicyMatch.unknown``),
as ``BrokerPolicy.reaches`` does, whenever that policy could have been the one applied.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from .delivery_limits import DELIVERY_LIMIT_ARGUMENT, DELIVERY_LIMIT_POLICY_KEY, BrokerPolicy
from .patterns import erlang_regex, literal_names, name_matches

__all__ = [
    "ALL_TARGET",
    "QUEUES_TARGET",
    "QUORUM_DEFAULT_DELIVERY_LIMIT",
    "QUORUM_DEFAULT_DELIVERY_LIMIT_SINCE",
    "AppliedPolicies",
    "ObjectKind",
    "PolicyMatch",
    "PolicyMatcher",
    "applied_policies",
    "match_policy",
    "merge_operator_definitions",
    "policy_applies",
    "quorum_queue_delivery_limit",
    "reported_delivery_limit",
    "unsupported_policy_keys",
]

ObjectKind = Literal["exchange", "queue"]
ALL_TARGET = "all"
QUEUES_TARGET = "queues"
# rabbit_policy.erl matches_queue_type/3 (3.12.0, 4.0.5): the queue-type apply-tos and the type each takes.
_QUEUE_TYPE_TARGETS = {"classic_queues": "classic", "quorum_queues": "quorum", "streams": "stream"}

# rabbit_quorum_queue.erl ?DEFAULT_DELIVERY_LIMIT (v4.0.5), applied when neither argument nor policy sets one.
QUORUM_DEFAULT_DELIVERY_LIMIT = 20
QUORUM_DEFAULT_DELIVERY_LIMIT_SINCE = (4, 0, 0)

# capabilities() unsupported_policies of rabbit_classic_queue.erl, rabbit_quorum_queue.erl and
# rabbit_stream_queue.erl: (first version, {queue type: keys}), newest first; read at v3.10.8 (the same at v3.12.0),
# v3.13.0 and v4.0.5.
_IN_MEMORY = ("max-in-memory-length", "max-in-memory-bytes", "target-group-size")  # quorum-only from 3.13
_COMMON_CLASSIC = ("max-age", "stream-max-segment-size-bytes", "initial-cluster-size", "delivery-limit",
                   "dead-letter-strategy")  # fmt: skip
_QUORUM = ("max-priority", "queue-mode", "single-active-consumer", "ha-mode", "ha-params", "ha-sync-mode",
           "ha-promote-on-shutdown", "ha-promote-on-failure", "queue-master-locator", "max-age",
           "stream-max-segment-size-bytes", "initial-cluster-size")  # fmt: skip
_STREAM = ("expires", "message-ttl", "dead-letter-exchange", "dead-letter-routing-key", "max-length",
           "max-in-memory-length", "max-in-memory-bytes", "max-priority", "overflow", "queue-mode",
           "single-active-consumer", "delivery-limit", "ha-mode", "ha-params", "ha-sync-mode", "ha-promote-on-shutdown",
           "ha-promote-on-failure", "queue-master-locator", "dead-letter-strategy")  # fmt: skip
_UNSUPPORTED_POLICIES: tuple[tuple[tuple[int, int, int], dict[str, frozenset[str]]], ...] = (
    (
        (4, 0, 0),
        {
            "classic": frozenset((*_COMMON_CLASSIC, *_IN_MEMORY)),
            "quorum": frozenset(_QUORUM),
            "stream": frozenset((*_STREAM, "target-group-size")),
        },
    ),
    (
        (3, 13, 0),
        {
            "classic": frozenset((*_COMMON_CLASSIC, "queue-leader-locator", *_IN_MEMORY)),
            "quorum": frozenset(_QUORUM),
            "stream": frozenset((*_STREAM, "target-group-size")),
        },
    ),
    (
        (0, 0, 0),
        {
            "classic": frozenset((*_COMMON_CLASSIC, "queue-leader-locator")),
            "quorum": frozenset(_QUORUM),
            "stream": frozenset(_STREAM),
        },
    ),
)

# rabbit_policies.erl merge_policy_value/3: keys where the lower of policy and operator policy value holds.
_LOWER_WINS = frozenset(
    ("message-ttl", "max-length", "max-length-bytes", "max-in-memory-length", "max-in-memory-bytes", "expires",
     DELIVERY_LIMIT_POLICY_KEY)
)  # fmt: skip
_OPERATOR_WINS_SINCE_4_0 = frozenset(("queue-version", "overflow"))
_V4 = (4, 0, 0)  # where rabbit_policies.erl merge_policy_value/3 changed (above)


def unsupported_policy_keys(queue_type: str, broker_version: tuple[int, ...]) -> frozenset[str] | None:
    """The definition keys that keep a whole policy off a queue of ``queue_type`` (None: a type not known here)."""
    for since, table in _UNSUPPORTED_POLICIES:
        if broker_version >= since:
            return table.get(queue_type)
    return None  # pragma: no cover - the last band starts at 0.0.0


def _apply_to_fits(apply_to: str, kind: ObjectKind, queue_type: str | None) -> bool:
    """``matches_type/2`` / ``matches_queue_type/3``. 3.10 accepts no queue-type apply-to at all
    (``apply_to_validation/2``), so one rule serves every version."""
    if apply_to == ALL_TARGET:
        return True
    if kind == "exchange":
        return apply_to == "exchanges"
    return apply_to == QUEUES_TARGET or _QUEUE_TYPE_TARGETS.get(apply_to, "") == queue_type


_Compiled = tuple[BrokerPolicy, re.Pattern[bytes] | None]


def _keys_allowed(
    policy: BrokerPolicy, kind: ObjectKind, queue_type: str | None, broker_version: tuple[int, ...]
) -> bool | None:
    """``is_applicable``: a queue type takes no policy with a key it does not support (None: a type not known)."""
    if kind != "queue":
        return True
    unsupported = unsupported_policy_keys(queue_type or "", broker_version)
    if unsupported is None:
        return None
    return not unsupported.intersection(policy.definition)


def _fits(
    policy: BrokerPolicy, kind: ObjectKind, queue_type: str | None, broker_version: tuple[int, ...]
) -> bool | None:
    """``matches`` but for the pattern: apply-to, then the queue type's keys; the same for every name."""
    return (
        _keys_allowed(policy, kind, queue_type, broker_version)
        if _apply_to_fits(policy.apply_to, kind, queue_type)
        else False
    )


def _with_pattern(fits: bool | None, regex: re.Pattern[bytes] | None, name: str) -> bool | None:
    """``fits``, then the pattern, unanchored like ``re:run``; None when either cannot be evaluated here."""
    if not fits:
        return fits
    return None if regex is None else name_matches(regex, name)


def _applies(
    policy: BrokerPolicy,
    regex: re.Pattern[bytes] | None,
    kind: ObjectKind,
    name: str,
    queue_type: str | None,
    broker_version: tuple[int, ...],
) -> bool | None:
    return _with_pattern(_fits(policy, kind, queue_type, broker_version), regex, name)


def policy_applies(
    policy: BrokerPolicy, kind: ObjectKind, name: str, queue_type: str | None, broker_version: tuple[int, ...]
) -> bool | None:
    """``rabbit_policy`` ``matches``: apply-to, the queue type's unsupported keys, then the pattern.
    None when the answer is unknown here (a pattern Python cannot compile, a queue type not known here)."""
    return _applies(policy, erlang_regex(policy.pattern), kind, name, queue_type, broker_version)


@dataclass(frozen=True)
class PolicyMatch:
    """The policy RabbitMQ applies to one object, from one list (user or operator policies).

    ``policy`` is the applied one when ``determined``; ``tied`` holds every matching policy of the highest priority
    when there are several (the broker takes one of them by store order: undefined); ``unknown`` holds the
    policies Python could not evaluate that could outrank or tie the best known match.
    """

    policy: BrokerPolicy | None
    tied: tuple[BrokerPolicy, ...] = ()
    unknown: tuple[BrokerPolicy, ...] = ()

    @property
    def determined(self) -> bool:
        return not self.tied and not self.unknown

    @property
    def name(self) -> str | None:
        return self.policy.name if self.policy is not None and self.determined else None


def _ranked(matching: Sequence[BrokerPolicy], unknown: Sequence[BrokerPolicy]) -> PolicyMatch:
    """``rabbit_policy:match/2`` over the policies that apply (and those that cannot be evaluated): the one of the
    highest priority; ties and unknowns reported."""
    if not unknown and len(matching) < 2:  # most objects of a stack: one policy or none, nothing to rank
        return PolicyMatch(matching[0] if matching else None)
    best = max((p.priority for p in matching), default=None)
    top = [p for p in matching if p.priority == best]
    relevant = tuple(p for p in unknown if best is None or p.priority >= best)
    return PolicyMatch(top[0] if top else None, tuple(top) if len(top) > 1 else (), relevant)


def _match(
    compiled: Iterable[_Compiled],
    kind: ObjectKind,
    name: str,
    queue_type: str | None,
    broker_version: tuple[int, ...],
) -> PolicyMatch:
    """``rabbit_policy:match/2``: the highest-priority policy that applies; ties and unknowns reported."""
    matching: list[BrokerPolicy] = []
    unknown: list[BrokerPolicy] = []
    for policy, regex in compiled:
        applies = _applies(policy, regex, kind, name, queue_type, broker_version)
        if applies is None:
            unknown.append(policy)
        elif applies:
            matching.append(policy)
    return _ranked(matching, unknown)


def match_policy(
    policies: Iterable[BrokerPolicy],
    kind: ObjectKind,
    name: str,
    queue_type: str | None,
    broker_version: tuple[int, ...],
) -> PolicyMatch:
    """The policy of ``policies`` a broker of ``broker_version`` applies to one exchange (``queue_type`` None) or queue
    (``queue_type``: classic, quorum, stream), as ``rabbit_policy:match/2`` picks it; ties and unknowns reported."""
    return _match(((p, erlang_regex(p.pattern)) for p in policies), kind, name, queue_type, broker_version)


def _merge_value(key: str, value: object, operator_value: object, broker_version: tuple[int, ...]) -> object:
    """``rabbit_policies:merge_policy_value/3``; ValueError where the broker has no rule (it would crash)."""
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (value, operator_value))
    if key in _LOWER_WINS and numbers:
        assert isinstance(value, int | float) and isinstance(operator_value, int | float)
        if key == DELIVERY_LIMIT_POLICY_KEY and broker_version >= _V4 and (value < 0 or operator_value < 0):
            return max(value, operator_value)  # 4.0: with a negative (unlimited) one, the more conservative
        return min(value, operator_value)
    if key in _OPERATOR_WINS_SINCE_4_0 and broker_version >= _V4:
        return operator_value
    if isinstance(value, bool) and isinstance(operator_value, bool):
        return operator_value
    raise ValueError(f"RabbitMQ has no rule to merge {key!r} = {value!r} (policy) with {operator_value!r} (operator)")


def merge_operator_definitions(
    definition: Mapping[str, object] | None,
    operator_definition: Mapping[str, object] | None,
    broker_version: tuple[int, ...],
) -> dict[str, object] | None:
    """``rabbit_policy:merge_operator_definitions/2``: None when neither policy applies."""
    if definition is None and operator_definition is None:
        return None
    user, operator = dict(definition or {}), dict(operator_definition or {})
    merged = user | operator
    for key in user.keys() & operator.keys():
        merged[key] = _merge_value(key, user[key], operator[key], broker_version)
    return dict(sorted(merged.items()))


@dataclass(frozen=True)
class AppliedPolicies:
    """One object's applied policy and operator policy, and its effective definition (``{}`` when none applies;
    None when undetermined: see ``problems``)."""

    user: PolicyMatch
    operator: PolicyMatch
    definition: Mapping[str, object] | None
    problems: tuple[str, ...] = field(default=())

    @property
    def determined(self) -> bool:
        return self.definition is not None

    def source(self, key: str) -> str:
        """Which policy sets ``key`` of the effective definition: ``policy 'a'``, ``operator policy 'o'``, both."""
        owners = [
            f"{kind} {match.policy.name!r}"
            for kind, match in (("policy", self.user), ("operator policy", self.operator))
            if match.policy is not None and key in match.policy.definition
        ]
        return " / ".join(owners) or "no policy"


def _undetermined(kind: str, match: PolicyMatch) -> list[str]:
    problems = []
    if match.tied:
        names = " and ".join(repr(p.name) for p in match.tied)
        problems.append(
            f"{kind} {names} tie at priority {match.tied[0].priority}: RabbitMQ applies one of them by store order "
            "(undefined)"
        )
    for policy in match.unknown:
        problems.append(
            f"{kind} {policy.name!r}'s pattern {policy.pattern!r} cannot be evaluated here (Python's re is not PCRE)"
        )
    return problems


_Hits = tuple[tuple[int, ...], tuple[int, ...]]
_NO_HITS: _Hits = ((), ())


class _PolicyIndex:
    """One policy list: patterns of literal names looked up by name, any other compiled once."""

    def __init__(self, policies: Iterable[BrokerPolicy], broker_version: tuple[int, ...]) -> None:
        self.entries: list[_Compiled] = []
        self.broker_version = broker_version
        self.exact: dict[str, list[int]] = {}
        self.general: list[int] = []
        self._fit: dict[tuple[int, ObjectKind, str | None], bool | None] = {}
        for index, policy in enumerate(policies):
            names = literal_names(policy.pattern)
            self.entries.append((policy, None if names is not None else erlang_regex(policy.pattern)))
            if names is None:
                self.general.append(index)
                continue
            for name in dict.fromkeys(names):
                self.exact.setdefault(name, []).append(index)

    def _fits(self, index: int, kind: ObjectKind, queue_type: str | None) -> bool | None:
        """``_fits`` of one policy, worked out once per kind and queue type."""
        key = (index, kind, queue_type)
        if key not in self._fit:
            self._fit[key] = _fits(self.entries[index][0], kind, queue_type, self.broker_version)
        return self._fit[key]

    def hits(self, kind: ObjectKind, name: str, queue_type: str | None) -> _Hits:
        """The policies (by position) that apply to the object, and those that cannot be evaluated here. A policy
        found by name matches it (``$`` also before a final newline): only its apply-to and keys are checked."""
        if not self.entries:
            return _NO_HITS
        exact = self.exact.get(name, [])
        if name.endswith("\n"):
            exact = list(dict.fromkeys(exact + self.exact.get(name[:-1], [])))
        matching: list[int] = []
        unknown: list[int] = []
        for index in exact:
            fits = self._fits(index, kind, queue_type)
            if fits is None:
                unknown.append(index)
            elif fits:
                matching.append(index)
        for index in self.general:
            applies = _with_pattern(self._fits(index, kind, queue_type), self.entries[index][1], name)
            if applies is None:
                unknown.append(index)
            elif applies:
                matching.append(index)
        return tuple(matching), tuple(unknown)

    def ranked(self, hits: _Hits) -> PolicyMatch:
        matching, unknown = hits
        return _ranked([self.entries[i][0] for i in matching], [self.entries[i][0] for i in unknown])


class PolicyMatcher:
    """One vhost's policy and operator policy lists, their patterns compiled once: ``applied`` per object.

    Objects that the same policies reach get the same outcome: it is worked out once per set of policies (a
    thousand endpoints' queues under a few combined policies share a handful)."""

    def __init__(
        self,
        policies: Iterable[BrokerPolicy],
        operator_policies: Iterable[BrokerPolicy],
        broker_version: tuple[int, ...],
    ) -> None:
        self.policies = _PolicyIndex(policies, broker_version)
        self.operator_policies = _PolicyIndex(operator_policies, broker_version)
        self.broker_version = broker_version
        self._outcomes: dict[tuple[_Hits, _Hits], AppliedPolicies] = {}

    def applied(self, kind: ObjectKind, name: str, queue_type: str | None = None) -> AppliedPolicies:
        """``rabbit_policy:set/1`` and ``effective_definition/1`` for one exchange or queue."""
        hits = (
            self.policies.hits(kind, name, queue_type),
            self.operator_policies.hits(kind, name, queue_type),
        )
        outcome = self._outcomes.get(hits)
        if outcome is None:
            outcome = self._outcomes[hits] = self._outcome(
                self.policies.ranked(hits[0]), self.operator_policies.ranked(hits[1])
            )
        return outcome

    def _outcome(self, user: PolicyMatch, operator: PolicyMatch) -> AppliedPolicies:
        problems = _undetermined("policies" if user.tied else "policy", user)
        problems += _undetermined("operator policies" if operator.tied else "operator policy", operator)
        if problems:
            return AppliedPolicies(user, operator, None, tuple(problems))
        try:
            definition = merge_operator_definitions(
                user.policy.definition if user.policy else None,
                operator.policy.definition if operator.policy else None,
                self.broker_version,
            )
        except ValueError as error:
            return AppliedPolicies(user, operator, None, (str(error),))
        return AppliedPolicies(user, operator, definition or {})


def applied_policies(
    policies: Iterable[BrokerPolicy],
    operator_policies: Iterable[BrokerPolicy],
    kind: ObjectKind,
    name: str,
    queue_type: str | None,
    broker_version: tuple[int, ...],
) -> AppliedPolicies:
    """``PolicyMatcher.applied`` for one object (build a ``PolicyMatcher`` once for many)."""
    return PolicyMatcher(policies, operator_policies, broker_version).applied(kind, name, queue_type)


def _integer(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def quorum_queue_delivery_limit(
    arguments: Mapping[str, object], definition: Mapping[str, object] | None, broker_version: tuple[int, ...]
) -> int | None:
    """A quorum queue's delivery limit as RabbitMQ applies it; None when it has none (redelivers without limit)."""
    from_policy = _integer((definition or {}).get(DELIVERY_LIMIT_POLICY_KEY))
    from_argument = _integer(arguments.get(DELIVERY_LIMIT_ARGUMENT))
    on_4 = broker_version >= QUORUM_DEFAULT_DELIVERY_LIMIT_SINCE
    if from_policy is not None and from_argument is not None:
        either_negative = from_policy < 0 or from_argument < 0
        resolve = max if on_4 and either_negative else min  # 4.0 resolve_delivery_limit/2; 3.x fun min/2
        limit: int | None = resolve(from_policy, from_argument)
    else:
        limit = from_policy if from_policy is not None else from_argument
    if limit is None:
        return QUORUM_DEFAULT_DELIVERY_LIMIT if on_4 else None
    return None if on_4 and limit < 0 else limit


def reported_delivery_limit(
    arguments: Mapping[str, object], definition: Mapping[str, object] | None, broker_version: tuple[int, ...]
) -> int | str | None:
    """What ``GET /api/queues`` shows as a quorum queue's ``delivery_limit`` once its statistics caught up: the
    limit, or ``"unlimited"`` (4.0 ``rabbit_quorum_queue.erl`` ``handle_tick/3``); None on 3.x, which has no
    such field."""
    if broker_version < QUORUM_DEFAULT_DELIVERY_LIMIT_SINCE:
        return None
    limit = quorum_queue_delivery_limit(arguments, definition, broker_version)
    return "unlimited" if limit is None else limit
