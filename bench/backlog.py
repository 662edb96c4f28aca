"""A million messages waiting: the v2 graph with a large backlog parked in it (RabbitMQ, one node).

Parks ``NSB_BENCH_BACKLOG`` messages (default 1,000,000; NServiceBus headers, a 200-byte body) with
delays spread log-uniformly from one hour to 2^28 − 1 s (8.5 years), so every level such a delay
enters (11..27) holds about a seventeenth of them; none moves during the run (level 11's TTL is
2,048 s). Then, in the same run:

(a) lateness p50/p99/max of a steady stream (``NSB_BENCH_RATE``/s for ``NSB_BENCH_SECONDS`` s,
    delays 1–16 s) beside the backlog, against the same stream published at the same time to a twin
    broker whose graph stays empty (same machine load for both; before parking, the two streams on
    two empty graphs show how alike the two brokers measure). Targets: p99 ≤ 100 ms and within 2×
    of the empty graph.
(b) broker memory (RSS of ``beam.smp``; the management API's memory breakdown) and disk (the node's
    data folder) before and after parking, per million parked messages.
(c) ``NSB_BENCH_BURST`` messages (default 100,000) all due in the same second (each batch published
    with the whole seconds left until that second): the time from that second until the last one
    arrives, as a rate, against plain publish→consume of the same messages (straight to the endpoint
    queues, same publisher, same consumer, measured just before the burst). Target: ≥ 0.5× the plain
    rate; then the same burst on the empty twin (does the backlog slow it, or the graph's hops?).
    A burst that has not fully arrived ``NSB_BENCH_BURST_PATIENCE`` s (300) after it was due is
    reported with the level queues still holding messages and how many their dead-letter workers hold.

Then, for each value in ``NSB_BENCH_DLX_PREFETCH`` (default ``128,512,2048``; the broker's default is 32)
the node restarts with ``dead_letter_worker_consumer_prefetch`` set in advanced.config (the rabbit
application setting read by ``rabbit_fifo_dlx_worker:handle_continue/2`` in 3.10.8 and 4.0.5; no
rabbitmq.conf key maps to it), the backlog still parked, and (a) and (c) are measured again.

Figures are printed with the machine's load average (the machine is shared), never asserted.
``NSB_BENCH_RABBITMQ=4.3`` (or ``4.0``) runs the tests' chroot of that RabbitMQ instead of Debian 12's 3.10.
A quick run (about 5 minutes): ``NSB_BENCH_BACKLOG=20000 NSB_BENCH_BURST=5000 NSB_BENCH_SECONDS=5
NSB_BENCH_DLX_PREFETCH=512 python -m bench backlog``; the full run takes about 40 minutes
(``NSB_BENCH_DLX_PREFETCH=2048``: 24 minutes at load 4–14 on 2 cores).
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

from nsb_delays.brokers.confirms import ConfirmPublisher
from nsb_delays.brokers.delivery import ArrivalCollector, queue_depths
from nsb_delays.brokers.management import ManagementApi, path_segment
from nsb_delays.brokers.messages import RabbitMqMessage, outgoing, rabbitmq_message
from nsb_delays.components.model.rabbitmq.graph import delay_levels
from nsb_delays.components.model.rabbitmq.names import Generation
from nsb_delays.components.model.rabbitmq.routing import MAX_DELAY_SECONDS, first_level
from nsb_delays.infra.render import render
from nsb_delays.stack.config import load_stack
from servers.rabbitmq import LocalRabbitMq, broker_of

from .broker import LATENESS_DELAYS, RATE_PER_SECOND, STEADY_SECONDS, Lateness, stream_lateness
from .measures import load

BACKLOG = int(os.environ.get("NSB_BENCH_BACKLOG", "1000000"))
BURST = int(os.environ.get("NSB_BENCH_BURST", "100000"))
DLX_PREFETCHES = [int(v) for v in os.environ.get("NSB_BENCH_DLX_PREFETCH", "128,512,2048").split(",") if v.strip()]
BROKER = os.environ.get("NSB_BENCH_RABBITMQ", "3.10")
DLX_PREFETCH_SETTING = "dead_letter_worker_consumer_prefetch"
DLX_PREFETCH_DEFAULT = 32  # rabbit's default in 3.10.8 and 4.0.5 (deps/rabbit/Makefile, BUILD.bazel)
SHORTEST_PARKED = 3600  # one hour
LONGEST_PARKED = MAX_DELAY_SECONDS
BATCH = 5000  # messages per confirmed batch of the publisher
BURST_BATCH = 1000  # smaller for the burst: a batch is published well within a second, so all are due together
BURST_PATIENCE = float(os.environ.get("NSB_BENCH_BURST_PATIENCE", "300"))
BODY = json.dumps({"orderId": 0, "note": "x" * 170}).encode()
VHOST = "backlog"


def nservicebus_message(index: int, destination: str, delay: int) -> RabbitMqMessage:
    """A deferred message as a NServiceBus endpoint sends it: its usual headers and a small JSON body."""
    headers = {
        "NServiceBus.MessageId": f"{index:08x}-0000-4000-8000-{index:012x}",
        "NServiceBus.ConversationId": f"{index:08x}-1111-4000-8000-{index:012x}",
        "NServiceBus.CorrelationId": f"{index:08x}-0000-4000-8000-{index:012x}",
        "NServiceBus.ContentType": "application/json",
        "NServiceBus.EnclosedMessageTypes": "Bench.OrderDeadline, Bench, Version=1.0.0.0",
        "NServiceBus.OriginatingEndpoint": "Bench.Orders",
        "NServiceBus.TimeSent": "2026-01-01 00:00:00:000000 Z",
        "NServiceBus.Version": "9.2.3",
    }
    return rabbitmq_message(str(index), destination, BODY, headers, delay, Generation.V2)


def park_share(amqp_url: str, endpoints: list[str], first: int, stop: int) -> None:
    """Publish messages ``first`` .. ``stop`` − 1 of the backlog (one process, one connection)."""
    spread = random.Random(first)
    low, high = math.log(SHORTEST_PARKED), math.log(LONGEST_PARKED)
    with ConfirmPublisher(amqp_url) as publisher:
        for start in range(first, stop, BATCH):
            publisher.publish(
                [
                    outgoing(
                        nservicebus_message(i, endpoints[i % len(endpoints)], int(math.exp(spread.uniform(low, high))))
                    )
                    for i in range(start, min(stop, start + BATCH))
                ]
            )


def park(amqp_url: str, endpoints: list[str], count: int) -> float:
    """Publish ``count`` long-delayed messages from one process per core; returns messages/s (confirmed)."""
    workers = os.cpu_count() or 2
    shares = [(amqp_url, endpoints, count * w // workers, count * (w + 1) // workers) for w in range(workers)]
    started = time.monotonic()
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        pool.starmap(park_share, shares)
    return count / (time.monotonic() - started)


@dataclass(frozen=True)
class Footprint:
    rss_bytes: int
    memory: dict[str, int]  # the management API's breakdown (bytes per category)
    disk_bytes: int


def footprint(broker: LocalRabbitMq) -> Footprint:
    pid = broker.beam_pid()
    rss = 0
    if pid:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
    api = ManagementApi(broker.management_url, broker.username, broker.password)
    breakdown = api.request("GET", f"nodes/{path_segment(broker.node)}/memory")["memory"]
    memory = {name: int(value) for name, value in breakdown.items() if isinstance(value, int)}
    disk = sum(f.stat().st_size for f in (broker.state_dir / "mnesia").rglob("*") if f.is_file())
    return Footprint(rss, memory, disk)


def mib(value: float) -> str:
    return f"{value / 2**20:8.1f} MiB"


def print_footprint(before: Footprint, after: Footprint, parked: int) -> None:
    per_million = 1_000_000 / parked
    print(f"(b) footprint of {parked:,} parked messages (per million = difference x {per_million:g})")
    print(f"    beam.smp RSS    {mib(before.rss_bytes)} -> {mib(after.rss_bytes)}   per million "
          f"{mib((after.rss_bytes - before.rss_bytes) * per_million)}")  # fmt: skip
    print(f"    data folder     {mib(before.disk_bytes)} -> {mib(after.disk_bytes)}   per million "
          f"{mib((after.disk_bytes - before.disk_bytes) * per_million)}")  # fmt: skip
    grown = sorted(after.memory, key=lambda k: after.memory[k] - before.memory.get(k, 0), reverse=True)
    print("    management API memory breakdown, largest growth first:")
    for name in grown[:8]:
        delta = after.memory[name] - before.memory.get(name, 0)
        print(f"      {name:28} {mib(before.memory.get(name, 0))} -> {mib(after.memory[name])}   "
              f"per million {mib(delta * per_million)}")  # fmt: skip


def ours(collector: ArrivalCollector, ids: set[str]) -> list[float]:
    """Arrival times of the messages with ``ids`` (first copy each): a late one from an earlier round is not ours."""
    first: dict[str, float] = {}
    for arrival in collector.arrivals:
        if arrival.message_id in ids:
            first.setdefault(arrival.message_id, arrival.arrived_at)
    return sorted(first.values())


def plain_rate(broker: LocalRabbitMq, endpoints: list[str], count: int, round_number: int) -> float:
    """Publish ``count`` messages straight to the endpoint queues and consume them: messages/s end to end."""
    base = (2 * round_number + 1) * 10**8
    messages = [nservicebus_message(base + i, endpoints[i % len(endpoints)], 0) for i in range(count)]
    ids = {message.message_id for message in messages}
    with ArrivalCollector(broker.amqp_url, VHOST, endpoints) as collector:
        started = time.monotonic()
        with ConfirmPublisher(broker.vhost_amqp_url(VHOST)) as publisher:
            for first in range(0, count, BATCH):
                publisher.publish(
                    [
                        outgoing(replace(m, exchange="", routing_key=m.routing_key.rsplit(".", 1)[-1]))
                        for m in messages[first : first + BATCH]
                    ]
                )
        if not collector.wait_for(ids, timeout=300):
            raise RuntimeError(f"plain run: {len(ours(collector, ids))} of {count} arrived within 300 s")
        arrived = ours(collector, ids)
    return count / (arrived[-1] - started)


@dataclass(frozen=True)
class Burst:
    count: int
    due_from: float  # monotonic: earliest due time of a message of the burst
    due_to: float  # latest due time
    arrivals: tuple[float, ...]  # first arrival of each message that came, in order
    levels: dict[int, int]  # first level -> messages
    stuck: dict[str, tuple[int, int]]  # level queue -> (messages, of which held by its dead-letter worker)

    @property
    def drain_seconds(self) -> float:
        """From the first message's due time until the last one arrived."""
        return self.arrivals[-1] - self.due_from

    @property
    def rate(self) -> float:
        return len(self.arrivals) / self.drain_seconds

    def after_due(self, fraction: float) -> float:
        """Seconds after the first due time by which ``fraction`` of the burst had arrived."""
        return self.arrivals[min(len(self.arrivals) - 1, math.ceil(fraction * self.count) - 1)] - self.due_from

    def summary(self) -> str:
        missing = self.count - len(self.arrivals)
        held = f"; {missing:,} NOT ARRIVED within {BURST_PATIENCE:.0f} s, held in {self.stuck}" if missing else ""
        return (
            f"burst of {self.count:,} due within {self.due_to - self.due_from:.1f} s (first levels "
            f"{sorted(self.levels)}): half arrived {self.after_due(0.5):.1f} s, 90% {self.after_due(0.9):.1f} s, "
            f"the last {self.drain_seconds:.1f} s after the first was due -> {self.rate:,.0f} msg/s{held}"
        )


