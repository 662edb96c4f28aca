"""``delays migrate`` benchmark: N in-flight messages v1 -> v2 against NServiceBus's own loop, in the same run.

Two vhosts of one private RabbitMQ 3.10 get the v1 and v2 graphs (the definitions import, as the demo provisions) and
ten endpoints, and the same N delayed messages in their v1 levels (due 1 hour to 30 days out: levels
11..21, the NServiceBus headers, TimeSent). Then:

- baseline: the NServiceBus tool's loop (``DelayCommandHelpers.TransferQueue``) in pika on one
  connection: per level the message count, then ``basic.get``, publish on a confirm channel and wait
  for the confirm, ack, one message at a time (the same model functions compute the new key);
- ``nsb-delays delays migrate`` as an operator runs it (a CLI subprocess: start-up and the preflight
  that reads every level once are included), timed end to end; its own "moved … msg/s" line (the move
  alone) is printed as well.

Prints both rates and the ratio (target >= 10x), the preflight alone (a ``--dry-run``: start-up, every
level read once and handed back), the CPU each costs per message (the broker's processes and the
client's), which the load of a shared machine does not distort, and the rate that CPU allows at best on
this machine's cores (both busy, nothing else running). Last, the broker's own share of any move, measured
alone on a third copy: every v1 message taken (consume, ``multiple`` acks) and the same messages put into
the v2 graph (publish + confirm), and the rate that share alone allows with a client that costs nothing.
N: ``NSB_BENCH_DELAYS_MESSAGES`` (default 100,000) or ``python -m bench.delays N``; the broker is
3.10, or 4.3 / 4.0 with ``NSB_BENCH_RABBITMQ=4.3`` / ``4.0``. Figures are what
this run saw on this (shared) machine, never asserted.
"""

from __future__ import annotations

import copy
import os
import resource
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta

import pika

from nsb_delays.brokers.confirms import ConfirmPublisher, OutgoingMessage
from nsb_delays.brokers.management import ManagementApi
from nsb_delays.components.model import in_flight
from nsb_delays.components.model.rabbitmq.names import (
    LEVEL_COUNT,
    MAX_LEVEL,
    Generation,
    delay_level_name,
    delivery_exchange_name,
    endpoint_binding_key,
)
from nsb_delays.components.model.rabbitmq.routing import DELAY_HEADER, first_exchange, routing_key
from nsb_delays.infra.commands.demo.provisioning import import_definitions
from nsb_delays.stack.config import parse_stack_config
from servers.rabbitmq import LocalRabbitMq, broker_of

from .measures import load, tree_cpu_seconds

ENDPOINTS = [f"Bench{i}" for i in range(10)]


def size() -> int:
    args = [int(a.replace("_", "")) for a in sys.argv[1:] if a.replace("_", "").isdigit()]
    return args[0] if args else int(os.environ.get("NSB_BENCH_DELAYS_MESSAGES", "100000"))


def prepare(broker: LocalRabbitMq, vhost: str, count: int) -> pika.URLParameters:
    """Both graphs, the endpoints, and ``count`` messages in v1 as NServiceBus endpoints send them."""
    api = ManagementApi(broker.management_url)
    version = str(api.overview()["rabbitmq_version"])
    for generation, endpoints in (("v1", []), ("v2", ENDPOINTS)):
        section = {"vhost": vhost, "generation": generation, "brokerVersion": version, "endpoints": endpoints}
        import_definitions(api, parse_stack_config({"rabbitmq": section}))
    parameters = pika.URLParameters(broker.vhost_amqp_url(vhost))
    sent = datetime.now(UTC) - timedelta(minutes=5)
    messages = []
    for index in range(count):
        delay = 3600 + (index * 7919) % (30 * 86400)
        message_id = str(uuid.uuid4())
        headers = {
            "NServiceBus.MessageId": message_id,
            "NServiceBus.EnclosedMessageTypes": "Bench.OrderDeadline, Bench, Version=1.0.0.0",
            "NServiceBus.ContentType": "application/json",
            "NServiceBus.ConversationId": str(uuid.uuid4()),
            in_flight.TIME_SENT_HEADER: in_flight.format_time_sent(sent),
            DELAY_HEADER: delay,
        }
        properties = pika.BasicProperties(
            message_id=message_id, delivery_mode=2, headers=headers, content_type="application/json"
        )
        body = f'{{"orderId": {index}, "note": "deadline"}}'.encode()
        messages.append(
            OutgoingMessage(
                first_exchange(delay, Generation.V1),
                routing_key(delay, ENDPOINTS[index % 10]),
                body,
                properties,
            )
        )
    with ConfirmPublisher(parameters) as publisher:
        for start in range(0, count, 5000):
            publisher.publish(messages[start : start + 5000])
    return parameters


