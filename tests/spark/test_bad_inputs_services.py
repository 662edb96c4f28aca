"""Bad inputs against the real PostgreSQL, RabbitMQ and Spark: ``migrate`` refuses each before anything
moves — legacy rows still visible, no ledger or migration table, no staged export, no message on the
broker, no file in the working directory — in a few lines naming the input and the rule, without a
Spark or Python traceback. Then the runs that do start: stopped (exit 1) and interrupted (exit 130)
say where they stand and how to resume or restore.

One Spark session (the ``spark`` fixture) serves every case; most are refused before Spark is needed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pika
import psycopg
import pytest
from click.testing import CliRunner

from nsb_delays.components.model.rabbitmq.names import LEVEL_COUNT, Generation, delay_level_name
from nsb_delays.infra.cli import cli
from nsb_delays.pipeline.ledger import STATE_TABLE
from tests.bad_inputs import CLEAN_ENVIRONMENT, Case, assert_refused, closed_port, snapshot, write_files
from tests.conftest import vhost_factory
from tests.jobs import JOB_HANG_GUARD_SECONDS, wait_for_fault_point
from tests.services import ctrl_c_as_from_a_terminal
from tests.spark.conftest import (
    BrokerVhost,
    create_sql_persistence_table,
    insert_timeouts,
    provision_vhost,
    timeout,
    utc_now,
)

ROWS = 30
BOUND = "Sales"


@dataclass
class World:
    """A table of ROWS timeouts for ``endpoint`` (destination Sales), a vhost where Sales is bound."""

    jdbc: str
    dsn: str
    endpoint: str
    table: str
    broker: BrokerVhost
    workspace: Path
    rows: list = field(default_factory=list)

    @property
    def rabbit(self) -> list[str]:
        return ["--amqp-url", self.broker.amqp_url, "--management-url", self.broker.broker.management_url]

    @property
    def table_source(self) -> list[str]:
        return ["--source-jdbc", self.jdbc, "--endpoint", self.endpoint]

    def export(self, name: str, fmt: str = "json") -> list[str]:
        return ["--source-path", name, "--source-format", fmt, "--ledger-jdbc-url", self.jdbc]


def json_line(
    index: int, destination: str = BOUND, endpoint: str = "Sales", time_text: str | None = None, state: str = "e30="
) -> str:
    return json.dumps({"Id": f"TimeoutDatas/{index}", "Destination": destination, "OwningTimeoutManager": endpoint,
                       "Time": time_text or "2031-01-01T00:00:00.000000Z", "State": state,
                       "Headers": json.dumps({"NServiceBus.MessageId": f"m-{index}"})})  # fmt: skip


def json_lines(count: int, **fields: str) -> str:
    return "".join(json_line(index, **fields) + "\n" for index in range(count))


def create_table(dsn: str, table: str, columns: str) -> None:
    with psycopg.connect(dsn) as connection:
        connection.execute(f"drop table if exists {table}")
        connection.execute(f"create table {table} ({columns})")


ServiceCase = tuple[Case, Callable[[World], list[str]], Callable[[World], None] | None]


def case(category: str, name: str, args: Callable[[World], list[str]], expect: list[str], *,
         code: int = 2, files: dict[str, str | bytes] | None = None, setup: Callable[[World], None] | None = None,
         max_lines: int = 6) -> ServiceCase:  # fmt: skip
    return Case(category, name, (), code, expect, files or {}, max_lines), args, setup


DOWN = closed_port()
CASES: list[ServiceCase] = [
    # --- the source table -------------------------------------------------------------------------------------
    case("source-table", "table-missing", lambda w: ["migrate", "run", "--source-jdbc", w.jdbc, "--endpoint", "Nowhere",
                                                      *w.rabbit],
         ['source table "public"."Nowhere_TimeoutData" cannot be read in the postgresql database',
          'relation "public.Nowhere_TimeoutData" does not exist']),
    case("source-table", "column-missing", lambda w: ["migrate", "run", "--source-jdbc", w.jdbc, "--endpoint",
                                                       "NoTime", *w.rabbit],
         ["source table \"public\".\"NoTime_TimeoutData\" has no column 'Time' (the sqlp layout reads it as due)"],
         setup=lambda w: create_table(w.dsn, '"NoTime_TimeoutData"', '"Id" uuid, "Destination" text, "SagaId" uuid, '
                                      '"State" bytea, "Headers" text')),
    case("source-table", "column-mistyped", lambda w: ["migrate", "run", "--source-jdbc", w.jdbc, "--endpoint",
                                                        "TextTime", *w.rabbit],
         ["column 'Time' of \"public\".\"TextTime_TimeoutData\" is a text column; due must be a date/time column"],
         setup=lambda w: create_table(w.dsn, '"TextTime_TimeoutData"', '"Id" uuid, "Destination" text, '
                                      '"SagaId" uuid, "State" bytea, "Time" text, "Headers" text')),
    case("source-table", "nhibernate-table-missing", lambda w: ["migrate", "preview", "--source-jdbc", w.jdbc,
                                                                 "--source-kind", "nhibernate", "--endpoint", "Sales"],
         ['source table "public"."TimeoutEntity" cannot be read']),
    case("source-table", "database-missing", lambda w: ["migrate", "abort", "--source-jdbc",
                                                         w.jdbc.replace("/postgres?", "/nodb?"), "--endpoint",
                                                         w.endpoint],
         ["cannot connect to the postgresql database 127.0.0.1:", "/nodb as postgres", 'database "nodb" does not exist']),
    # --- the RabbitMQ target ----------------------------------------------------------------------------------
    case("rabbitmq", "amqp-port-wrong", lambda w: [*w.table_source, "--amqp-url",
                                                   f"amqp://guest:guest@127.0.0.1:{DOWN}/{w.broker.vhost}",
                                                   "--management-url", w.broker.broker.management_url],
         [f"cannot reach RabbitMQ (AMQP, --amqp-url) at 127.0.0.1:{DOWN}", "as 'guest'",
          "[Errno 111] Connection refused"]),
    case("rabbitmq", "amqp-password-wrong", lambda w: [*w.table_source, "--amqp-url",
                                                       w.broker.amqp_url.replace("guest:guest", "guest:wrong"),
                                                       "--management-url", w.broker.broker.management_url],
         ["as 'guest': ACCESS_REFUSED", "RabbitMQ management API at", "for user 'guest' with 401 Unauthorized"]),
    case("rabbitmq", "vhost-missing", lambda w: [*w.table_source, "--amqp-url",
                                                 w.broker.amqp_url.rsplit("/", 1)[0] + "/nope",
                                                 "--management-url", w.broker.broker.management_url],
         ["vhost 'nope' as 'guest'", "NOT_ALLOWED - vhost nope not found"]),
    case("rabbitmq", "management-port-wrong", lambda w: [*w.table_source, "--amqp-url", w.broker.amqp_url,
                                                         "--management-url", f"http://127.0.0.1:{DOWN}"],
         [f"cannot reach the RabbitMQ management API at 127.0.0.1:{DOWN} as 'guest'", "Connection refused"]),
    case("rabbitmq", "destination-not-bound", lambda w: [*w.table_source, *w.rabbit],
         ["1 destination(s) do not exist or are not bound to 'nsb.v2.delay-delivery'", "Unbound"],
         setup=lambda w: insert_timeouts(w.dsn, w.table, [timeout("Unbound", 60, 0, now=utc_now())])),
    case("rabbitmq", "v1-infrastructure-missing", lambda w: [*w.table_source, *w.rabbit, "--generation", "v1"],
         ["the v1 delay infrastructure is missing on vhost", "nsb.delay-level-27"], max_lines=3),
    case("paths", "quarantine-not-writable", lambda w: [*w.table_source, *w.rabbit, "--quarantine", "/proc/q.jsonl"],
         ["--quarantine /proc/q.jsonl: cannot write in /proc"]),
    # --- exports (read by Spark before anything is staged) ---------------------------------------------------
    case("export", "garbage", lambda w: ["migrate", "run", *w.export("t.jsonl"), *w.rabbit],
         ["export t.jsonl: 2 of 2 lines are not JSON objects", "t.jsonl, line 1: 'Id,Destination,Time'"],
         files={"t.jsonl": "Id,Destination,Time\n1,Sales,2031-01-01\n"}),
    case("export", "one-bad-line", lambda w: ["migrate", "run", *w.export("t.jsonl"), *w.rabbit],
         ["export t.jsonl: 1 of 5 lines are not JSON objects", "line 3: '{\"Id\": \"TimeoutDatas/9\", \"Destin"],
         files={"t.jsonl": json_lines(2) + '{"Id": "TimeoutDatas/9", "Destination": "Sales"\n' + json_lines(2)}),
    case("export", "column-less", lambda w: ["migrate", "run", *w.export("t.jsonl"), *w.rabbit],
         ["3 problems", "no row has a usable 'Id'", "no row has a usable 'Destination'", "no row has a usable 'Time'"],
         files={"t.jsonl": '{"id": "a", "destination": "Sales", "time": "2031-01-01"}\n'}),
    case("export", "time-unparseable", lambda w: ["migrate", "run", *w.export("t.jsonl"), *w.rabbit],
         ["no row has a usable 'Time' (first value: 'next tuesday' is not a timestamp)"],
         files={"t.jsonl": json_lines(3, time_text="next tuesday")}),
    case("export", "state-not-base64", lambda w: ["migrate", "run", *w.export("t.jsonl"), *w.rabbit],
         ["export t.jsonl: 3 rows have a 'State' that is not base64 (first: Id 'TimeoutDatas/0')",
          "their message bodies would be lost"],
         files={"t.jsonl": json_lines(3, state="not base64!")}),
    case("export", "endpoint-absent", lambda w: ["migrate", "run", *w.export("t.jsonl"), "--endpoint", "Shipping",
                                                  *w.rabbit],
         ["no timeout of endpoint 'Shipping' (field 'OwningTimeoutManager'); endpoints there: Sales"],
         files={"t.jsonl": json_lines(3)}),
    case("export", "empty", lambda w: ["migrate", "run", *w.export("t.jsonl"), *w.rabbit],
         ["export t.jsonl: holds no timeouts"], files={"t.jsonl": ""}),
    case("export", "destination-not-bound", lambda w: ["migrate", "run", *w.export("t.jsonl"), *w.rabbit],
         ["1 destination(s) do not exist or are not bound", "Billing"],
         files={"t.jsonl": json_lines(3, destination="Billing")}),
    case("export", "parquet-directory-with-garbage", lambda w: ["migrate", "run", *w.export("dir", "parquet"),
                                                                *w.rabbit],
         ["dir/part-0.parquet is not a readable Parquet file"], files={"dir/part-0.parquet": "not parquet"}),
    # --- abort and resume -------------------------------------------------------------------------------------
    case("abort", "nothing-in-progress", lambda w: ["migrate", "abort", *w.table_source],
         ['no migration of "public"."', '_TimeoutData" is in progress: nothing to abort']),
    case("abort", "unknown-run-id", lambda w: ["migrate", "abort", *w.table_source, "--run-id", "0123abc"],
         ["no migration run '0123abc'"]),
    case("abort", "export-nothing-in-progress", lambda w: ["migrate", "abort", *w.export("t.jsonl")],
         ["no migration of export 't.jsonl' is in progress: nothing to abort"], files={"t.jsonl": json_lines(2)}),
]  # fmt: skip


def make_world(postgres, broker: BrokerVhost, tmp_path: Path, name: str) -> World:
    endpoint = "Bad" + str(abs(hash(name)) % 10**8)
    table = create_sql_persistence_table(postgres.dsn, endpoint)
    rows = [timeout(BOUND, 3600 + i, i, now=utc_now()) for i in range(ROWS)]
    insert_timeouts(postgres.dsn, table, rows)
    workspace = tmp_path / "work"
    workspace.mkdir()
    return World(f"{postgres.jdbc_url}?user={postgres.user}", postgres.dsn, endpoint, table, broker, workspace, rows)


@pytest.fixture(scope="module")
def untouched_broker(rabbitmq, management) -> Iterator[BrokerVhost]:
    """One vhost for every refused case: a refusal publishes nothing, which each case checks."""
    with vhost_factory(management) as new_vhost:
        yield provision_vhost(rabbitmq, new_vhost("refused"), [BOUND])


@pytest.fixture
def refused_world(postgres, untouched_broker, tmp_path, request) -> World:
    return make_world(postgres, untouched_broker, tmp_path, request.node.name)


@pytest.fixture
def world(postgres, broker_vhost, tmp_path, request) -> World:
    """A run that starts publishes: it gets a vhost of its own."""
    return make_world(postgres, broker_vhost([BOUND]), tmp_path, request.node.name)


def migration_tables(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as connection:
        rows = connection.execute(
            "select table_name from information_schema.tables where starts_with(table_name, 'TimeoutData_migration_') "
            "or starts_with(table_name, 'TimeoutData_export_') or table_name = %s",
            (STATE_TABLE,),
        ).fetchall()
    return sorted(name for (name,) in rows)


def broker_depths(broker: BrokerVhost) -> dict[str, int]:
    """Messages in the endpoint queue and every v2 level queue (passive declares: exact, no stats delay)."""
    queues = [BOUND, *(delay_level_name(level, Generation.V2) for level in range(LEVEL_COUNT))]
    with contextlib.closing(pika.BlockingConnection(pika.URLParameters(broker.amqp_url))) as connection:
        channel = connection.channel()
        return {name: channel.queue_declare(name, passive=True).method.message_count for name in queues}


def legacy_count(world: World) -> int:
    with psycopg.connect(world.dsn) as connection:
        return int(connection.execute(f"select count(*) from {world.table}").fetchone()[0])  # type: ignore[index]


def invoke(world: World, args: list[str], logs: Path) -> object:
    env = {**CLEAN_ENVIRONMENT, "NSB_DELAYS_LOG_DIR": str(logs)}
    return CliRunner().invoke(cli, args, env=env)


@pytest.mark.parametrize("service_case", CASES, ids=[c[0].id for c in CASES])
def test_refused_before_anything_moves(
    service_case: ServiceCase, spark, refused_world: World, tmp_path, monkeypatch
) -> None:
    world = refused_world
    bad, build, setup = service_case
    if setup is not None:
        setup(world)
    write_files(world.workspace, bad.files)
    monkeypatch.chdir(world.workspace)
    args = build(world)
    if args[0] != "migrate":
        args = ["migrate", "run", *args]
    before = (legacy_count(world), migration_tables(world.dsn), broker_depths(world.broker), snapshot(world.workspace))
    result = invoke(world, args, tmp_path / "logs")
    assert_refused(result, bad)  # type: ignore[arg-type]
    after = (legacy_count(world), migration_tables(world.dsn), broker_depths(world.broker), snapshot(world.workspace))
    assert after == before, "a refused command changed the database, the broker or the working directory"


# --- runs that start: stopped (exit 1), resumed with other parameters (2), interrupted (130) -------------------


def test_a_stopped_run_says_where_it_stands_and_how_to_go_on(spark, world: World, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(world.workspace)
    common = [*world.table_source, *world.rabbit, "--batch-size", "10", "--partitions", "1", "--no-progress"]
    stopped = invoke(world, ["migrate", "run", *common, "--fault", "after-publish:2:raise"], tmp_path / "logs")
    assert stopped.exit_code == 1, stopped.output
    output = stopped.output
    assert "the run stopped: nsb_delays.pipeline.faults.InjectedFault: injected fault at after-publish" in output
    assert f"{ROWS} hidden, 10 dispatched, 0 quarantined, {ROWS - 10} pending" in output
    jdbc = shlex.quote(world.jdbc)
    assert f"resume:  nsb-delays migrate run --source-jdbc {jdbc} --endpoint {world.endpoint}" in output
    assert f"restore: nsb-delays migrate abort --source-jdbc {jdbc} --endpoint {world.endpoint} --run-id " in output
    assert "Spark's detail: " in output and "Traceback" not in output and len(output.splitlines()) <= 5
    (log,) = (tmp_path / "logs").iterdir()
    assert "InjectedFault" in log.read_text()

    other = Case("resume", "other-parameters", (), 2, ["is in progress with other parameters", '"batchSize": 10'])
    before = (legacy_count(world), broker_depths(world.broker))
    assert_refused(invoke(world, ["migrate", "run", *common[:-5], "--batch-size", "20", "--no-progress"],
                          tmp_path / "logs"), other)  # fmt: skip
    assert (legacy_count(world), broker_depths(world.broker)) == before

    resumed = invoke(world, ["migrate", "run", *common], tmp_path / "logs")
    assert resumed.exit_code == 0 and f"{ROWS} of {ROWS} dispatched ({ROWS - 10} now)" in resumed.output


def test_a_run_given_two_nodes_delivers_everything_when_the_first_is_down(
    spark, world: World, tmp_path, monkeypatch
) -> None:
    """``--amqp-url DOWN,UP``: the preflight accepts the node that answers and the executors' failover
    publisher starts there; every timeout is confirmed once (no duplicates without a lost connection)."""
    monkeypatch.chdir(world.workspace)
    up = world.broker.amqp_url
    down = up.replace(f":{world.broker.broker.amqp_port}/", f":{closed_port()}/")
    args = [*world.table_source, "--amqp-url", f"{down},{up}", "--management-url",
            world.broker.broker.management_url, "--batch-size", "10", "--partitions", "2", "--no-progress"]  # fmt: skip
    result = invoke(world, ["migrate", "run", *args], tmp_path / "logs")
    assert result.exit_code == 0, result.output
    assert f"{ROWS} of {ROWS} dispatched ({ROWS} now), 0 quarantined, completed" in result.output
    assert legacy_count(world) == 0
    assert sum(broker_depths(world.broker).values()) == ROWS  # due in an hour: all waiting in the levels, once


def test_a_node_lost_mid_run_is_reported_and_the_run_carries_on_from_the_next(
    spark, world: World, tmp_path, monkeypatch
) -> None:
    """The broker closes the executor's connection after the first batch (as a stopping cluster node does:
    ``CONNECTION_FORCED``); the task's publisher carries on from the next URL, every timeout waits in the
    graph exactly once, and the summary says how often that happened and what was published again."""
    monkeypatch.chdir(world.workspace)
    node_a = world.broker.amqp_url
    node_b = f"{node_a}?heartbeat=60"  # a second name for the same broker: the "other node"
    marker = tmp_path / "paused"
    args = [*world.table_source, "--amqp-url", f"{node_a},{node_b}", "--management-url",
            world.broker.broker.management_url, "--batch-size", "10", "--partitions", "1", "--no-progress",
            "--fault", f"after-publish:1:pause:{marker}"]  # fmt: skip
    api = world.broker.broker.api()
    outcome: dict[str, object] = {}
    runner = threading.Thread(target=lambda: outcome.update(result=invoke(world, ["migrate", "run", *args], tmp_path)))
    runner.start()
    assert wait_for_fault_point(marker, runner.is_alive), f"the run never reached its first batch: {outcome}"
    deadline = time.monotonic() + 180
    listing = (
        f"{world.broker.broker.management_url}/api/vhosts/{urllib.parse.quote(world.broker.vhost, safe='')}/connections"
    )
    connections: list[str] = []
    while (
        not connections and time.monotonic() < deadline
    ):  # the management API lists a connection after its first stats
        connections = [c["name"] for c in api.get(listing).json()]
        time.sleep(0.2)
    for name in connections:
        api.delete(f"{world.broker.broker.management_url}/api/connections/{urllib.parse.quote(name, safe='')}")
    marker.unlink()
    runner.join(JOB_HANG_GUARD_SECONDS)
    result = outcome["result"]
    assert connections, "no publisher connection to close"
    assert result.exit_code == 0, result.output
    assert f"{ROWS} of {ROWS} dispatched ({ROWS} now), 0 quarantined, completed" in result.output
    assert "carried on from another node 1 time and published 10 unconfirmed messages again" in result.output
    assert legacy_count(world) == 0
    assert sum(broker_depths(world.broker).values()) == ROWS  # the closed connection confirmed nothing twice


def test_an_export_changed_under_its_run_is_refused_and_a_fixed_export_is_a_new_run(
    spark, world: World, tmp_path, monkeypatch
) -> None:
    """Identity by content: the run of an export is found by its files' fingerprint, not its path."""
    monkeypatch.chdir(world.workspace)
    export = world.workspace / "t.jsonl"
    export.write_text(json_lines(20))
    args = [*world.export("t.jsonl"), *world.rabbit, "--batch-size", "5", "--partitions", "1", "--no-progress"]
    stopped = invoke(world, ["migrate", "run", *args, "--fault", "after-publish:1:raise"], tmp_path / "logs")
    assert stopped.exit_code == 1 and "20 hidden, 0 dispatched" in stopped.output, stopped.output

    export.write_text(json_lines(25))  # the file changes while its run is in progress
    changed = Case("export", "changed-under-its-run", (), 2, ["export t.jsonl changed since run", "hid its timeouts",
                                                              "`migrate abort` it first"])  # fmt: skip
    before = (migration_tables(world.dsn), broker_depths(world.broker))
    assert_refused(invoke(world, ["migrate", "run", *args], tmp_path / "logs"), changed)
    assert (migration_tables(world.dsn), broker_depths(world.broker)) == before

    aborted = invoke(world, ["migrate", "abort", *world.export("t.jsonl"), "--abort-output", "rest"], tmp_path / "l")
    assert aborted.exit_code == 0 and "20 undispatched timeouts" in aborted.output, aborted.output
    rerun = invoke(world, ["migrate", "run", *args], tmp_path / "logs")
    assert rerun.exit_code == 0 and "25 of 25 dispatched" in rerun.output, rerun.output
    export.write_text(json_lines(25) + json_lines(1, endpoint="Sales", time_text="2032-01-01T00:00:00Z")
                      .replace("TimeoutDatas/0", "TimeoutDatas/new"))  # fmt: skip
    again = invoke(world, ["migrate", "run", *args], tmp_path / "logs")
    assert again.exit_code == 0 and "26 of 26 dispatched" in again.output, again.output


