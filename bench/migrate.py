"""Migration benchmark: ``migrate run`` of N stored timeouts PostgreSQL -> RabbitMQ v2, against a bare
pika confirm-publisher sending the same N messages to the same exchanges; then ``migrate preview``
of M rows from Parquet. Targets: run ≤ 3 min and ≥ 0.7x the bare publisher for N = 1,000,000;
preview ≤ 60 s (report included) for M = 10,000,000.

Sizes: ``NSB_BENCH_MIGRATE_ROWS`` (default 1,000,000), ``NSB_BENCH_PREVIEW_ROWS`` (10,000,000), or
``python -m bench.migrate ROWS [PREVIEW_ROWS]``. Private PostgreSQL and RabbitMQ are started on
127.0.0.1 and stopped at the end. Both commands run as an operator would run them (a subprocess of
the ``nsb-delays`` CLI, JVM start included); the bare publisher uses as many connections as Spark
has dispatch tasks (one per core) and is timed from its first publish to its last confirm. It runs
twice: in the run's own batch order (read back from its ledger, a contiguous range per connection
as the run's partitions) and in table order.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pika
import psycopg
import requests
from pika.adapters.select_connection import SelectConnection

from nsb_delays.brokers.engine_emulation import PulumiEngineEmulation
from nsb_delays.brokers.local import LocalRabbitMq
from nsb_delays.brokers.messages import basic_properties, rabbitmq_message
from nsb_delays.components.model import rabbitmq as rmq
from nsb_delays.infra.config import parse_stack_config
from nsb_delays.infra.recording import record_stack
from nsb_delays.pipeline.delays import now_micros, remaining_delay, to_micros
from nsb_delays.pipeline.layouts import sql_persistence_layout
from nsb_delays.pipeline.ledger import STATE_TABLE
from tests.services import LocalPostgres

ENDPOINTS = [f"Bench{i}" for i in range(10)]
SOURCE_ENDPOINT = "Bench.Orders"
WINDOW = 1024  # unconfirmed messages in flight per bare connection
CORES = os.cpu_count() or 2


def sizes() -> tuple[int, int]:
    args = [int(a.replace("_", "")) for a in sys.argv[1:] if a.replace("_", "").isdigit()]
    rows = args[0] if args else int(os.environ.get("NSB_BENCH_MIGRATE_ROWS", "1000000"))
    preview_rows = args[1] if len(args) > 1 else int(os.environ.get("NSB_BENCH_PREVIEW_ROWS", "10000000"))
    return rows, preview_rows


def fill_timeouts(dsn: str, table: str, rows: int) -> None:
    """N SQL-persistence timeouts due 1 hour to 30 days out (first levels 11..21), made inside PostgreSQL."""
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
        connection.execute(f"analyze {table}")


def read_rows(dsn: str, table: str, order: str = "") -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as connection:
        return connection.execute(
            f'select "Id"::text, "Destination", "State", "Time", "Headers" from {table}{order}'
        ).fetchall()


def in_run_order(rows: list[tuple[Any, ...]], connections: int) -> list[list[tuple[Any, ...]]]:
    """Rows in batch order split in contiguous ranges, as the run's partitions take them."""
    size = -(-len(rows) // connections)
    return [rows[i : i + size] for i in range(0, len(rows), size)]


def in_table_order(rows: list[tuple[Any, ...]], connections: int) -> list[list[tuple[Any, ...]]]:
    """Heap order dealt round-robin: due times (hence level queues) mixed, the broker's easiest load."""
    return [rows[i::connections] for i in range(connections)]


def _bare_publisher(amqp_url: str, rows: list[tuple[Any, ...]], start: Any, done: Any) -> None:
    """Publish pre-built messages with mandatory + confirms, a sliding window of WINDOW unconfirmed."""
    import json

    now = now_micros()
    messages = []
    for ident, destination, state, due, headers in rows:
        message = rabbitmq_message(ident, destination, state, json.loads(headers),
                                   remaining_delay(to_micros(due), now))  # fmt: skip
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


def bare_publish(amqp_url: str, shares: list[list[tuple[Any, ...]]]) -> tuple[float, int]:
    """One process per share; wall seconds from the first publish to the last confirm, and returned count."""
    context = multiprocessing.get_context("fork")
    start, done = context.Barrier(len(shares) + 1), context.Queue()
    workers = [context.Process(target=_bare_publisher, args=(amqp_url, share, start, done)) for share in shares]
    for worker in workers:
        worker.start()
    start.wait()  # every worker has built its messages and opened its confirm channel
    results = [done.get(timeout=3600) for _ in workers]
    for worker in workers:
        worker.join(60)
    began = min(r[0] for r in results)
    ended = max(r[1] for r in results)
    return ended - began, sum(r[2] for r in results)


def purge_delay_queues(broker: LocalRabbitMq) -> int:
    total = 0
    for level in range(rmq.LEVEL_COUNT):
        name = rmq.delay_level_name(level)
        response = requests.get(f"{broker.management_url}/api/queues/%2F/{name}", auth=("guest", "guest"), timeout=30)
        total += response.json().get("messages", 0) or 0
        requests.delete(f"{broker.management_url}/api/queues/%2F/{name}/contents", auth=("guest", "guest"), timeout=60)
    return total


def delayed_count(broker: LocalRabbitMq) -> int:
    """Messages waiting in the 28 level queues (passive declares: exact, unlike the management stats)."""
    connection = pika.BlockingConnection(pika.URLParameters(broker.amqp_url))
    try:
        channel = connection.channel()
        return sum(
            channel.queue_declare(rmq.delay_level_name(level), passive=True).method.message_count
            for level in range(rmq.LEVEL_COUNT)
        )
    finally:
        connection.close()


def cli(*arguments: str) -> tuple[float, str]:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    began = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "nsb_delays.infra.cli", "migrate", *arguments], env=env, capture_output=True, text=True
    )
    seconds = time.perf_counter() - began
    if result.returncode:
        raise SystemExit(f"migrate {arguments[0]} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return seconds, result.stdout


def bench_run(rows: int) -> None:
    with LocalPostgres() as postgres, LocalRabbitMq() as broker:
        # deliveryLimitPolicies off: Debian's RabbitMQ 3.10 refuses their apply-to 'quorum_queues'
        rabbitmq = {"endpoints": ENDPOINTS, "protectDelayQueues": False, "deliveryLimitPolicies": False}
        config = parse_stack_config({"rabbitmq": rabbitmq})
        PulumiEngineEmulation.connect(broker.management_url).up(record_stack(config))
        table = sql_persistence_layout(SOURCE_ENDPOINT, "postgresql").table
        began = time.perf_counter()
        fill_timeouts(postgres.dsn, table, rows)
        print(f"filled {rows:,} timeouts into {table} in {time.perf_counter() - began:.1f} s", flush=True)
        snapshot = read_rows(postgres.dsn, table)

        run_seconds, output = cli(
            "run", "--source-jdbc", f"{postgres.jdbc_url}?user={postgres.user}", "--endpoint", SOURCE_ENDPOINT,
            "--rabbitmq-url", broker.amqp_url, "--rabbitmq-management-url", broker.management_url,
            "--no-progress", "--master", f"local[{CORES}]",
        )  # fmt: skip
        print(output.strip(), flush=True)
        migrated = delayed_count(broker)
        assert migrated == rows, f"{migrated} of {rows} messages are in the delay queues"
        purge_delay_queues(broker)

        (migration_table,) = (
            psycopg.connect(postgres.dsn).execute(f'select "MigrationTable" from "{STATE_TABLE}"').fetchone()
        )  # the run's own batch order, read back from its ledger
        batch_ordered = read_rows(postgres.dsn, f'"{migration_table}"', ' order by "BatchNumber"')
        bare = {}
        for order, shares in (
            ("run order", in_run_order(batch_ordered, CORES)),
            ("table order", in_table_order(snapshot, CORES)),
        ):
            bare[order], returned = bare_publish(broker.amqp_url, shares)
            assert returned == 0 and delayed_count(broker) == rows
            purge_delay_queues(broker)
        print(f"run   {rows:>10,} timeouts  {run_seconds:7.1f} s  {rows / run_seconds:>9,.0f} rows/s  (end to end)")
        for order, seconds in bare.items():
            print(
                f"bare  {rows:>10,} messages  {seconds:7.1f} s  {rows / seconds:>9,.0f} msg/s  ({CORES} connections, "
                f"{order})  ratio {seconds / run_seconds:.2f}"
            )
        print("targets: run ≤ 180 s; ratio ≥ 0.70 (ratio = run rows/s ÷ bare msg/s)")


def write_parquet(path: Path, rows: int) -> None:
    from pyspark.sql import functions as F

    from nsb_delays.pipeline.spark import spark_session

    spark = spark_session(f"local[{CORES}]")
    now = now_micros()
    frame = spark.range(rows).select(
        F.expr("uuid()").alias("Id"),
        F.concat(F.lit("Endpoint"), (F.col("id") % 200).cast("string")).alias("Destination"),
        F.encode(F.concat(F.lit('{"orderId": '), F.col("id").cast("string"), F.lit("}")), "UTF-8").alias("State"),
        F.timestamp_micros(F.lit(now) + ((F.col("id") * 7919) % (2**29) - 3600) * 1_000_000).alias("Time"),
        F.concat(
            F.lit('{"NServiceBus.MessageId": "'), F.expr("uuid()"),
            F.lit('", "NServiceBus.ContentType": "application/json"}'),
        ).alias("Headers"),
        F.lit("Bench").alias("OwningTimeoutManager"),
    )  # fmt: skip
    frame.write.mode("overwrite").parquet(str(path))
    spark.stop()


def bench_preview(rows: int) -> None:
    directory = Path(tempfile.mkdtemp(prefix="nsb-bench-preview-"))
    try:
        began = time.perf_counter()
        write_parquet(directory / "timeouts.parquet", rows)
        print(f"wrote {rows:,} exported timeouts as Parquet in {time.perf_counter() - began:.1f} s", flush=True)
        seconds, output = cli(
            "preview", "--source-path", str(directory / "timeouts.parquet"), "--report-dir", str(directory / "report"),
            "--master", f"local[{CORES}]",
        )  # fmt: skip
        assert (directory / "report" / "preview.html").exists()
        print(output.strip().splitlines()[0])
        print(f"preview {rows:>10,} rows  {seconds:6.1f} s  (JVM start and HTML/PNG report incl.; target ≤ 60 s)")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    rows, preview_rows = sizes()
    bench_run(rows)
    bench_preview(preview_rows)


if __name__ == "__main__":
    main()