def burst(broker: LocalRabbitMq, endpoints: list[str], count: int, lead_seconds: float, round_number: int) -> Burst:
    """``count`` messages published over the next seconds, each batch with the whole seconds left until one
    second ``lead_seconds`` away: all due within about one second of each other."""
    base = (2 * round_number + 2) * 10**8
    due_second = math.ceil(time.monotonic() + lead_seconds)
    due_from, due_to = math.inf, 0.0
    levels: Counter[int] = Counter()
    ids: set[str] = set()
    with ArrivalCollector(broker.amqp_url, VHOST, endpoints) as collector:
        with ConfirmPublisher(broker.vhost_amqp_url(VHOST)) as publisher:
            for first in range(0, count, BURST_BATCH):
                sent = time.monotonic()
                delay = math.ceil(due_second - sent)
                if delay < 1:
                    raise RuntimeError(f"the burst could not be published within {lead_seconds:.0f} s")
                batch = [
                    nservicebus_message(base + i, endpoints[i % len(endpoints)], delay)
                    for i in range(first, min(count, first + BURST_BATCH))
                ]
                publisher.publish([outgoing(message) for message in batch])
                ids.update(message.message_id for message in batch)
                due_from, due_to = min(due_from, sent + delay), max(due_to, time.monotonic() + delay)
                levels[first_level(delay)] += len(batch)
        complete = collector.wait_for(ids, timeout=max(0.0, due_to - time.monotonic()) + BURST_PATIENCE)
        stuck = {} if complete else held_in_levels(broker)
        arrived = ours(collector, ids)
    return Burst(count, due_from, due_to, tuple(arrived), dict(levels), stuck)


