"""Every ``<!-- runs-with: … -->`` block of the documentation, run against the services it names (issue 30, item 6).

A shell block runs as a reader pastes it into bash and must exit 0; a console block runs each ``$`` command and must
print the page's output lines (a line eliding something with ``…`` and the lines of ``VARIES`` aside; a word cut
short, ``39350fc5…``, stands for any word) and exit as the page shows; an output block runs the command its marker
names (``output of:``) and must print the block. What each service
name provides, and the one table of the reader's addresses the test replaces: tests/docs/live.py.

The docs tier proves that the documented commands work, not how broker versions differ (the broker tier does):
every block runs on the session's RabbitMQ 3.10 (one broker for the whole tier, started once).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import psycopg
import pytest

from nsb_delays.brokers.management import ManagementApi, path_segment
from nsb_delays.components.model.rabbitmq.names import (
    Generation,
    delay_level_name,
    delivery_exchange_name,
    parking_name,
)
from nsb_delays.components.model.rabbitmq.versions import broker_version_of, parse_reported_broker_version
from nsb_delays.infra.commands.demo.provisioning import import_definitions, provision_sqs
from nsb_delays.infra.commands.demo.servers import HOST, wait_until
from nsb_delays.infra.pulumi_engine import offline_environment
from nsb_delays.infra.render import render
from nsb_delays.pipeline.layouts import sql_persistence_layout
from nsb_delays.stack.config import load_stack
from servers.rabbitmq import LocalMoto, LocalRabbitMq
from tests.bad_inputs import closed_port
from tests.broker.in_flight_messages import delayed_message, poison_messages, publish
from tests.broker.nservicebus_declarations import declare_endpoint
from tests.docs.examples import PROGRAM, Block, console_commands, examples
from tests.docs.live import (
    AMQP_PORT,
    BLUE_GREEN,
    CONFLICTING_POLICY,
    DATABASE,
    DATABASE_ROLE,
    DRIFTED_LEVEL,
    DRIFTED_TTL,
    ELSEWHERE,
    ENDPOINT,
    EXPORTED_TIMEOUTS,
    EXPORTS,
    FAULT_VARIABLE,
    INTERRUPTED_AT,
    LARGE_BODIES_BUCKET,
    LEDGER_DATABASE,
    LONG_DELAY_LEVEL,
    LONG_DELAY_MESSAGES,
    MANAGEMENT_PORT,
    PARKED_MESSAGES,
    PROD_ENDPOINTS,
    PROD_REGION,
    PROD_VHOST,
    PROJECT,
    RETIRED_ENDPOINT,
    SERVICES,
    STOPPED_EXPORT_RUN,
    STOPPED_RUN,
    STORED_TIMEOUTS,
    STUCK_LEVEL,
    STUCK_MESSAGES,
    UNBOUND_ENDPOINT,
    USERS,
    WAITING_DELAYS,
    Run,
    Scene,
    StandardPorts,
    aws_stack,
    command_environment,
    commit_history,
    dev_stack,
    missing_lines,
    prod_stack,
    pulumi_project,
    pushed_to_origin,
    rabbitmq_only,
    rabbitmq_stack,
    rabbitmqctl_script,
    run_bash,
    without_parking,
)
from tests.engine.conftest import PASSPHRASE, require_pulumi
from tests.opentofu import OpenTofu, opentofu_build
from tests.spark.conftest import create_sql_persistence_table, insert_timeouts, timeout, utc_now
from tests.spark.test_run_export import write_export

MARKED = [example.parsed for example in examples() if example.parsed.runs_with]
LIVE = [block for block in MARKED if not set(block.runs_with) & set(ELSEWHERE)]
# Lines of a page's output that differ from run to run, and why; every other line is compared.
VARIES = {
    "│ different │ policy team-retries over queue Sales │ delivery-limit │ only from nsb.Sales.delivery-limit (100000) │ 5"
    "      │": "the expected delivery limit shown is 4.x's; 3.10's is 'none, or 100000'",
    "cluster, after a node fault), the dead-letter worker of the level's leader rabbit@node1 has stopped: restart that "
    "node": "the leader is the session broker's node (nsb<port>@localhost)",
}
# Pages whose output shows a run's counts, which the test's run does not reproduce: any number stands for any other.
COUNTS_VARY = {
    "docs/how-to/move-delays.md": "the page's run moved 20,001 messages over 10 destinations",
    "docs/how-to/stuck-level.md": "the page's broker held thousands of messages, the test's a few",
    "docs/tutorials/demo.md": "delays are measured, the demo's run time too, and moto's port is a free one",
}
EXIT = re.compile(r"#\s*exit (?P<code>\d+)")
REFUSAL = re.compile(rf"^(Error: |{PROGRAM}( [\w-]+)+: )")
EXIT_REFUSED = 2  # docs/reference/exit-codes.md


def reset_vhost(api: ManagementApi, vhost: str) -> None:
    if api.vhost_exists(vhost):
        api.delete_vhost(vhost)
    api.create_vhost(vhost)
    for user in USERS:
        api.request(
            "PUT", f"permissions/{path_segment(vhost)}/{user}", {"configure": ".*", "write": ".*", "read": ".*"}
        )


def drifted_definitions(document: dict[str, Any]) -> dict[str, Any]:
    """The dev stack's definitions with drift.md's drift: level 3's TTL changed, Shipping's delivery binding gone."""
    for queue in document["queues"]:
        if queue["name"] == DRIFTED_LEVEL:
            queue["arguments"]["x-message-ttl"] = DRIFTED_TTL
    document["bindings"] = [
        binding
        for binding in document["bindings"]
        if not (binding["destination"] == UNBOUND_ENDPOINT and binding["source"].endswith("delay-delivery"))
    ]
    return document


@pytest.fixture(scope="session")
def standard_ports(rabbitmq: LocalRabbitMq) -> Iterator[str]:
    """The session broker at 5672/15672 on a loopback address of its own (live.StandardPorts): its host."""
    forwarder = StandardPorts({AMQP_PORT: rabbitmq.amqp_port, MANAGEMENT_PORT: rabbitmq.management_port})
    yield forwarder.host
    forwarder.close()


@pytest.fixture
def scene(
    block: Block, rabbitmq: LocalRabbitMq, standard_ports: str, request: pytest.FixtureRequest, tmp_path: Path
) -> Scene:
    """The reader's project folder and environment with the services the block's marker names (live.SERVICES)."""
    unknown = set(block.runs_with) - set(SERVICES)
    assert not unknown, f"{block.where}: unknown services {unknown}"
    needs = set(block.runs_with)
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "docs").symlink_to(PROJECT / "docs")
    version = broker_version_of(parse_reported_broker_version(rabbitmq.version()))
    management_url = f"http://{standard_ports}:{MANAGEMENT_PORT}"
    api = ManagementApi(rabbitmq.management_url, rabbitmq.username, rabbitmq.password)
    for user, password in USERS.items():
        api.request("PUT", f"users/{user}", {"password": password, "tags": "administrator"})
    for vhost in ("/", PROD_VHOST):
        reset_vhost(api, vhost)
    (folder / "Pulumi.dev.yaml").write_text(dev_stack(management_url, version))
    (folder / "Pulumi.prod.yaml").write_text(prod_stack(management_url, version, PROD_ENDPOINTS))
    addresses = {
        "management": f"{standard_ports}:{MANAGEMENT_PORT}",
        "amqp": f"{standard_ports}:{AMQP_PORT}",
        "prod-vhost": f"vhost '{PROD_VHOST}'",
    }
    env: dict[str, str] = {}
    if "rabbitmq-env" in needs:
        env |= {
            "RABBITMQ_ENDPOINT": management_url,
            "RABBITMQ_USERNAME": rabbitmq.username,
            "RABBITMQ_PASSWORD": rabbitmq.password,
        }
    moto: LocalMoto | None = request.getfixturevalue("moto_server") if "sqs" in needs else None
    if moto is not None:
        moto.reset()
        addresses["moto"] = moto.endpoint_url.removeprefix("http://")
        env |= aws_environment(moto)
    if "stuck-level" in needs:
        assert "deployed" in needs, f"{block.where}: stuck-level needs deployed"
        without_parking(folder / "Pulumi.prod.yaml")
    if "deployed" in needs:
        deploy(api, folder, moto, drifted="drift" in needs)
    if "git" in needs:
        commit_history(folder, management_url, version)
    if "origin" in needs:
        pushed_to_origin(folder, tmp_path / "origin.git")
    if "pulumi" in needs:
        env |= pulumi_stack(folder, tmp_path / "pulumi-state", env, up="pulumi-up" in needs, dev="pulumi-dev" in needs)
    if "blue-green" in needs:
        for vhost in BLUE_GREEN:
            reset_vhost(api, vhost)
            stack = folder / f"Pulumi.{vhost}.yaml"
            stack.write_text(rabbitmq_stack(management_url, version, vhost, rabbitmq.username, rabbitmq.password))
            import_definitions(api, load_stack(str(stack)), vhost)
        leave_delays_waiting(rabbitmq, BLUE_GREEN[0])
    if "aws-stack" in needs:
        assert moto is not None, f"{block.where}: aws-stack needs sqs"
        (folder / "Pulumi.aws.yaml").write_text(aws_stack())
        in_region = dataclasses.replace(moto, region=PROD_REGION)
        provision_sqs(in_region, load_stack(str(folder / "Pulumi.aws.yaml")), "aws", "nsb-delays-aws-sqs")
        in_region.client("s3").create_bucket(
            Bucket=LARGE_BODIES_BUCKET, CreateBucketConfiguration={"LocationConstraint": PROD_REGION}
        )
        leave_delays_waiting(rabbitmq, PROD_VHOST)
    if "v1-graph" in needs:
        v1 = load_stack(str(folder / "Pulumi.prod.yaml")).with_values("rabbitmq", generation="v1")
        import_definitions(api, v1, "prod")
        leave_delays_waiting(rabbitmq, PROD_VHOST, "v1", poison=1)
    if "parked" in needs:
        park_and_recreate(rabbitmq, api)
    if "stuck-level" in needs:
        stall_a_level(rabbitmq, api)
    if "opentofu" in needs:
        env |= on_path(folder, opentofu_build(tmp_path / "tofu"))
        rabbitmq_only(folder / "Pulumi.prod.yaml")
    if "rabbitmqctl" in needs:
        (folder / "bin").mkdir(exist_ok=True)
        (folder / "bin" / "rabbitmqctl").write_text(
            rabbitmqctl_script(rabbitmq.tool_command("rabbitmqctl", "-n", rabbitmq.node), rabbitmq._env())
        )
        (folder / "bin" / "rabbitmqctl").chmod(0o755)
        env["PATH"] = f"{folder / 'bin'}{os.pathsep}{env.get('PATH') or command_environment({})['PATH']}"
    if "database" in needs:
        postgres = request.getfixturevalue("postgres")
        addresses["postgres"] = f"{HOST}:{postgres.port}"
        create_database(postgres.dsn)
    if "conflicting-policy" in needs:
        api.request("PUT", "policies/%2F/team-retries", CONFLICTING_POLICY)
    if "rabbit-cluster" in needs:
        addresses |= cluster_nodes(rabbitmq, request)
    interrupt_when = migration_state(block, needs, Scene(folder, command_environment(env), addresses), request)
    if interrupt_when is not None:
        env |= interrupted_run(folder.parent, interrupt_when)
    return Scene(folder, command_environment(env), addresses, interrupt_when)


def on_path(folder: Path, build: OpenTofu) -> dict[str, str]:
    """``tofu`` in the folder's ``bin/``, first on PATH, and the variables that point it at the mirror."""
    (folder / "bin").mkdir(exist_ok=True)
    (folder / "bin" / "tofu").symlink_to(build.binary)
    return {**build.env, "PATH": f"{folder / 'bin'}{os.pathsep}{command_environment({})['PATH']}"}


