"""Migration benchmark: the broker's ceiling, ``migrate run`` end to end against it, and ``preview`` of a large
table from PostgreSQL against the same rows as Parquet.

1. **Ceiling**: the same N messages ``run`` sends (built by ``brokers.messages``, the run's own builder, from the
   same rows) published by 1, 2 and 4 bare pika confirm-publishers in parallel, each a process with its own
   connection (no shared GIL), mandatory + confirms, a sliding window of ``WINDOW`` unconfirmed. Timed from the
   first publish to the last confirm; the best is the ceiling. Broker CPU seconds per 100,000 messages show
   whether the broker's CPU is the limit.
2. **End to end**: ``migrate run`` of N stored timeouts PostgreSQL -> RabbitMQ v2 as an operator runs it (a
   subprocess, JVM start included): in local mode, and through ``spark-submit`` on a standalone cluster of two
   one-core workers (``servers.spark.LocalSparkCluster``, the cluster tier's). Printed: wall time, rows/s, the
   ratio to one publisher and to the ceiling, the run's own phases, and the CPU seconds of broker, PostgreSQL and
   Spark during it (where the two cores went).
3. **Preview**: ``migrate preview`` of M rows from PostgreSQL (made server-side with ``generate_series``) and of
   the same rows written out as Parquet, in the same run.

``python -m bench migrate [--rows N] [--preview-rows M] [--publishers 1,2,4] [--batch-size B] [--skip-local]
[--skip-cluster] [--skip-run] [--skip-preview]``; the defaults are the README's (1,000,000 and 10,000,000;
``NSB_BENCH_MIGRATE_ROWS`` / ``NSB_BENCH_PREVIEW_ROWS`` change them too). Private PostgreSQL, RabbitMQ and
Spark processes are started on 127.0.0.1 and stopped at the end. Targets (issue 14): run ≤ 90 s and ≥ 0.8x
the ceiling for 1,000,000 rows; preview from PostgreSQL ≤ 2x the Parquet preview for 10,000,000 rows.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pika
import psycopg
import requests
from pika.adapters.select_connection import SelectConnection

from nsb_delays.brokers.management import ManagementApi
from nsb_delays.brokers.messages import basic_properties, rabbitmq_message
from nsb_delays.components.model.rabbitmq.names import LEVEL_COUNT, Generation, delay_level_name
from nsb_delays.infra.commands.demo.provisioning import import_definitions
from nsb_delays.infra.commands.demo.servers import ServiceUnavailable
from nsb_delays.pipeline.delays import now_micros, remaining_delay, to_micros
from nsb_delays.pipeline.layouts import CANONICAL_COLUMNS, EXPORT_COLUMNS, sql_persistence_layout
from nsb_delays.pipeline.spark import POSTGRES_JDBC_JAR
from nsb_delays.stack.config import parse_stack_config
from servers.databases import LocalPostgres
from servers.rabbitmq import LocalRabbitMq
from servers.spark import LocalSparkCluster

from .measures import TreeSampler, load, machine_cpu_seconds, tree_cpu_seconds

ENDPOINTS = [f"Bench{i}" for i in range(10)]
RUN_ENDPOINTS = {"local": "Bench.Local", "cluster": "Bench.Cluster"}  # one legacy table per end-to-end run
PREVIEW_ENDPOINT = "Bench.Preview"
WINDOW = 1024  # unconfirmed messages in flight per bare connection
CORES = os.cpu_count() or 2
DEFAULT_ROWS = int(os.environ.get("NSB_BENCH_MIGRATE_ROWS", "1000000"))
DEFAULT_PREVIEW_ROWS = int(os.environ.get("NSB_BENCH_PREVIEW_ROWS", "10000000"))
DEFAULT_PUBLISHERS = (1, 2, 4)
RUN_TARGET_SECONDS, CEILING_TARGET, PREVIEW_TARGET = 90, 0.8, 2.0
BIN = Path(sys.executable).parent


def count(text: str) -> int:
    return int(text.replace("_", "").replace(",", ""))


def arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench migrate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=count, default=DEFAULT_ROWS, help="timeouts to run (default %(default)s)")
    parser.add_argument("--preview-rows", type=count, default=DEFAULT_PREVIEW_ROWS,
                        help="rows to preview from PostgreSQL and Parquet (default %(default)s)")  # fmt: skip
    parser.add_argument("--publishers", default=",".join(map(str, DEFAULT_PUBLISHERS)),
                        help="parallel bare publishers to measure for the ceiling (default %(default)s)")  # fmt: skip
    parser.add_argument("--batch-size", type=count, help="the run's --batch-size (default: the command's own)")
    parser.add_argument("--skip-local", action="store_true", help="no end-to-end run in local mode")
    parser.add_argument("--skip-cluster", action="store_true", help="no end-to-end run on the standalone cluster")
    parser.add_argument("--skip-run", action="store_true", help="neither ceiling nor end-to-end runs")
    parser.add_argument("--skip-preview", action="store_true", help="no preview comparison")
    options = parser.parse_args(argv)
    try:
        options.publishers = sorted({count(item) for item in options.publishers.split(",")})
    except ValueError:
        parser.error(f"--publishers {options.publishers!r}: expected counts separated by commas, like 1,2,4")
    if not options.publishers or min(options.publishers) < 1 or options.rows < 1 or options.preview_rows < 1:
        parser.error("--rows, --preview-rows and every --publishers count must be at least 1")
    return options


# --- the data ----------------------------------------------------------------------------------------------------


def fill_timeouts(dsn: str, table: str, rows: int) -> float:
    """N SQL-persistence timeouts due 1 hour to 30 days out (first levels 11..21), made inside PostgreSQL."""
    began = time.perf_counter()
    with psycopg.connect(dsn) as connection:
        connection.execute(
            f"""create table {table} ("Id" uuid not null primary key, "Destination" character varying(200),
            "SagaId" uuid, "State" bytea, "Time" timestamp, "Headers" text, "PersistenceVersion" varchar(23))"""
        )
        endpoints = "array[" + ",".join(f"'{name}'" for name in ENDPOINTS) + "]"
        connection.execute(
            f"""insert into {table} select gen_random_uuid(), ({endpoints})[1 + g % {len(ENDPOINTS)}],
            gen_random_uuid(), convert_to('{{"orderId": ' || g || ', "note": "deadline"}}', 'UTF8'),
            (now() at time zone 'utc') + (3600 + (g::bigint * 7919) % (30 * 86400)) * interval '1 second',
            jsonb_pretty(jsonb_build_object('NServiceBus.MessageId', gen_random_uuid()::text,
              'NServiceBus.ContentType', 'application/json',
              'NServiceBus.EnclosedMessageTypes', 'Bench.OrderDeadline, Bench, Version=1.0.0.0',
              'NServiceBus.ConversationId', gen_random_uuid()::text)), '6.6.5'
            from generate_series(1, {rows}) g"""
        )
        connection.execute(f'create index on {table} ("Time")')
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(f"vacuum analyze {table}")
    return time.perf_counter() - began


def read_rows(dsn: str, table: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as connection:
        return connection.execute(
            f'select "Id"::text, "Destination", "State", "Time", "Headers" from {table}'
        ).fetchall()


def shares_of(rows: list[tuple[Any, ...]], publishers: int) -> list[list[tuple[Any, ...]]]:
    """Contiguous ranges of the table's rows (its due times mixed: many level queues at once), one per publisher."""
    size = -(-len(rows) // publishers)
    return [rows[i : i + size] for i in range(0, len(rows), size)]


# --- the bare publishers -----------------------------------------------------------------------------------------


def _bare_publisher(amqp_url: str, rows: list[tuple[Any, ...]], start: Any, done: Any) -> None:
    """Publish pre-built messages with mandatory + confirms, a sliding window of WINDOW unconfirmed."""
    now = now_micros()
    messages = []
    for ident, destination, state, due, headers in rows:
        message = rabbitmq_message(ident, destination, state, json.loads(headers),
                                   remaining_delay(to_micros(due), now), Generation.V2)  # fmt: skip
        messages.append((message.exchange, message.routing_key, message.body, basic_properties(message)))
    state_: dict[str, Any] = {"next": 0, "tag": 0, "unconfirmed": set(), "returned": 0, "began": 0.0}

    def publish_more(channel: Any) -> None:
        while len(state_["unconfirmed"]) < WINDOW and state_["next"] < len(messages):
            exchange, key, body, properties = messages[state_["next"]]
            channel.basic_publish(exchange, key, body, properties, mandatory=True)
            state_["next"] += 1
            state_["tag"] += 1
            state_["unconfirmed"].add(state_["tag"])

    def on_confirm(frame: Any) -> None:
        tag = frame.method.delivery_tag
        if frame.method.multiple:
            state_["unconfirmed"] = {t for t in state_["unconfirmed"] if t > tag}
        else:
            state_["unconfirmed"].discard(tag)
        if state_["next"] == len(messages) and not state_["unconfirmed"]:
            done.put((state_["began"], time.time(), state_["returned"]))
            connection.close()
        elif len(state_["unconfirmed"]) < WINDOW // 2:
            publish_more(channel_holder[0])

    channel_holder: list[Any] = []

    def on_channel(channel: Any) -> None:
        channel_holder.append(channel)
        channel.add_on_return_callback(lambda *_: state_.__setitem__("returned", state_["returned"] + 1))

        def confirmed(_frame: Any) -> None:
            start.wait()
            state_["began"] = time.time()
            publish_more(channel)

        channel.confirm_delivery(on_confirm, callback=confirmed)

    connection = SelectConnection(
        pika.URLParameters(amqp_url),
        on_open_callback=lambda c: c.channel(on_open_callback=on_channel),
        on_close_callback=lambda c, reason: c.ioloop.stop(),
    )
    connection.ioloop.start()


@dataclass
class Publishing:
    publishers: int
    seconds: float  # first publish to last confirm
    messages: int
    returned: int
    broker_cpu: float  # CPU seconds of the broker meanwhile
    machine_cpu: float  # busy CPU seconds of the whole machine meanwhile (other jobs included)

    @property
    def rate(self) -> float:
        return self.messages / self.seconds


def bare_publish(broker: LocalRabbitMq, shares: list[list[tuple[Any, ...]]]) -> Publishing:
    """One process per share, each its own connection; timed from the first publish to the last confirm."""
    context = multiprocessing.get_context("fork")
    start, done = context.Barrier(len(shares) + 1), context.Queue()
    workers = [context.Process(target=_bare_publisher, args=(broker.amqp_url, share, start, done)) for share in shares]
    for worker in workers:
        worker.start()
    start.wait()  # every worker has built its messages and opened its confirm channel
    broker_before, machine_before = broker_cpu(broker), machine_cpu_seconds()[0]
    results = [done.get(timeout=3600) for _ in workers]
    broker_used, machine_used = broker_cpu(broker) - broker_before, machine_cpu_seconds()[0] - machine_before
    for worker in workers:
        worker.join(60)
    seconds = max(r[1] for r in results) - min(r[0] for r in results)
    messages = sum(len(share) for share in shares)
    return Publishing(len(shares), seconds, messages, sum(r[2] for r in results), broker_used, machine_used)


def purge_delay_queues(broker: LocalRabbitMq) -> None:
    for level in range(LEVEL_COUNT):
        name = delay_level_name(level, Generation.V2)
        requests.delete(f"{broker.management_url}/api/queues/%2F/{name}/contents", auth=("guest", "guest"), timeout=120)


def delayed_count(broker: LocalRabbitMq) -> int:
    """Messages waiting in the 28 level queues (passive declares: exact, unlike the management stats)."""
    connection = pika.BlockingConnection(pika.URLParameters(broker.amqp_url))
    try:
        channel = connection.channel()
        return sum(
            channel.queue_declare(delay_level_name(level, Generation.V2), passive=True).method.message_count
            for level in range(LEVEL_COUNT)
        )
    finally:
        connection.close()


def broker_cpu(broker: LocalRabbitMq) -> float:
    assert broker.server is not None
    return tree_cpu_seconds(broker.server.pid)


def postgres_cpu(postgres: LocalPostgres) -> float:
    return tree_cpu_seconds(int((postgres.data_dir / "postmaster.pid").read_text().split()[0]))


def measure_ceiling(broker: LocalRabbitMq, rows: list[tuple[Any, ...]], counts: list[int]) -> dict[int, Publishing]:
    results = {}
    for publishers in counts:
        result = bare_publish(broker, shares_of(rows, publishers))
        waiting = delayed_count(broker)
        assert result.returned == 0 and waiting == len(rows), f"{result.returned} returned, {waiting} delayed"
        purge_delay_queues(broker)
        results[publishers] = result
        print(
            f"bare  {publishers} publisher{'s' if publishers > 1 else ' '}  {len(rows):>10,} messages  "
            f"{result.seconds:6.1f} s  {result.rate:>8,.0f} msg/s  broker CPU {result.broker_cpu:5.1f} s = "
            f"{result.broker_cpu * 100_000 / len(rows):.2f} s per 100k, {result.broker_cpu / result.seconds:.2f} "
            f"cores; machine busy {result.machine_cpu / (result.seconds * CORES):.0%} ({load()})",
            flush=True,
        )
    return results


# --- end to end --------------------------------------------------------------------------------------------------


@dataclass
class EndToEnd:
    where: str
    rows: int
    seconds: float
    phases: dict[str, float]
    cpu: dict[str, float] = field(default_factory=dict)  # party -> CPU seconds during the run
    load: str = ""

    @property
    def rate(self) -> float:
        return self.rows / self.seconds


def run_line_phases(output: str) -> dict[str, float]:
    """``run … completed in 98.1 s (checks 0.2 s, hide 4.4 s, …)`` -> {"checks": 0.2, "hide": 4.4, …}."""
    match = re.search(r"completed in [\d.]+ s \(([^)]*)\)", output)
    if not match:
        raise SystemExit(f"no completed run in the output:\n{output[-3000:]}")
    phases = (part.rsplit(" ", 2) for part in match.group(1).split(", "))
    return {name.strip(): float(value) for name, value, _unit in phases}


def _spark_log_line(line: str) -> bool:
    words = line.split(" ", 3)
    return len(words) > 2 and words[2] in ("INFO", "WARN", "DEBUG")


@dataclass
class Command:
    seconds: float
    output: str  # stdout without Spark's log lines
    cpu: float  # CPU seconds of the command's processes and of ``watch``'s trees while it ran


def timed_command(
    command: list[str], what: str, env: dict[str, str] | None = None, watch: tuple[int, ...] = ()
) -> Command:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable, "COLUMNS": "200",
           **(env or {})}  # fmt: skip
    began = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with TreeSampler([process.pid, *watch]) as sampler:
        stdout, stderr = process.communicate()
    seconds = time.perf_counter() - began
    if process.returncode:
        raise SystemExit(f"{what} failed ({process.returncode}):\n{stdout[-3000:]}\n{stderr[-3000:]}")
    output = "\n".join(line for line in stdout.splitlines() if not _spark_log_line(line))
    return Command(seconds, output, sampler.seconds)