def broker_cpu_seconds(broker: LocalRabbitMq) -> float:
    """CPU time (user + system) of the broker's processes so far: what a move costs the broker."""
    assert broker.server is not None
    return tree_cpu_seconds(broker.server.pid)


def client_cpu_seconds() -> float:
    """CPU time of this process and its finished children (the CLI subprocess)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def waiting(parameters: pika.URLParameters, generation: Generation) -> int:
    connection = pika.BlockingConnection(parameters)
    try:
        channel = connection.channel()
        return sum(
            channel.queue_declare(delay_level_name(level, generation), passive=True).method.message_count
            for level in range(LEVEL_COUNT)
        )
    finally:
        connection.close()


def nservicebus_loop(parameters: pika.URLParameters) -> tuple[int, float]:
    """``TransferMessages(sourceIsV1: true, channel, channel, …)``: BasicGet, publish + confirm, ack."""
    connection = pika.BlockingConnection(parameters)
    channel = connection.channel()
    channel.confirm_delivery()  # basic_publish now returns when the broker confirmed
    bound: set[str] = set()
    moved = 0
    began = time.perf_counter()
    for level in range(MAX_LEVEL, -1, -1):
        queue = delay_level_name(level, Generation.V1)
        count = channel.queue_declare(queue, passive=True).method.message_count
        for _ in range(count):
            method, properties, body = channel.basic_get(queue, auto_ack=False)
            if method is None:
                break
            read = in_flight.read_delayed_message(method.routing_key, properties.headers, time.time_ns() // 1000)
            if isinstance(read, in_flight.Poison):
                channel.queue_declare(in_flight.MIGRATE_POISON_QUEUE, durable=True)
                channel.basic_publish("", in_flight.MIGRATE_POISON_QUEUE, body, properties)
                channel.basic_ack(method.delivery_tag)
                continue
            if read.destination not in bound:  # routingTopology.BindToDelayInfrastructure, once per destination
                channel.exchange_bind(
                    read.destination,
                    delivery_exchange_name(Generation.V2),
                    endpoint_binding_key(read.destination),
                )
                bound.add(read.destination)
            moved_properties = copy.copy(properties)
            moved_properties.headers = in_flight.republished_headers(properties.headers)
            channel.basic_publish(read.exchange(Generation.V2), read.routing_key(), body, moved_properties)
            channel.basic_ack(method.delivery_tag)
            moved += 1
    seconds = time.perf_counter() - began
    connection.close()
    return moved, seconds


def take_all(parameters: pika.URLParameters) -> list[OutgoingMessage]:
    """Every v1 message, consumed and acked (``multiple``, every 500), turned into the v2 message a move sends."""
    connection = pika.BlockingConnection(parameters)
    channel = connection.channel()
    channel.basic_qos(prefetch_count=2000)
    taken: list[OutgoingMessage] = []
    for level in range(MAX_LEVEL, -1, -1):
        queue = delay_level_name(level, Generation.V1)
        count = channel.queue_declare(queue, passive=True).method.message_count
        for got, (method, properties, body) in enumerate(channel.consume(queue), start=1) if count else ():
            read = in_flight.read_delayed_message(method.routing_key, properties.headers, time.time_ns() // 1000)
            assert isinstance(read, in_flight.DueMessage)
            properties.headers = in_flight.republished_headers(properties.headers)
            taken.append(OutgoingMessage(read.exchange(Generation.V2), read.routing_key(), body, properties))
            if got % 500 == 0 or got == count:
                channel.basic_ack(method.delivery_tag, multiple=True)
            if got == count:
                break
        channel.cancel()
    connection.close()
    return taken


def broker_share(broker: LocalRabbitMq, parameters: pika.URLParameters) -> tuple[float, float]:
    """The broker's CPU seconds for each half of any move, alone: taking the v1 messages, putting them into v2."""
    before = broker_cpu_seconds(broker)
    taken = take_all(parameters)
    consumed = broker_cpu_seconds(broker) - before
    before = broker_cpu_seconds(broker)
    with ConfirmPublisher(parameters) as publisher:
        for start in range(0, len(taken), 5000):
            publisher.publish(taken[start : start + 5000])
    published = broker_cpu_seconds(broker) - before
    assert waiting(parameters, Generation.V1) == 0 and waiting(parameters, Generation.V2) == len(taken)
    return consumed, published


