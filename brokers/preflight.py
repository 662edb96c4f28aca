"""``nsb-delays preflight``: each endpoint of a stack as NServiceBus.RabbitMQ will see the broker when it starts with
installers off, and what its work needs. It only reads (``GET`` calls of the management API; no AMQP connection).

With the given login (an administrator's: permission records are theirs to read): the broker's version and whether
its management statistics are on, the vhost's objects as the broker records them, its operator policies and every
permission and topic permission in it. As each endpoint's own login (its stack user's, else the given one): what the
endpoint itself calls at start (``BrokerVerifier``: the login's tags, ``GET /api/feature-flags`` unless each of the
login's endpoints turns the StreamsEnabled check off, and ``GET /api/queues/{vhost}/{queue}`` for each receiving
queue). ``GET /api/overview`` costs a RabbitMQ 4.3 broker about 100 ms, so it is asked once; each login's right to it
is its tags (``GET /api/whoami``). Each login's calls go over one connection of its own, closed after them,
``LOGIN_THREADS`` logins at a time: the broker answers one while this process reads another's answer, and a stack
of 1,000 endpoint users holds a few sockets open, not 1,000.

The management API shows a queue's policy from its statistics, which lag the broker (measured on RabbitMQ 4.3.6:
``policy: null``, ``delivery_limit: 20`` for 5-7 s after a policy was applied; on 3.10 no policy fields at all until
the queue's first statistics). Where the answer differs from what the broker's records say it will show (the policy
worked out from the policy lists: ``components.model.rabbitmq.policy_match``), preflight asks again, up to ``wait``
seconds, and judges what NServiceBus would read at the end. With statistics off there is nothing to wait for: RabbitMQ
4.2.5 and later answer from the queue itself; older brokers leave the fields out, and NServiceBus decides without them
after its 20 tries.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from nsb_delays.components.model.rabbitmq.arguments import listed_queue_type
from nsb_delays.components.model.rabbitmq.endpoint_start import (
    BROKER_REQUIREMENT_CHECKS,
    Outcome,
    QueueDetails,
    TransportVersion,
    Unreadable,
    delivery_limit_decision,
    generation_of_transport,
    queue_details_as_read,
    settled_view,
)
from nsb_delays.components.model.rabbitmq.graph import delay_levels
from nsb_delays.components.model.rabbitmq.policy_match import PolicyMatcher
from nsb_delays.components.model.rabbitmq.versions import parse_reported_broker_version
from nsb_delays.stack.config import RabbitMqConfig

from .background import in_background
from .endpoint_verdict import (
    BrokerRecords,
    EndpointReport,
    LoginAnswers,
    QueueObservation,
    caught_up,
    disabled_checks,
    judge,
    makes_http_calls,
    shown_policy,
)
from .management import ManagementApi, ManagementError, path_segment
from .verify import broker_policies, topology_drifts

POLL_SECONDS = 0.5  # how often the lagging queues are asked again while preflight waits
LOGIN_THREADS = 4  # logins whose calls run at once, each on a connection of its own


@dataclass(frozen=True)
class Login:
    user: str
    password: str


@dataclass(frozen=True)
class RabbitMqPreflight:
    url: str
    vhost: str
    version: str
    statistics: bool
    waited: float
    notes: tuple[str, ...]
    endpoints: tuple[EndpointReport, ...]

    @property
    def ready(self) -> bool:
        return all(report.ready for report in self.endpoints)

    def as_json(self) -> dict[str, Any]:
        return {
            "broker": self.url,
            "vhost": self.vhost,
            "version": self.version,
            "statistics": self.statistics,
            "waitedSeconds": round(self.waited, 1),
            "notes": list(self.notes),
            "endpoints": [report.as_json() for report in self.endpoints],
        }


@dataclass
class _Watched:
    """One receiving queue whose answer the endpoint's login reads, and what the records say it will show."""

    queue: str
    login: Login
    expected: QueueDetails | None
    transport: TransportVersion
    observation: QueueObservation | None = None
    first: QueueObservation | None = None  # the first answer, when the API had not caught up then

    @property
    def settled(self) -> bool:
        """Nothing to wait for: the answer is what the records say (or there is no saying), or a refusal the API
        will keep giving."""
        seen = self.observation
        if seen is None:
            return False
        if seen.answer is None:
            return seen.status != 404 or self.expected is None  # a 404 for a recorded queue: the API lags
        return self.expected is None or caught_up(seen.answer, self.expected)