def migration_state(block: Block, needs: set[str], scene: Scene, request: pytest.FixtureRequest) -> Path | None:
    """migrate-timeouts.md's services: the timeouts, exports and ledger database, and the runs that stopped;
    the file whose existence says when to press Ctrl-C (ctrl-c)."""
    postgres = request.getfixturevalue("postgres") if needs & {"stored-timeouts", "ledger-database"} else None
    if "stored-timeouts" in needs:
        assert postgres is not None and "database" in needs, f"{block.where}: stored-timeouts needs database"
        store = postgres.dsn.replace("dbname=postgres", f"dbname={DATABASE}")
        now = utc_now()
        rows = [timeout(ENDPOINT, 3600 * (1 + index % 720), index, now=now) for index in range(STORED_TIMEOUTS)]
        insert_timeouts(store, sql_persistence_layout(ENDPOINT, "postgresql").table, rows)
    if "exports" in needs:
        now = utc_now()
        (scene.folder / "exports").mkdir()
        for path, export_format in EXPORTS.items():
            rows = [timeout(ENDPOINT, 3600 * (1 + index), index, now=now) for index in range(EXPORTED_TIMEOUTS)]
            write_export(scene.folder / path, export_format, rows, owner=ENDPOINT)
    if "ledger-database" in needs:
        assert postgres is not None
        scene.addresses["postgres"] = f"{HOST}:{postgres.port}"
        with psycopg.connect(postgres.dsn, autocommit=True) as connection:
            connection.execute(f"drop database if exists {LEDGER_DATABASE}")
            connection.execute(f"create database {LEDGER_DATABASE} owner {DATABASE_ROLE}")
    amqp = "--amqp-url 'amqp://user:pass@rabbit:5672/%2F' --management-url http://rabbit:15672 --no-progress"
    if "stopped-run" in needs:
        batch_size, fault = STOPPED_RUN
        one_task = dataclasses.replace(scene, env=scene.env | spark_with_one_task(scene.folder.parent))
        stop_a_run(block, one_task, f"--source-jdbc 'jdbc:postgresql://db:5432/{DATABASE}?user={DATABASE_ROLE}' "
                   f"--endpoint {ENDPOINT} {amqp} --batch-size {batch_size} --fault {fault}")  # fmt: skip
    if "stopped-export-run" in needs:
        batch_size, fault = STOPPED_EXPORT_RUN
        stop_a_run(block, scene, f"--source-path exports/timeouts.parquet --endpoint {ENDPOINT} "
                   f"--ledger-jdbc-url 'jdbc:postgresql://db:5432/{LEDGER_DATABASE}?user={DATABASE_ROLE}' "
                   f"{amqp} --batch-size {batch_size} --fault {fault}")  # fmt: skip
    return scene.folder.parent / "interrupt-now" if "ctrl-c" in needs else None