def cli(*arguments: str) -> Command:
    """``nsb-delays migrate …`` as an operator runs it: its own process, JVM start included."""
    command = [sys.executable, "-m", "nsb_delays.infra.cli", "migrate", *arguments]
    return timed_command(command, f"migrate {arguments[0]}")


def submit(cluster: LocalSparkCluster, package: Path, *arguments: str) -> Command:
    """The README's cluster command: spark-submit in client mode, the JDBC driver in --jars, the package zip in
    --py-files, the executors' Python (only pipeline/executor-requirements.txt) named by spark.pyspark.python."""
    from nsb_delays.infra import spark_job

    settings = {"spark.pyspark.python": str(cluster.executor_python), "spark.pyspark.driver.python": sys.executable,
                "spark.ui.enabled": "false"}  # fmt: skip
    command = [
        str(BIN / "spark-submit"), "--master", cluster.master_url, "--deploy-mode", "client",
        "--jars", str(POSTGRES_JDBC_JAR), "--py-files", str(package),
        *(item for key, value in settings.items() for item in ("--conf", f"{key}={value}")),
        str(spark_job.__file__), *arguments,
    ]  # fmt: skip
    path = {"PATH": f"{BIN}:{os.environ['PATH']}"}
    daemons = tuple(process.pid for process in cluster.processes)  # master and workers: the executors are below them
    return timed_command(command, f"spark-submit {arguments[0]}", env=path, watch=daemons)