def test_ctrl_c_reports_the_run_and_both_commands_then_exits_130(spark, world: World, tmp_path) -> None:
    """A real process and a real SIGINT to its process group, as a terminal sends on Ctrl-C, mid-dispatch."""
    marker = tmp_path / "reached"
    command = [str(Path(sys.executable).parent / "nsb-delays"), "migrate", "run", *world.table_source, *world.rabbit,
               "--batch-size", "10", "--partitions", "1", "--no-progress", "--master", "local[1]",
               "--fault", f"after-publish:2:hang:{marker}"]  # fmt: skip
    env = {**os.environ, "NSB_DELAYS_LOG_DIR": str(tmp_path / "logs"), "PYSPARK_PYTHON": sys.executable}
    job = subprocess.Popen(command, cwd=world.workspace, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           start_new_session=True, preexec_fn=ctrl_c_as_from_a_terminal)  # fmt: skip
    try:
        reached = wait_for_fault_point(marker, lambda: job.poll() is None)
        assert reached, job.stdout.read().decode() if job.stdout else ""
        os.killpg(job.pid, signal.SIGINT)
        output = job.communicate(timeout=JOB_HANG_GUARD_SECONDS)[0].decode()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)
    assert job.returncode == 130, output
    assert "Traceback" not in output and len([line for line in output.splitlines() if line.strip()]) <= 4, output
    assert "interrupted. run " in output and f": {ROWS} hidden, 10 dispatched, 0 quarantined" in output
    assert f"resume:  nsb-delays migrate run --source-jdbc {shlex.quote(world.jdbc)}" in output
    assert "restore: nsb-delays migrate abort --source-jdbc" in output and "--run-id " in output
    run_id = output.split("interrupted. run ")[1].split(":")[0]
    aborted = invoke(world, ["migrate", "abort", *world.table_source, "--run-id", run_id], tmp_path / "logs")
    assert aborted.exit_code == 0 and f"{ROWS - 10} timeouts restored" in aborted.output, aborted.output
    assert legacy_count(world) == ROWS - 10