def stop_a_run(block: Block, scene: Scene, arguments: str) -> None:
    """``migrate run`` with ``arguments``, which make it fail mid-way: it must exit 1, a run that stopped."""
    run = run_bash(scene, scene.substituted(f"nsb-delays migrate run {arguments}  || test $? -eq 1"))
    if run.returncode != 0 or "the run stopped:" not in run.output:
        pytest.fail(f"{block.where}: making a run that stopped: {run.explain()}", pytrace=False)


def spark_with_one_task(folder: Path) -> dict[str, str]:
    """Spark's default parallelism 1 (spark-defaults.conf in SPARK_CONF_DIR): a run has one task, so where its test
    hook stops it is one place, on a machine of any number of cores."""
    configuration = folder / "spark-conf"
    configuration.mkdir(exist_ok=True)
    (configuration / "spark-defaults.conf").write_text("spark.default.parallelism 1\n")
    return {"SPARK_CONF_DIR": str(configuration)}


def interrupted_run(folder: Path, marker: Path) -> dict[str, str]:
    """The environment of a run that Ctrl-C stops where live.INTERRUPTED_AT holds its one task."""
    return spark_with_one_task(folder) | {FAULT_VARIABLE: f"{INTERRUPTED_AT}:{marker}"}


def cluster_nodes(rabbitmq: LocalRabbitMq, request: pytest.FixtureRequest) -> dict[str, str]:
    """rabbit-1's AMQP port closed (held bound), rabbit-2's and rabbit-3's forwarded to the broker."""
    nodes = {"rabbit-1": f"{HOST}:{closed_port()}"}
    for node in ("rabbit-2", "rabbit-3"):
        forwarder = StandardPorts({AMQP_PORT: rabbitmq.amqp_port})
        request.addfinalizer(forwarder.close)
        nodes[node] = f"{forwarder.host}:{AMQP_PORT}"
    return nodes