def end_to_end(
    where: str,
    postgres: LocalPostgres,
    broker: LocalRabbitMq,
    options: argparse.Namespace,
    cluster: LocalSparkCluster | None = None,
) -> EndToEnd:
    rows = options.rows
    endpoint = RUN_ENDPOINTS[where]
    table = sql_persistence_layout(endpoint, "postgresql").table
    print(f"filled {rows:,} timeouts into {table} in {fill_timeouts(postgres.dsn, table, rows):.1f} s", flush=True)
    arguments = [
        "run", "--source-jdbc", f"{postgres.jdbc_url}?user={postgres.user}", "--endpoint", endpoint,
        "--amqp-url", broker.amqp_url, "--management-url", broker.management_url, "--no-progress",
        *(["--batch-size", str(options.batch_size)] if options.batch_size else []),
    ]  # fmt: skip
    package = Path(tempfile.mkdtemp(prefix="nsb-bench-ship-")) / "nsb_delays.zip"
    if cluster is not None:
        subprocess.run([sys.executable, "-m", "nsb_delays.infra.spark_job", "--py-files", str(package)], check=True,
                       capture_output=True)  # fmt: skip

    def cpu() -> dict[str, float]:
        return {"broker": broker_cpu(broker), "PostgreSQL": postgres_cpu(postgres), "machine": machine_cpu_seconds()[0]}

    before = cpu()
    if cluster is None:
        command = cli(*arguments, "--master", f"local[{CORES}]")
    else:
        command = submit(cluster, package, *arguments)
    after = cpu()
    shutil.rmtree(package.parent, ignore_errors=True)
    print(command.output.strip(), flush=True)
    waiting = delayed_count(broker)
    assert waiting == rows, f"{waiting} of {rows} messages are in the delay queues"
    purge_delay_queues(broker)
    used = {party: after[party] - before[party] for party in before} | {"Spark": command.cpu}
    return EndToEnd(where, rows, command.seconds, run_line_phases(command.output), used, load())