def preflight_rabbitmq(
    api: ManagementApi,
    config: RabbitMqConfig,
    logins: Mapping[str, Login],
    *,
    wait: float,
    progress: Callable[[str], None] = lambda _: None,
) -> RabbitMqPreflight:
    """Every endpoint of ``config`` judged (``logins``: endpoint -> the login it runs with)."""
    overview = api.overview()
    reported = str(overview.get("rabbitmq_version", "0"))
    version = parse_reported_broker_version(reported)
    statistics = not overview.get("disable_stats", False)
    records, matcher = read_records(api, config, version, statistics)
    users = {user.endpoint: user.settings for user in config.users}
    checked = [e for e in config.endpoints if makes_http_calls(e, users.get(e.endpoint))]
    watched = [
        _Watched(queue, logins[endpoint.endpoint], _expected(records, matcher, queue), endpoint.transport_version)
        for endpoint in checked
        if endpoint.validate_delivery_limits
        for queue in endpoint.receiving_queues
    ]
    streams_check = BROKER_REQUIREMENT_CHECKS[1]
    reads_flags = {logins[e.endpoint] for e in checked if streams_check not in disabled_checks(e)}
    answers = first_calls(api, config.vhost, {logins[e.endpoint] for e in checked}, reads_flags, watched)
    wait = wait if statistics else 0.0  # without statistics the API answers from the queue, or never
    waited = observe(api, config.vhost, watched, wait, progress)
    observations = {w.queue: w.observation for w in watched if w.observation is not None}
    reports = tuple(
        judge(
            endpoint,
            users.get(endpoint.endpoint),
            answers.get(logins[endpoint.endpoint].user, LoginAnswers(logins[endpoint.endpoint].user)),
            records,
            observations,
            error_queue=config.shared_queues.error_queue,
            audit_queue=config.shared_queues.audit_queue,
        )
        for endpoint in config.endpoints
    )
    notes = _notes(records, watched, waited, wait)
    return RabbitMqPreflight(api.url, config.vhost, reported, statistics, waited, notes, reports)


def read_records(
    api: ManagementApi, config: RabbitMqConfig, version: tuple[int, int, int], statistics: bool
) -> tuple[BrokerRecords, PolicyMatcher]:
    """The vhost's objects, policies and permission records, each listed once with the given login."""
    vhost = config.vhost
    definitions = api.vhost_definitions(vhost) or {}
    exchanges, queues, bindings, policies = (
        list(definitions.get(kind) or []) for kind in ("exchanges", "queues", "bindings", "policies")
    )
    present = bool(definitions)
    operator = api.operator_policies(vhost) if present else []
    matcher = PolicyMatcher(broker_policies(policies), broker_policies(operator, True), version)
    topic: dict[str, dict[str, Mapping[str, Any]]] = {}
    for entry in api.vhost_topic_permissions(vhost) if present else []:
        topic.setdefault(str(entry["user"]), {})[str(entry["exchange"])] = entry
    records = BrokerRecords(
        version=version,
        statistics=statistics,
        feature_flags=api.feature_flags(),
        exchanges={str(e["name"]): e for e in exchanges},
        queues={str(q["name"]): q for q in queues},
        bindings=frozenset(
            (str(b["source"]), str(b["destination_type"]), str(b["destination"]), str(b["routing_key"]))
            for b in bindings
        ),
        permissions={str(p["user"]): p for p in api.vhost_permissions(vhost)} if present else {},
        topic_permissions=topic,
        graph_drifts=_graph_drifts(config, exchanges, queues, bindings),
    )
    return records, matcher


def _graph_drifts(
    config: RabbitMqConfig, exchanges: list[Any], queues: list[Any], bindings: list[Any]
) -> tuple[str, ...]:
    """Each difference of the delay graphs the endpoints' releases use, ``<generation>:<subject> <field>``."""
    generations = {generation_of_transport(endpoint.transport_version) for endpoint in config.endpoints}
    found = []
    for generation in sorted(generations):
        for drift in topology_drifts(delay_levels(generation), generation, exchanges, queues, bindings):
            found.append(f"{generation}:{drift.subject} {drift.field}".rstrip() + f" ({drift.kind})")
    return tuple(found)