def leave_delays_waiting(rabbitmq: LocalRabbitMq, vhost: str, generation: str = "v2", *, poison: int = 0) -> None:
    """Delayed messages as NServiceBus endpoints leave them (``NServiceBus.TimeSent``, the delay header), for every
    endpoint in the vhost's graph (live.WAITING_DELAYS), and ``poison`` messages a move sets aside."""
    messages = [
        delayed_message(endpoint, delay, delay, generation, index)[1]
        for index, (endpoint, delay) in enumerate(itertools.product(PROD_ENDPOINTS, WAITING_DELAYS))
    ]
    messages += [outgoing for _, outgoing in poison_messages(generation)[:poison]]
    publish(pika.URLParameters(rabbitmq.vhost_amqp_url(vhost)), messages)


def park_and_recreate(rabbitmq: LocalRabbitMq, api: ManagementApi) -> None:
    """Delayed messages for the retired endpoint reach prod's delivery exchange, where no binding routes them: its
    alternate exchange parks them (before the publish is confirmed). Then the endpoint comes back, declared as
    NServiceBus declares it. ``status`` reads the parking queue's depth from the management API's statistics, which
    the broker samples: the scene is ready once they show the parked messages (as the broker tier waits)."""
    delivery = delivery_exchange_name("v2")
    messages = [
        delayed_message(RETIRED_ENDPOINT, 3600, 0, "v2", index)[1]._replace(exchange=delivery)
        for index in range(PARKED_MESSAGES)
    ]
    parameters = pika.URLParameters(rabbitmq.vhost_amqp_url(PROD_VHOST))
    publish(parameters, messages)
    connection = pika.BlockingConnection(parameters)
    try:
        declare_endpoint(connection.channel(), "v2", "conventional", [RETIRED_ENDPOINT], sending_queues=())
    finally:
        connection.close()
    parking = f"queues/{path_segment(PROD_VHOST)}/{path_segment(parking_name('v2'))}"
    wait_until(lambda: api.request("GET", parking).get("messages") == PARKED_MESSAGES, "the parked messages", 60)