def print_end_to_end(result: EndToEnd, ceiling: dict[int, Publishing]) -> None:
    one, best = ceiling.get(1), max(ceiling.values(), key=lambda p: p.rate)
    ratios = [f"{result.rate / one.rate:.2f}x one publisher" if one else "", f"{result.rate / best.rate:.2f}x the "
              f"ceiling ({best.publishers} publishers)"]  # fmt: skip
    print(
        f"run   {result.where:<7} {result.rows:>10,} timeouts  {result.seconds:6.1f} s  {result.rate:>8,.0f} rows/s  "
        f"{', '.join(r for r in ratios if r)}  ({result.load})"
    )
    named = sum(result.phases.values())
    phases = ", ".join(f"{name} {seconds:.1f}" for name, seconds in result.phases.items())
    print(f"      phases (s): {phases}; outside the job (Python + JVM start/stop) {result.seconds - named:.1f}")
    cpu = result.cpu
    broker_share = cpu["broker"] * 100_000 / result.rows
    print(
        f"      CPU s during the run: broker {cpu['broker']:.1f} ({broker_share:.2f} per 100k), PostgreSQL "
        f"{cpu['PostgreSQL']:.1f}, Spark (driver, JVMs, Python workers) {cpu['Spark']:.1f}; whole machine "
        f"{cpu['machine']:.1f} of {result.seconds * CORES:.1f} ({cpu['machine'] / (result.seconds * CORES):.0%} busy)"
    )


