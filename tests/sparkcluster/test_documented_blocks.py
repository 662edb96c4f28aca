"""The migration guide's cluster blocks (docs/how-to/migrate-timeouts.md: ``<!-- runs-with: spark-cluster -->``,
``spark-connect``), run as a reader pastes them into bash, stopping at the first command that fails, on this tier's
cluster; the docs tier skips them (tests/docs/live.py ``ELSEWHERE``) and parses their ``nsb-delays`` commands.

The page's names are replaced by the tier's (live.SUBSTITUTIONS, the one table of the reader's addresses; what each
service provides: live.SERVICES). A block has done its job when the ledger marks every timeout of Sales dispatched
and the broker holds each one once: the due ones in the Sales queue, the others in the delay graph.
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from nsb_delays.brokers.management import ManagementApi
from nsb_delays.components.model.rabbitmq.names import DEFAULT_GENERATION, LEVEL_COUNT, delay_level_name
from nsb_delays.infra.commands.demo.servers import HOST, free_port
from nsb_delays.pipeline.layouts import sql_persistence_layout
from nsb_delays.pipeline.spark import POSTGRES_JDBC_JAR
from servers.rabbitmq import LocalRabbitMq
from servers.spark import SPARK_CONNECT_VENV, LocalSparkCluster, spark_home
from tests.docs.examples import Block, blocks_run_in
from tests.docs.live import (
    ENDPOINT,
    SPARK_CLUSTER,
    SPARK_CONNECT,
    USERS,
    Scene,
    command_environment,
    run_bash,
)
from tests.docs.test_live_examples import create_database, reset_vhost
from tests.packaging.conftest import build, checkout_copy
from tests.spark.conftest import BrokerVhost, insert_timeouts, provision_vhost, timeout, utc_now
from tests.sparkcluster.test_cluster_migration import dispatched_ids, legacy_ids

BLOCKS = [*blocks_run_in(SPARK_CLUSTER), *blocks_run_in(SPARK_CONNECT)]  # page order: spark-submit first
DUE, LATER = 30, 10  # timeouts of Sales past due (into the Sales queue) and an hour out (into the delay graph)
LATER_SECONDS = 3600
# What a reader's page names and this tier must replace: one left in a block's script means the page changed.
READERS_NAMES = re.compile(r"spark-master|spark-connect[:/]|rabbit:|db:5432|/opt/nsb-")
# The Connect client's virtualenv: the lines of the block that install into it (live.SERVICES, spark-connect).
VENV_LINE = "python3 -m venv /opt/nsb-connect && /opt/nsb-connect/bin/pip install -r connect-requirements.txt"
INSTALL_LINE = "/opt/nsb-connect/bin/pip install --no-deps nsb-delays"
# The Spark cluster's own configuration ($SPARK_CONF_DIR/spark-defaults.conf): no web UI (ports of its own), and
# a Connect server that listens on loopback only (static SQL conf of org.apache.spark.sql.connect.config.Connect).
SPARK_DEFAULTS = {"spark.ui.enabled": "false", "spark.connect.grpc.binding.address": HOST}
SHOWN = 6000


@pytest.fixture(scope="session")
def nsb_delays_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This checkout as a wheel (PyPA build of a clean copy): what `pip install nsb-delays` would fetch."""
    root = tmp_path_factory.mktemp("wheel")
    wheel, _ = build(checkout_copy(root / "source"), root / "dist", "wheel")
    return wheel


def test_each_cluster_block_of_the_migration_guide_is_run_here() -> None:
    """The two blocks, in the page's order (the Connect server holds every core while it runs: last)."""
    assert [block.runs_with for block in BLOCKS] == [(SPARK_CLUSTER,), (SPARK_CONNECT,)], [b.where for b in BLOCKS]
    assert all(block.kind == "bash" for block in BLOCKS)