def stall_a_level(rabbitmq: LocalRabbitMq, api: ManagementApi) -> None:
    """stuck-level.md's prod stack, which parks nothing: messages for Sales due in 2^21 s wait in level 21; messages
    for the retired endpoint, due in 2 s, expire out of level 1 into the delivery exchange, where no binding routes
    them, and at-least-once dead-lettering holds them in level 1's dead-letter backlog (#1407). ``status`` reads the
    backlog from the management API's statistics, which the broker samples: the scene is ready once they show it."""
    messages = [
        delayed_message(ENDPOINT, 1 << LONG_DELAY_LEVEL, 1 << LONG_DELAY_LEVEL, "v2", index)[1]
        for index in range(LONG_DELAY_MESSAGES)
    ]
    messages += [
        delayed_message(RETIRED_ENDPOINT, 1 << STUCK_LEVEL, 1 << STUCK_LEVEL, "v2", index)[1]
        for index in range(STUCK_MESSAGES)
    ]
    publish(pika.URLParameters(rabbitmq.vhost_amqp_url(PROD_VHOST)), messages)
    queues = f"queues/{path_segment(PROD_VHOST)}/"
    stuck = queues + path_segment(delay_level_name(STUCK_LEVEL, Generation.V2))
    waiting = queues + path_segment(delay_level_name(LONG_DELAY_LEVEL, Generation.V2))
    # Every figure the page shows, each sampled on its own: a sample of level 21 that still said 0 messages left its
    # row out of status's table (a loaded clean-clone run, 2026-11-28).
    wait_until(lambda: api.request("GET", stuck).get("messages_dlx") == STUCK_MESSAGES, "the dead-letter backlog", 180)
    wait_until(lambda: api.request("GET", waiting).get("messages") == LONG_DELAY_MESSAGES, "level 21's messages", 180)


def aws_environment(moto: LocalMoto) -> dict[str, str]:
    """boto3's variables for moto (every AWS client the commands make honours AWS_ENDPOINT_URL)."""
    return {
        "AWS_ENDPOINT_URL": moto.endpoint_url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": moto.region,
    }