def bench_run(options: argparse.Namespace) -> None:
    rows = options.rows
    with LocalPostgres() as postgres, LocalRabbitMq() as broker:
        # deliveryLimitPolicies off: Debian's RabbitMQ 3.10 refuses their apply-to 'quorum_queues'
        rabbitmq = {"endpoints": ENDPOINTS, "protectDelayQueues": False, "deliveryLimitPolicies": False}
        import_definitions(
            ManagementApi(broker.management_url, broker.username, broker.password),
            parse_stack_config({"rabbitmq": rabbitmq}),
        )
        ceiling_table = sql_persistence_layout("Bench.Ceiling", "postgresql").table
        print(f"filled {rows:,} timeouts in {fill_timeouts(postgres.dsn, ceiling_table, rows):.1f} s", flush=True)
        print(f"--- ceiling: bare confirm-publishers, the run's messages ({load()})", flush=True)
        ceiling = measure_ceiling(broker, read_rows(postgres.dsn, ceiling_table), options.publishers)
        best = max(ceiling.values(), key=lambda p: p.rate)
        print(f"ceiling: {best.rate:,.0f} msg/s with {best.publishers} publishers", flush=True)
        results = []
        if not options.skip_local:
            print(f"--- end to end, local[{CORES}] ({load()})", flush=True)
            results.append(end_to_end("local", postgres, broker, options))
            print_end_to_end(results[-1], ceiling)
        if not options.skip_cluster:
            try:
                with LocalSparkCluster(workers=2) as cluster:
                    print(f"--- end to end, standalone cluster {cluster.master_url}, 2 one-core workers ({load()})")
                    results.append(end_to_end("cluster", postgres, broker, options, cluster))
                    print_end_to_end(results[-1], ceiling)
            except ServiceUnavailable as error:
                print(f"--- no standalone cluster run: {error}")
        print("\n--- summary")
        for publishing in ceiling.values():
            ratio = publishing.rate / best.rate
            per_100k = publishing.broker_cpu * 100_000 / rows
            print(f"bare  {publishing.publishers} publisher(s)  {publishing.seconds:6.1f} s  {publishing.rate:>8,.0f} "
                  f"msg/s  {ratio:.2f}x the ceiling  broker CPU {per_100k:.2f} s per 100k")  # fmt: skip
        for result in results:
            print_end_to_end(result, ceiling)
        print(f"targets: run ≤ {RUN_TARGET_SECONDS} s and ≥ {CEILING_TARGET}x the ceiling (for 1,000,000 rows)")