def _expected(records: BrokerRecords, matcher: PolicyMatcher, queue: str) -> QueueDetails | None:
    """What the API will show for ``queue`` once caught up; None when that cannot be said (no such queue, a policy
    tie, a pattern Python cannot run, a value the transport cannot read)."""
    record = records.queues.get(queue)
    if record is None:
        return None
    kind = listed_queue_type(record)
    applied = matcher.applied("queue", queue, kind)
    if not applied.determined:
        return None
    try:
        return settled_view(queue, kind, record.get("arguments") or {}, applied, records.version)
    except Unreadable:
        return None


def as_login(api: ManagementApi, login: Login) -> ManagementApi:
    """The same broker and TLS settings, another user."""
    return dataclasses.replace(api, username=login.user, password=login.password)


def first_calls(
    api: ManagementApi, vhost: str, logins: Iterable[Login], reads_flags: set[Login], watched: list[_Watched]
) -> dict[str, LoginAnswers]:
    """What each login's endpoints ask at start, as that login on one session (closed after): ``login_answers`` (the
    feature flags only for ``reads_flags``), then each of its watched queues once (``_Watched.observation``); the
    logins on up to ``LOGIN_THREADS`` threads (``each_login``). User -> its answers."""
    queues = _by_login(watched)
    answers: dict[str, LoginAnswers] = {}

    def calls(login: Login) -> None:
        client = as_login(api, login)
        try:
            answers[login.user] = login_answers(client, read_flags=login in reads_flags)
            for item in queues.get(login, ()):
                item.observation = _observation(client, vhost, item)
        finally:
            client.session.close()

    each_login(set(logins) | set(queues), calls)
    return answers


def login_answers(client: ManagementApi, *, read_flags: bool = True) -> LoginAnswers:
    """``GET /api/whoami`` and (``read_flags``) ``GET /api/feature-flags`` as ``client``'s login: its tags and the
    flags, or the API's refusal. Without ``read_flags`` no flags: none of the login's endpoints reads them."""
    user = client.username
    try:
        whoami = client.request("GET", "whoami")
    except ManagementError as error:
        return LoginAnswers(user, refused=_refusal(error))
    tags = tuple(_tags(whoami.get("tags") if isinstance(whoami, Mapping) else None))
    if not read_flags:
        return LoginAnswers(user, tags)
    try:
        flags = client.feature_flags()
    except ManagementError as error:
        return LoginAnswers(user, tags, flags_refused=_refusal(error))
    return LoginAnswers(user, tags, flags=flags)


def each_login(logins: Iterable[Login], work: Callable[[Login], None]) -> None:
    """``work(login)`` for every login, on up to ``LOGIN_THREADS`` daemon threads (``in_background``: an interrupted
    run exits at once, where a pool's threads would hold the exit until their calls end); one login on the caller's
    thread. A failure stops the threads taking further logins and is raised here."""
    todo = list(logins)
    if len(todo) <= 1:
        for login in todo:
            work(login)
        return
    pending = iter(todo)
    lock = threading.Lock()
    failed = threading.Event()

    def worker() -> None:
        while not failed.is_set():
            with lock:
                login = next(pending, None)
            if login is None:
                return
            try:
                work(login)
            except BaseException:
                failed.set()
                raise

    workers = [in_background(worker, f"preflight-logins-{n}") for n in range(min(LOGIN_THREADS, len(todo)))]
    for future in workers:
        future.result()


def _tags(tags: Any) -> list[str]:
    """``tags`` as the API lists them: a list (3.10.8 and later) or one comma-separated string (older)."""
    if isinstance(tags, str):
        return [tag.strip() for tag in tags.split(",") if tag.strip()]
    return [str(tag) for tag in tags or []]


def _refusal(error: ManagementError) -> str:
    return f"HTTP {error.status}" if error.status is not None else str(error)