def deploy(api: ManagementApi, folder: Path, moto: LocalMoto | None, *, drifted: bool) -> None:
    """The dev and prod stacks as a team without Pulumi provisions them (demo.import_definitions,
    demo.provision_sqs); ``drifted``: the dev stack with drift.md's drift."""
    dev = load_stack(str(folder / "Pulumi.dev.yaml"))
    if drifted:
        api.import_definitions(drifted_definitions(json.loads(render(dev, "rabbitmq-definitions", "dev"))))
    else:
        import_definitions(api, dev, "dev")
    prod = load_stack(str(folder / "Pulumi.prod.yaml"))
    import_definitions(api, prod, "prod")
    if moto is not None:
        provision_sqs(moto, dev, "dev", "nsb-delays-dev-sqs")
        provision_sqs(dataclasses.replace(moto, region=PROD_REGION), prod, "prod", "nsb-delays-prod-sqs")


def pulumi_stack(folder: Path, backend: Path, env: dict[str, str], *, up: bool, dev: bool = False) -> dict[str, str]:
    """The project in ``folder`` with stack prod initialised (and ``up``: deployed) on a local backend, and with
    ``dev`` stack dev too; the environment of the engine's commands."""
    stacks = ["prod", "dev"] if dev else ["prod"]
    for stack in stacks:
        rabbitmq_only(folder / f"Pulumi.{stack}.yaml")
    pulumi_project(folder)
    backend.mkdir()
    env = env | offline_environment(require_pulumi(), backend, PASSPHRASE)
    steps = [["stack", "init", stack] for stack in stacks]
    steps += [["up", "--yes", "--skip-preview", "--stack", "prod"]] if up else []
    for arguments in steps:
        run = run_bash(Scene(folder, command_environment(env)), shlex.join(["pulumi", *arguments]))
        if run.returncode != 0:
            pytest.fail(f"setting up the stacks: {run.explain()}", pytrace=False)
    return env


def create_database(dsn: str) -> str:
    """The role and database the pages' JDBC URLs name, with SQL persistence's timeout table of their endpoint; the
    database's DSN, as that role."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(f"drop database if exists {DATABASE}")
        connection.execute(f"drop database if exists {LEDGER_DATABASE}")  # the role's too (ledger-database)
        connection.execute(f"drop role if exists {DATABASE_ROLE}")
        connection.execute(f"create role {DATABASE_ROLE} login")
        connection.execute(f"create database {DATABASE} owner {DATABASE_ROLE}")
    store = dsn.replace("dbname=postgres", f"dbname={DATABASE}").replace("user=postgres", f"user={DATABASE_ROLE}")
    create_sql_persistence_table(store, ENDPOINT)
    return store


def expected_exit(command: str, expected: list[str]) -> int:
    """``# exit N`` on the command's line, else a refusal (exit 2) when the page's output shows one, else 0."""
    comment = EXIT.search(command)
    if comment:
        return int(comment.group("code"))
    return EXIT_REFUSED if any(REFUSAL.match(line) for line in expected) else 0


def check_output(block: Block, line: int, scene: Scene, command: str, expected: list[str]) -> None:
    script = scene.substituted(command)
    run = run_bash(scene, script)
    output = scene.as_on_the_page(run.output, "\n".join([command, *expected]))
    missing = missing_lines(expected, output, lambda text: text in VARIES, counts_vary=block.page in COUNTS_VARY)
    if missing:
        shown = "\n".join(f"  {text}" for text in missing)
        pytest.fail(f"{block.page}:{line}: `{command}` does not print the page's lines:\n{shown}\n{run.explain()}")
    code = expected_exit(command, expected)
    if run.returncode != code:
        pytest.fail(f"{block.page}:{line}: expected exit {code}; {run.explain()}", pytrace=False)


@pytest.mark.parametrize("rabbitmq", ["3.10"], indirect=True)
@pytest.mark.parametrize("block", LIVE, ids=[f"{b.page}:{b.line}-{b.language or 'plain'}" for b in LIVE])
def test_the_block_runs(block: Block, scene: Scene) -> None:
    if block.output_of:
        check_output(block, block.line, scene, block.output_of, block.source.splitlines())
    elif block.kind == "console":
        for command in console_commands(block.source):
            check_output(block, block.line_of(command.index), scene, command.line, command.expected)
    elif block.kind == "bash":
        script = scene.substituted(block.source)
        run: Run = run_bash(scene, script)
        if run.returncode != 0:
            pytest.fail(f"{block.where}: the block {run.explain()}", pytrace=False)
    else:
        pytest.fail(f"{block.where}: a {block.language} block runs only with `output of: <command>`", pytrace=False)