def delays_migrate(broker: LocalRabbitMq, vhost: str, *options: str) -> tuple[float, str]:
    """``delays migrate`` as a subprocess: its wall time and its last line (``moved …`` / ``dry run: …``)."""
    began = time.perf_counter()
    result = subprocess.run(
        [
            sys.executable, "-m", "nsb_delays.infra.cli", "delays", "migrate",
            "--management-url", broker.management_url, "--username", broker.username, "--password", broker.password,
            "--amqp-url", broker.amqp_url, "--vhost", vhost, "--no-progress", *options,
        ],
        capture_output=True,
        text=True,
    )  # fmt: skip
    seconds = time.perf_counter() - began
    if result.returncode:
        raise SystemExit(f"delays migrate failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    last_line = next(line for line in result.stdout.splitlines() if line.startswith(("moved ", "dry run:")))
    return seconds, last_line


def broker_under_test() -> LocalRabbitMq:
    """RabbitMQ 3.10 (Debian 12), or another the tests run (``NSB_BENCH_RABBITMQ=4.3``, ``4.0``: their chroots)."""
    return broker_of(os.environ.get("NSB_BENCH_RABBITMQ", "3.10"), "NSB_BENCH_RABBITMQ")()


def main() -> None:
    count = size()
    with broker_under_test() as broker:
        version = ManagementApi(broker.management_url).overview()["rabbitmq_version"]
        began = time.perf_counter()
        baseline_vhost, ours_vhost = prepare(broker, "baseline", count), prepare(broker, "ours", count)
        print(
            f"RabbitMQ {version}: {count:,} delayed messages in v1, twice, in {time.perf_counter() - began:.1f} s",
            flush=True,
        )

        broker_before, client_before = broker_cpu_seconds(broker), client_cpu_seconds()
        moved, baseline_seconds = nservicebus_loop(baseline_vhost)
        baseline_cpu = (broker_cpu_seconds(broker) - broker_before, client_cpu_seconds() - client_before)
        assert (
            moved == count
            and waiting(baseline_vhost, Generation.V1) == 0
            and waiting(baseline_vhost, Generation.V2) == count
        )
        # the preflight alone (start-up, every level read once and handed back, destinations checked): --dry-run
        broker_before, client_before = broker_cpu_seconds(broker), client_cpu_seconds()
        preflight_seconds, _dry_run_line = delays_migrate(broker, "ours", "--dry-run")
        preflight_cpu = (broker_cpu_seconds(broker) - broker_before, client_cpu_seconds() - client_before)
        broker_before, client_before = broker_cpu_seconds(broker), client_cpu_seconds()
        ours_seconds, moved_line = delays_migrate(broker, "ours")
        ours_cpu = (broker_cpu_seconds(broker) - broker_before, client_cpu_seconds() - client_before)
        assert waiting(ours_vhost, Generation.V1) == 0 and waiting(ours_vhost, Generation.V2) == count

        baseline_rate, ours_rate = count / baseline_seconds, count / ours_seconds
        print(
            f"NServiceBus loop  {count:>9,} messages  {baseline_seconds:7.1f} s  {baseline_rate:>8,.0f} msg/s  "
            "(basic.get, publish, confirm, ack)"
        )
        print(
            f"delays migrate    {count:>9,} messages  {ours_seconds:7.1f} s  {ours_rate:>8,.0f} msg/s  "
            "(CLI end to end: start-up, preflight, move)"
        )
        print(f"                  {moved_line}")
        print(f"                  its preflight alone (--dry-run, start-up included): {preflight_seconds:.1f} s")
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB on Linux: the largest child's
        print(f"                  its peak memory (largest CLI process, held deliveries included): {peak:.0f} MiB")
        for label, (broker_seconds, client_seconds) in (
            ("NServiceBus loop", baseline_cpu),
            ("delays migrate", ours_cpu),
            ("  its preflight", preflight_cpu),
        ):
            print(
                f"{label:<17} CPU per message: broker {1000 * broker_seconds / count:.2f} ms, "
                f"client {1000 * client_seconds / count:.2f} ms"
            )
        print(f"ratio {ours_rate / baseline_rate:.1f}x  (target >= 10x); {load()}")
        cpu_per_message = (ours_cpu[0] + ours_cpu[1]) / count
        cores = os.cpu_count()
        if cores is None:  # the floors below are per core (it was a TypeError on the division)
            raise RuntimeError("os.cpu_count() cannot tell this machine's cores: no CPU floor to report")
        print(
            f"CPU floor on {cores} cores: broker + client {1000 * cpu_per_message:.2f} ms per message -> at "
            f"most {cores / cpu_per_message:,.0f} msg/s with both cores busy and nothing else running "
            f"({cores / cpu_per_message / baseline_rate:.1f}x this baseline)"
        )
        consumed, published = broker_share(broker, prepare(broker, "share", count))
        share = (consumed + published) / count
        print(
            f"broker alone, whatever the client: consume + ack {1000 * consumed / count:.3f} ms, publish into v2 + "
            f"confirm {1000 * published / count:.3f} ms per message -> at most {cores / share:,.0f} msg/s "
            f"even with a client that costs nothing ({cores / share / baseline_rate:.1f}x this baseline)"
        )


if __name__ == "__main__":
    main()
