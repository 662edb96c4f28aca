"""Shared fixtures: real servers on 127.0.0.1, started once per session and stopped by PID.

A server that cannot start skips its tests on a developer machine and fails them under ``CI=true``,
so CI never passes without having run them. The ``rabbitmq`` broker is parametrized: every test that
uses it runs on Debian 12's RabbitMQ 3.10 (``rabbitmq-3.10``) and on Debian forky's RabbitMQ 4.3 from
its chroot (``rabbitmq-4.3``, ``servers.rabbitmq.ChrootRabbitMq``); ``-k rabbitmq-4.3`` picks one. A test
whose expectations on Debian 13's 4.0 differ from 4.3's carries ``also_on_rabbitmq_4_0`` and runs there too
(``rabbitmq-4.0``); each says why.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from nsb_delays.brokers.management import ManagementApi, ManagementError
from nsb_delays.components.model.rabbitmq.versions import BrokerVersion, parse_reported_broker_version
from nsb_delays.infra.commands.demo.servers import DEFAULT_PORT_RANGE, ServiceUnavailable
from servers.rabbitmq import BROKERS_BY_VERSION, LocalMoto, LocalRabbitMq
from tests.run_summary import FIGURE, RunSummary
from tests.services import LocalMariaDb, LocalPostgres

TESTS = Path(__file__).parent
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
# Every broker the suite can start, by the test id suffix (`rabbitmq-3.10`, `rabbitmq-4.0`, `rabbitmq-4.3`).
ALL_BROKERS = BROKERS_BY_VERSION
# The versions every broker test proves: the oldest supported (3.10) and the newest (4.3);
# NSB_BROKER_VERSIONS=3.10,4.0,4.3 runs every one on 4.0 too (to compare, or to measure the 4.0 tier's time).
BROKER_VERSIONS = os.environ.get("NSB_BROKER_VERSIONS", "3.10,4.3").split(",")
if not set(BROKER_VERSIONS) <= set(ALL_BROKERS):
    raise pytest.UsageError(
        f"NSB_BROKER_VERSIONS={','.join(BROKER_VERSIONS)}: each must be one of {', '.join(ALL_BROKERS)}"
    )
BROKERS = {version: ALL_BROKERS[version] for version in BROKER_VERSIONS}


def broker_id(version: str) -> str:
    return f"rabbitmq-{version}"


# A test (or a module's ``pytestmark``) whose expectations on RabbitMQ 4.0 differ from 4.3's also runs on 4.0:
# the kept 4.0 cases, each with its reason in its docstring (listed in CONTRIBUTING.md, "The broker versions").
also_on_rabbitmq_4_0 = pytest.mark.parametrize("rabbitmq", list(ALL_BROKERS), ids=broker_id, indirect=True)
# Commands under test write their Spark/JVM logs here, not into the user's ~/.local/state.
os.environ.setdefault("NSB_DELAYS_LOG_DIR", tempfile.mkdtemp(prefix="nsb-delays-test-logs-"))


def worker_port_range(worker: str, workers: int, low: int, high: int) -> str:
    """This pytest-xdist worker's own slice of the local port range (``gw1`` of 2: the upper half), so two
    workers never choose the same port for servers they start at the same moment."""
    index = int(worker.removeprefix("gw"))
    size = (high - low + 1) // workers
    return f"{low + index * size}-{low + (index + 1) * size - 1}"


if "PYTEST_XDIST_WORKER" in os.environ and "NSB_LOCAL_PORT_RANGE" not in os.environ:
    os.environ["NSB_LOCAL_PORT_RANGE"] = worker_port_range(
        os.environ["PYTEST_XDIST_WORKER"], int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")), *DEFAULT_PORT_RANGE
    )


# Tiers whose tests share session servers: under pytest-xdist (`make test` runs `--dist loadgroup`) each
# tier + broker version is one group, so one worker starts those servers once while the other tiers run
# beside it (the tiers mostly wait on brokers and timers). Tiers listed in SPLIT_BY_MODULE pay a second
# server start to spread their modules over the workers.
# The cluster tier is one group for both versions (its fixture is parametrized by "cluster", not
# "rabbitmq"): its two three-node clusters run one after the other, never six nodes at once on 2 cores.
TIERS = ("broker", "engine", "scale", "spark", "sparkcluster", "packaging", "consumer", "cluster", "docs")
SPLIT_BY_MODULE = ("spark",)


def xdist_group(item: pytest.Item, tier: str) -> str:
    group = tier
    if tier in SPLIT_BY_MODULE:
        group += f"-{Path(str(item.fspath)).stem}"
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "rabbitmq" in callspec.params:
        group += f"-rabbitmq-{callspec.params['rabbitmq']}"
    return group


def pytest_configure(config: pytest.Config) -> None:
    # On the controller (or a run without xdist): each tier's time and the tests' figures end the log.
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(RunSummary(), "run-summary")


# tryfirst: xdist's own hook (xdist/remote.py) turns the xdist_group marker into the `@group` node-id suffix
# that --dist loadgroup schedules by; the markers must be there before it runs.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Without xdist (`-p no:xdist`, a debugger session) its marker is unknown under --strict-markers.
    grouped = config.pluginmanager.hasplugin("xdist")
    summary = config.pluginmanager.get_plugin("run-summary")
    for item in items:
        path = Path(str(item.fspath))
        for tier in TIERS:
            if TESTS / tier in path.parents:
                item.add_marker(getattr(pytest.mark, tier))
                group = xdist_group(item, tier)
                if grouped:
                    item.add_marker(pytest.mark.xdist_group(group))
                if summary is not None:
                    summary.groups[item.nodeid] = group


def unavailable(reason: str) -> None:
    """Fail under CI, skip elsewhere: a missing service is never a silent pass in CI."""
    if IN_CI:
        pytest.fail(f"required test service unavailable under CI=true: {reason}", pytrace=False)
    pytest.skip(reason)


def release_folder(request: pytest.FixtureRequest, folder: Path) -> None:
    """Removes a module's or a session's folder when its fixture ends, as pytest removes a passing test's
    ``tmp_path`` (pyproject's ``tmp_path_retention_policy``): the folders made with ``tmp_path_factory`` outlive
    their fixture otherwise, and those holding a virtualenv are up to a gigabyte each. Kept, for reading, once a
    test of this worker has failed."""
    if request.session.testsfailed == 0:
        shutil.rmtree(folder, ignore_errors=True)


def require_installed(kind: type[LocalRabbitMq]) -> None:
    """Skip locally / fail under CI when a ``kind`` broker cannot start here (nothing is started, nothing left)."""
    broker = kind()
    try:
        broker.check_installed()
    except ServiceUnavailable as error:
        unavailable(str(error))
    finally:
        broker.state_dir.rmdir()  # the empty folder the constructor made


def serve(server: LocalRabbitMq | LocalMoto | LocalPostgres | LocalMariaDb) -> Iterator[Any]:
    """Start ``server`` (or skip/fail as ``unavailable`` says), yield it, always stop it and remove its state."""
    try:
        server.start()
    except ServiceUnavailable as error:
        unavailable(str(error))
    try:
        yield server
    finally:
        server.__exit__(None, None, None)


@pytest.fixture
def figure(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """``figure("…")``: a line of measured figures for the end of the run's log (``tests/run_summary.py``),
    shown under pytest-xdist too, where what a test prints is not."""
    return lambda line: request.node.user_properties.append((FIGURE, line))


@pytest.fixture(scope="session", params=list(BROKERS), ids=broker_id)
def rabbitmq(request: pytest.FixtureRequest) -> Iterator[LocalRabbitMq]:
    """One broker per version for the whole session (pytest groups the tests by it, so one runs at a time).

    On 4.3 the session ends with the deprecated-features check: no deprecated feature used by any test
    (``deprecated_features_used``) or left in use at the end."""
    with contextlib.closing(serve(ALL_BROKERS[request.param]())) as started:
        broker = next(started)
        reported = broker.version()
        if not reported.startswith(f"{request.param}."):
            pytest.fail(f"the rabbitmq-{request.param} broker reports version {reported}", pytrace=False)
        yield broker
        if request.param == "4.3":
            api = ManagementApi(broker.management_url, broker.username, broker.password)
            used = DEPRECATED_FEATURES_USED.pop(api.url, set()) | set(deprecated_features_used(api))
            if used:
                pytest.fail(
                    f"the tests used deprecated RabbitMQ {reported} features (GET /api/deprecated-features/used, "
                    f"seen before each test vhost was deleted and at the end): {', '.join(sorted(used))}",
                    pytrace=False,
                )


# What GET /api/deprecated-features/used listed, by management URL: sampled before each test vhost is deleted (what
# a test declared is still there) and read by the 4.3 broker's teardown.
DEPRECATED_FEATURES_USED: dict[str, set[str]] = {}


def deprecated_features_used(api: ManagementApi) -> list[str]:
    """``GET /api/deprecated-features/used`` (RabbitMQ 3.13+, ``rabbit_deprecated_features:list(used)``): each
    deprecated feature whose ``is_feature_used`` callback finds it in use (transient non-exclusive queues on 4.3),
    ``name (phase)``; nothing from a broker without the endpoint (3.10 answers 404)."""
    try:
        features = api.request("GET", "deprecated-features/used")
    except ManagementError:
        return []
    return [f"{feature['name']} ({feature.get('deprecation_phase')})" for feature in features]


@pytest.fixture(scope="session")
def broker_version(rabbitmq: LocalRabbitMq) -> BrokerVersion:
    """The broker's reported version (``parse_reported_broker_version``): a version-specific expectation branches on
    this, never skips."""
    return parse_reported_broker_version(rabbitmq.version())


@pytest.fixture(scope="session")
def moto_server() -> Iterator[LocalMoto]:
    yield from serve(LocalMoto())


@pytest.fixture(scope="session")
def postgres() -> Iterator[LocalPostgres]:
    yield from serve(LocalPostgres())


@pytest.fixture(scope="session")
def mariadb() -> Iterator[LocalMariaDb]:
    yield from serve(LocalMariaDb())


@pytest.fixture(scope="session")
def management(rabbitmq: LocalRabbitMq) -> ManagementApi:
    return ManagementApi(rabbitmq.management_url, rabbitmq.username, rabbitmq.password)


@contextlib.contextmanager
def vhost_factory(management: ManagementApi) -> Iterator[Callable[[str], str]]:
    made: list[str] = []

    def make(label: str) -> str:
        vhost = f"{label}-{uuid.uuid4().hex[:6]}"
        management.create_vhost(vhost)
        made.append(vhost)
        return vhost

    def delete(vhost: str) -> None:
        with contextlib.suppress(Exception):
            management.delete_vhost(vhost)

    try:
        yield make
    finally:
        if made:
            DEPRECATED_FEATURES_USED.setdefault(management.url, set()).update(deprecated_features_used(management))
        # all at once: deleting a vhost of quorum queues takes a second or more, mostly the broker's waiting
        with ThreadPoolExecutor(max(1, min(len(made), 8))) as pool:
            list(pool.map(delete, made))