def held_in_levels(broker: LocalRabbitMq) -> dict[str, tuple[int, int]]:
    """Level queues still holding messages: (messages, of which with the dead-letter worker), per the API."""
    api = ManagementApi(broker.management_url, broker.username, broker.password)
    held = {}
    for queue in api.queues(VHOST):
        if queue["name"].startswith("nsb.") and (queue.get("messages") or queue.get("messages_dlx")):
            held[queue["name"][-2:]] = (int(queue.get("messages") or 0), int(queue.get("messages_dlx") or 0))
    return held


def streams_side_by_side(broker: LocalRabbitMq, twin: LocalRabbitMq, endpoints: list[str]) -> tuple[Lateness, Lateness]:
    """The same stream on both brokers at the same time (same schedule, same machine load): (broker, twin)."""
    results: dict[str, Lateness] = {}

    def run(name: str, node: LocalRabbitMq) -> None:
        results[name] = stream_lateness(node.amqp_url, VHOST, endpoints)

    threads = [threading.Thread(target=run, args=(name, node)) for name, node in (("broker", broker), ("twin", twin))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results["broker"], results["twin"]


@dataclass(frozen=True)
class Round:
    """One configuration's figures: (a) beside the backlog and on the empty twin, (c) plain and burst."""

    label: str
    beside: Lateness
    empty: Lateness
    plain: float
    burst: Burst
    empty_burst: Burst


def measure(
    broker: LocalRabbitMq, twin: LocalRabbitMq, endpoints: list[str], label: str, lead: float, round_number: int
) -> Round:
    print(f"\n--- {label} ({load()})", flush=True)
    beside, empty = streams_side_by_side(broker, twin, endpoints)
    print(f"(a) lateness beside the backlog: {beside.summary()}", flush=True)
    print(f"    same stream, empty twin:     {empty.summary()}   p99 ratio {beside.p99 / empty.p99:.2f}", flush=True)
    plain = plain_rate(broker, endpoints, BURST, round_number)
    print(f"(c) plain publish->consume of {BURST:,}: {plain:,.0f} msg/s ({load()})", flush=True)
    figures = burst(broker, endpoints, BURST, lead, round_number)
    print(f"    {figures.summary()}: {figures.rate / plain:.2f}x plain (target >= 0.5) ({load()})", flush=True)
    on_empty = burst(twin, endpoints, BURST, lead, round_number)
    print(f"    same burst, empty twin: {on_empty.summary()}: {on_empty.rate / plain:.2f}x plain", flush=True)
    return Round(label, beside, empty, plain, figures, on_empty)


def restart_with(node: LocalRabbitMq, settings: dict[str, int], parked: int, levels: list[str]) -> float:
    """Restart ``node`` with ``settings`` in advanced.config; seconds until all ``parked`` messages are back."""
    node.rabbit_app_env = settings
    node.write_config()
    restarted = time.monotonic()
    node.restart(timeout=1800)
    while sum(queue_depths(node.amqp_url, VHOST, levels).values()) < parked:
        time.sleep(1)
    return time.monotonic() - restarted


def main() -> None:
    stack = load_stack("dev")
    assert stack.rabbitmq is not None
    # RabbitMQ 3.10 refuses policies that apply to quorum queues only (4.0's delivery limit needs them)
    stack = replace(stack.with_values("rabbitmq", vhost=VHOST, deliveryLimitPolicies=BROKER != "3.10"), sqs=None)
    assert stack.rabbitmq is not None
    rabbitmq = stack.rabbitmq
    endpoints = [endpoint.endpoint for endpoint in rabbitmq.endpoints]
    broker_type = broker_of(BROKER, "NSB_BENCH_RABBITMQ")
    with broker_type() as broker, broker_type() as twin:
        for node in (broker, twin):
            api = ManagementApi(node.management_url, node.username, node.password)
            api.create_vhost(VHOST)
            api.import_definitions(json.loads(render(stack, "rabbitmq-definitions", "dev")))
        levels = [queue.name for queue in delay_levels(Generation.V2).queues]
        print(
            f"RabbitMQ {broker.version()}, v2 graph + {len(endpoints)} endpoints (quorum), backlog {BACKLOG:,}, "
            f"burst {BURST:,}, stream {RATE_PER_SECOND:g}/s x {STEADY_SECONDS:g} s (delays "
            f"{LATENESS_DELAYS.start}-{LATENESS_DELAYS.stop - 1} s) on the backlog's broker and, at the same time, "
            f"on a twin broker whose graph stays empty; {load()}",
            flush=True,
        )
        empty_footprint = footprint(broker)
        print(f"\n--- both graphs empty: the two streams side by side ({load()})", flush=True)
        calibration = streams_side_by_side(broker, twin, endpoints)
        print(f"    broker: {calibration[0].summary()}\n    twin:   {calibration[1].summary()}", flush=True)

        print(f"\n--- parking {BACKLOG:,} messages ({load()})", flush=True)
        park_rate = park(broker.vhost_amqp_url(VHOST), endpoints, BACKLOG)
        depths = queue_depths(broker.amqp_url, VHOST, levels)
        per_level = ", ".join(f"{name[-2:]}:{depths[name]:,}" for name in levels if depths[name])
        print(f"    published at {park_rate:,.0f} msg/s (confirmed batches of {BATCH:,}, {os.cpu_count()} processes)")
        print(f"    per level: {per_level}", flush=True)
        time.sleep(10)  # let the quorum queues write their segments before measuring
        print_footprint(empty_footprint, footprint(broker), BACKLOG)

        lead = BURST / park_rate * 2 + 15  # time to publish the burst (one process), with room
        rounds = [measure(broker, twin, endpoints, f"beside {BACKLOG:,} parked, defaults", lead, 0)]
        for prefetch in DLX_PREFETCHES:
            settings = {DLX_PREFETCH_SETTING: prefetch}
            took = restart_with(broker, settings, BACKLOG, levels)
            restart_with(twin, settings, 0, levels)
            print(f"\nrestarted with {DLX_PREFETCH_SETTING} = {prefetch}: {took:.0f} s until the node answered "
                  f"with all {BACKLOG:,} parked messages recovered")  # fmt: skip
            label = f"beside {BACKLOG:,} parked, {DLX_PREFETCH_SETTING} = {prefetch}"
            rounds.append(measure(broker, twin, endpoints, label, lead, len(rounds)))

        print(f"\n=== summary ({load()})")
        for figures in rounds:
            beside, empty, burst_figures = figures.beside, figures.empty, figures.burst
            print(
                f"    {figures.label}\n"
                f"      (a) p50 {beside.p50:5.1f} p99 {beside.p99:6.1f} max {beside.max:6.1f} ms vs empty twin p99 "
                f"{empty.p99:6.1f}: {beside.p99 / empty.p99:4.2f}x (targets p99 <= 100 ms, <= 2x)\n"
                f"      (c) {burst_figures.rate:7,.0f} msg/s, last {burst_figures.drain_seconds:5.1f} s after due, "
                f"vs plain {figures.plain:7,.0f}: {burst_figures.rate / figures.plain:4.2f}x (target >= 0.5); "
                f"empty twin {figures.empty_burst.rate:7,.0f} msg/s, last {figures.empty_burst.drain_seconds:5.1f} s"
            )


if __name__ == "__main__":
    main()