def observe(
    api: ManagementApi, vhost: str, watched: list[_Watched], wait: float, progress: Callable[[str], None]
) -> float:
    """Ask again, every ``POLL_SECONDS`` for up to ``wait`` seconds, the queues whose first answer (``first_calls``) the
    API had not caught up on; the seconds waited."""
    pending = [w for w in watched if not w.settled]
    for item in pending:
        item.first = item.observation
    started = time.monotonic()
    slept = False
    said: tuple[int, int] | None = None  # (queues pending, 5-s step) last reported
    while pending and (elapsed := time.monotonic() - started) < wait:
        if said != (len(pending), int(elapsed) // 5):
            said = (len(pending), int(elapsed) // 5)
            progress(
                f"waiting for the management API to show what the broker applies: {len(pending)} queue(s) "
                f"({elapsed:.0f} s of at most {wait:.0f} s)"
            )
        time.sleep(min(POLL_SECONDS, max(0.0, wait - elapsed)))
        slept = True
        _ask(api, vhost, pending)
        pending = [w for w in pending if not w.settled]
    return time.monotonic() - started if slept else 0.0


def _ask(api: ManagementApi, vhost: str, watched: Iterable[_Watched]) -> None:
    """One ``GET /api/queues/{vhost}/{queue}`` per watched queue, one session per login (closed after), the logins on
    up to ``LOGIN_THREADS`` threads (``each_login``)."""
    queues = _by_login(watched)

    def asks(login: Login) -> None:
        client = as_login(api, login)
        try:
            for item in queues[login]:
                item.observation = _observation(client, vhost, item)
        finally:
            client.session.close()

    each_login(queues, asks)


def _by_login(watched: Iterable[_Watched]) -> dict[Login, list[_Watched]]:
    by_login: dict[Login, list[_Watched]] = {}
    for item in watched:
        by_login.setdefault(item.login, []).append(item)
    return by_login


def _observation(client: ManagementApi, vhost: str, item: _Watched) -> QueueObservation:
    try:
        answer = client.request("GET", f"queues/{path_segment(vhost)}/{path_segment(item.queue)}")
    except ManagementError as error:
        return QueueObservation(item.queue, None, _refusal(error), error.status, item.expected)
    try:
        details = queue_details_as_read(answer if isinstance(answer, Mapping) else {})
    except Unreadable as error:
        return QueueObservation(item.queue, None, expected=item.expected, unreadable=str(error))
    return QueueObservation(item.queue, details, expected=item.expected)


def _first_answer(item: _Watched, version: tuple[int, int, int]) -> str:
    """What the API first showed of a lagging queue, and what an endpoint started then would have done."""
    seen, expected = item.first, item.expected
    assert seen is not None
    if seen.answer is None:
        return f"it first answered {item.queue} with {seen.refusal or seen.unreadable}, and an endpoint started then "\
            "would not have started"  # fmt: skip
    answer = seen.answer
    shown = (
        "no effective_policy_definition (NServiceBus asks again, 20 times, 3 s apart)"
        if answer.retried
        else f"{shown_policy(answer.applied_policy)}, delivery limit {answer.delivery_limit}"
    )
    wanted = f" where the broker applies {shown_policy(expected.applied_policy)}" if expected is not None else ""
    if answer.retried:
        return f"it first showed {item.queue} with {shown}{wanted}"
    decision = delivery_limit_decision(item.transport, answer, version)
    then = {
        Outcome.STARTS: "would have started",
        Outcome.WRITES_POLICY: "would have written its own policy (and, without the policymaker tag, not started)",
        Outcome.REFUSES: "would not have started",
    }[decision.outcome]
    return f"it first showed {item.queue} with {shown}{wanted}: an endpoint started then {then}"


def _notes(records: BrokerRecords, watched: list[_Watched], waited: float, wait: float) -> tuple[str, ...]:
    """What the report says of the broker as a whole: statistics off, the wait and why."""
    notes = []
    if not records.statistics:
        notes.append(
            "the management plugin's statistics are off (management_agent.disable_metrics_collector): NServiceBus "
            "reads a queue's policy from GET /api/queues/…; RabbitMQ 4.2.5 and later answer it from the queue itself, "
            "older brokers leave it out, and NServiceBus then asks 20 times, 3 s apart, and decides without it"
        )
    behind = [w for w in watched if not w.settled]
    lagged = [w for w in watched if w.first is not None]
    if waited and lagged:
        notes.append(f"waited {waited:.1f} s for the management API to show what the broker applies to "
                     f"{len(lagged)} queue(s); {_first_answer(lagged[0], records.version)}")  # fmt: skip
    if behind and wait:
        names = ", ".join(w.queue for w in behind[:5]) + (" …" if len(behind) > 5 else "")
        notes.append(f"after {wait:.0f} s the API still differs from the broker's records for {len(behind)} queue(s) "
                     f"({names}): judged by what it shows")  # fmt: skip
    return tuple(notes)