@pytest.mark.parametrize("block", BLOCKS, ids=[f"{b.page}:{b.line}" for b in BLOCKS])
def test_the_block_migrates_every_timeout_of_sales(
    block: Block, spark_cluster: LocalSparkCluster, postgres, rabbitmq: LocalRabbitMq, management: ManagementApi,
    request: pytest.FixtureRequest, tmp_path: Path, figure,
) -> None:  # fmt: skip
    table = sql_persistence_layout(ENDPOINT, "postgresql").table
    store = create_database(postgres.dsn)
    now = utc_now()
    due = [timeout(ENDPOINT, -1 - i, i, now=now) for i in range(DUE)]
    later = [timeout(ENDPOINT, LATER_SECONDS, DUE + i, now=now) for i in range(LATER)]
    insert_timeouts(store, table, due + later)
    broker = root_vhost(rabbitmq, management)

    scene = cluster_scene(spark_cluster, postgres.port, rabbitmq, tmp_path)
    script = block.source
    if SPARK_CONNECT in block.runs_with:
        scene.addresses |= {
            "spark-connect": f"{HOST}:{(port := free_port())}",
            "spark-connect-tcp": f"{HOST}/{port}",
            "spark-connect-port": f"grpc.binding.port={port}",
            "connect-venv": str(tmp_path / "nsb-connect"),
        }
        script = client_venv_from_the_setup_one(script, request.getfixturevalue("nsb_delays_wheel"))
    script = scene.substituted(script)
    assert not READERS_NAMES.search(script), f"{block.where}: a name of the page's is not replaced:\n{script}"

    began = time.monotonic()
    with connect_server_stopped(scene):
        run = run_bash(scene, script)
    seconds = time.monotonic() - began
    assert run.returncode == 0, f"{block.where}: {run.explain()}"
    assert re.search(rf"\(started\): {DUE + LATER} of {DUE + LATER} dispatched .*, completed", run.output), (
        f"{block.where}: {run.output[-SHOWN:]}"
    )

    assert dispatched_ids(SimpleNamespace(dsn=store), table) == {row.id for row in due + later}
    assert legacy_ids(SimpleNamespace(dsn=store), table) == set(), "the legacy table still holds timeouts"
    received = broker.drain([ENDPOINT], DUE, timeout=60)
    ids = collections.Counter(properties.message_id for _, properties, _, _ in received)
    assert ids == collections.Counter(row.message_id for row in due), "each due timeout once in Sales"
    levels = [delay_level_name(level, DEFAULT_GENERATION) for level in range(LEVEL_COUNT)]
    waiting = sum(broker.depth(level) for level in levels)  # an hour out: in one level for the next 2,048 s
    assert waiting == LATER, f"{waiting} messages in the delay graph, {LATER} timeouts an hour out"
    if SPARK_CONNECT in block.runs_with:
        # the client ran the package the block installed (the wheel), not the setup virtualenv's editable install
        client = scene.addresses["connect-venv"]
        job_file = run_bash(scene, f"{client}/bin/python -m nsb_delays.infra.spark_job --job-file").output
        assert job_file.startswith(f"{client}/lib/"), job_file
    figure(f"{block.where} ({', '.join(block.runs_with)}), {DUE + LATER} timeouts: {seconds:.1f} s")


def root_vhost(rabbitmq: LocalRabbitMq, management: ManagementApi) -> BrokerVhost:
    """Vhost '/' (the pages' %2F) made again with Sales's delay graph, for the pages' users (as the docs tier)."""
    for user, password in USERS.items():
        management.request("PUT", f"users/{user}", {"password": password, "tags": "administrator"})
    reset_vhost(management, "/")
    return provision_vhost(rabbitmq, "/", [ENDPOINT])


def cluster_scene(cluster: LocalSparkCluster, postgres_port: int, rabbitmq: LocalRabbitMq, folder: Path) -> Scene:
    """The operator's shell on the cluster (live.SERVICES, spark-cluster)."""
    conf, logs, pids = folder / "spark-conf", folder / "spark-logs", folder / "spark-pids"
    for made in (conf, logs, pids):
        made.mkdir()
    (conf / "spark-defaults.conf").write_text("".join(f"{key} {value}\n" for key, value in SPARK_DEFAULTS.items()))
    env = command_environment(
        {"SPARK_HOME": str(spark_home()), "SPARK_CONF_DIR": str(conf), "SPARK_LOG_DIR": str(logs),
         "SPARK_PID_DIR": str(pids), "SPARK_LOCAL_IP": HOST}
    )  # fmt: skip
    addresses = {
        "spark-master": cluster.master_url.removeprefix("spark://"),
        "postgres-jdbc-jar": str(POSTGRES_JDBC_JAR),
        "executor-python": str(cluster.executor_python),
        "postgres": f"{HOST}:{postgres_port}",
        "amqp": f"{HOST}:{rabbitmq.amqp_port}",
        "management": f"{HOST}:{rabbitmq.management_port}",
    }
    work = folder / "work"
    work.mkdir()
    return Scene(work, env, addresses)


def client_venv_from_the_setup_one(script: str, wheel: Path) -> str:
    """The block's client virtualenv made as it says, but given the packages of connect-requirements.txt from the one
    `make setup` installed them into from the same file, and the package from the session's wheel."""
    assert script.count(VENV_LINE) == 1 and script.count(INSTALL_LINE) == 1, script
    installed = SPARK_CONNECT_VENV / "requirements.txt"
    if not installed.exists():
        pytest.fail(f"{installed} is missing: `make setup` builds the Spark Connect client's virtualenv")
    (setup_packages,) = SPARK_CONNECT_VENV.glob("lib/python*/site-packages")
    site = f"/opt/nsb-connect/lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"
    linked = (
        f"python3 -m venv /opt/nsb-connect && cmp connect-requirements.txt {installed} "
        f"&& echo {setup_packages} > {site}/connect-requirements.pth"
    )
    return script.replace(VENV_LINE, linked).replace(
        INSTALL_LINE, f"/opt/nsb-connect/bin/pip install -q --no-deps {wheel}"
    )


@contextlib.contextmanager
def connect_server_stopped(scene: Scene) -> Iterator[None]:
    """After the block: the Connect server it started (the pid file spark-daemon.sh wrote in SPARK_PID_DIR) stopped
    as Spark stops it (sbin/stop-connect-server.sh: SIGTERM to that PID), killed if still there a minute later."""
    try:
        yield
    finally:
        pids = [int(path.read_text()) for path in Path(scene.env["SPARK_PID_DIR"]).glob("*.pid")]
        if pids:
            run_bash(scene, '"$SPARK_HOME"/sbin/stop-connect-server.sh')
        for pid in pids:
            deadline = time.monotonic() + 60
            while alive(pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def alive(pid: int) -> bool:
    """``pid`` runs (a zombie does not: its parent, init once the block's shell exited, has yet to reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