# --- preview -----------------------------------------------------------------------------------------------------


def export_as_parquet(postgres: LocalPostgres, table_endpoint: str, path: Path) -> tuple[float, int]:
    """The table's rows written as a RavenDB-style Parquet export, read through the pipeline's own JDBC reader;
    returns the seconds and the number of read partitions it used."""
    from pyspark.sql import functions as F

    from nsb_delays.pipeline.sources import JdbcSource, read_jdbc
    from nsb_delays.pipeline.spark import spark_session

    spark = spark_session(f"local[{CORES}]")
    try:
        source = JdbcSource(postgres.jdbc_url, sql_persistence_layout(table_endpoint, "postgresql"), postgres.user)
        began = time.perf_counter()
        frame = read_jdbc(spark, source)
        partitions = frame.rdd.getNumPartitions()
        frame.select(*(F.col(name).alias(EXPORT_COLUMNS[name]) for name in CANONICAL_COLUMNS)).write.parquet(str(path))
        return time.perf_counter() - began, partitions
    finally:
        spark.stop()


def bench_preview(rows: int) -> None:
    directory = Path(tempfile.mkdtemp(prefix="nsb-bench-preview-"))
    try:
        with LocalPostgres() as postgres:
            table = sql_persistence_layout(PREVIEW_ENDPOINT, "postgresql").table
            print(
                f"filled {rows:,} timeouts into {table} in {fill_timeouts(postgres.dsn, table, rows):.1f} s", flush=True
            )
            seconds, partitions = export_as_parquet(postgres, PREVIEW_ENDPOINT, directory / "timeouts.parquet")
            print(f"wrote them as Parquet in {seconds:.1f} s (read in {partitions} JDBC range reads)", flush=True)
            parquet = cli(
                "preview", "--source-path", str(directory / "timeouts.parquet"),
                "--report-dir", str(directory / "parquet-report"), "--master", f"local[{CORES}]",
            )  # fmt: skip
            parquet_load = load()
            jdbc = cli(
                "preview", "--source-jdbc", f"{postgres.jdbc_url}?user={postgres.user}", "--endpoint", PREVIEW_ENDPOINT,
                "--report-dir", str(directory / "jdbc-report"), "--master", f"local[{CORES}]",
            )  # fmt: skip
            jdbc_load = load()
        for output in (parquet.output, jdbc.output):
            assert f"{rows:,}" in output, output
        assert (directory / "parquet-report" / "preview.html").exists()
        assert (directory / "jdbc-report" / "preview.html").exists()
        print(
            f"preview Parquet     {rows:>10,} rows  {parquet.seconds:6.1f} s  Spark CPU {parquet.cpu:.0f} s  "
            f"({parquet_load})"
        )
        print(
            f"preview PostgreSQL  {rows:>10,} rows  {jdbc.seconds:6.1f} s  Spark CPU {jdbc.cpu:.0f} s  "
            f"{jdbc.seconds / parquet.seconds:.2f}x Parquet  ({jdbc_load}; target ≤ {PREVIEW_TARGET}x)"
        )
        print("(both include the JVM start and the HTML/PNG report)")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    options = arguments(argv or [])
    if not options.skip_run:
        bench_run(options)
    if not options.skip_preview:
        bench_preview(options.preview_rows)


if __name__ == "__main__":
    main(sys.argv[1:])