def test_each_service_a_marker_names_is_used() -> None:
    """A service no block needs is set-up code nothing runs."""
    used = {name for block in MARKED for name in block.runs_with}
    assert set(SERVICES) - used == set(), shlex.join(sorted(set(SERVICES) - used))


# --- the runner itself ----------------------------------------------------------------------------------------------


def test_output_is_compared_by_its_lines_in_order_whatever_the_table_widths_and_wrapping() -> None:
    output = "moved 3 message(s)\n┃ Level  ┃ Moved ┃\n│ nsb.v2.delay-level-03 │ 3     │\nfix the policy: remove\nit\n"
    page = ["moved 3 message(s)", "│ nsb.v2.delay-level-03 │ 3 │", "…", "fix the policy: remove it"]
    assert missing_lines(page, output, lambda line: False) == []
    assert missing_lines(["fix the policy: remove it", "moved 3 message(s)"], output, lambda line: False) == [
        "moved 3 message(s)"
    ]
    assert missing_lines(["moved 4 message(s)"], output, lambda line: line.startswith("moved")) == []


def test_the_readers_addresses_are_replaced_and_written_back_as_the_page_writes_them(tmp_path: Path) -> None:
    scene = Scene(tmp_path, {}, {"management": "127.9.9.9:15672", "postgres": "127.0.0.1:4321"})
    command = (
        "nsb-delays migrate run --source-jdbc 'jdbc:postgresql://db:5432/app' --management-url http://rabbit:15672"
    )
    assert scene.substituted(command) == command.replace("db:5432", "127.0.0.1:4321").replace(
        "rabbit:15672", "127.9.9.9:15672"
    )
    assert scene.as_on_the_page("at 127.9.9.9:15672 for 'nsb'", command) == "at rabbit:15672 for 'nsb'"
    assert scene.substituted("amqp://user:pass@rabbit:5672/%2F") == "amqp://user:pass@rabbit:5672/%2F"  # no AMQP here


def test_a_refusal_the_page_shows_is_expected_to_exit_2_and_a_comment_names_another_code() -> None:
    assert expected_exit("nsb-delays status --stack prod", ["nsb-delays status: 2 problems:"]) == 2
    assert expected_exit("nsb-delays verify --stack dev  # exit 1", []) == 1
    assert expected_exit("nsb-delays status --stack blue", []) == 0


def test_where_counts_vary_any_number_stands_for_any_other_and_the_words_still_count() -> None:
    output = "moved 6 message(s) in 0.2 s (30 msg/s); 1 poison message(s) in delays-migrate-poison-messages\n"
    page = ["moved 20,000 message(s) in 6.0 s (3,331 msg/s); 1 poison message(s) in delays-migrate-poison-messages"]
    assert missing_lines(page, output, lambda line: False, counts_vary=True) == []
    assert missing_lines(page, output, lambda line: False) == page
    assert missing_lines(["moved 5 queue(s)"], output, lambda line: False, counts_vary=True) == ["moved 5 queue(s)"]


def test_a_word_cut_short_stands_for_any_word_and_an_elision_standing_alone_skips_the_line() -> None:
    output = (
        "nsb-delays migrate run: interrupted. run 5d1f0c2a9e: 1,200 hidden, 300 dispatched.\n"
        "restore: nsb-delays migrate abort --endpoint Sales --run-id 5d1f0c2a9e\n"
    )
    page = [
        "nsb-delays migrate run: interrupted. run 39350fc5…: 1,200 hidden, 300 dispatched.",
        "restore: nsb-delays migrate abort --endpoint Sales --run-id 39350fc5…",
    ]
    assert missing_lines(page, output, lambda line: False) == []
    wrong = ["restore: nsb-delays migrate abort --endpoint Billing --run-id 39350fc5…"]
    assert missing_lines(wrong, output, lambda line: False) == wrong  # the rest of the line still counts
    assert missing_lines(["run 39350fc5…: 1,300 hidden"], output, lambda line: False) == ["run 39350fc5…: 1,300 hidden"]
    elided = ["… (138 resources)", "│ …   │      │", "# send them back …", "# … or purge it"]
    assert missing_lines(elided, output, lambda line: False) == []
