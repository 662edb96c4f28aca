"""Delayed delivery on a live RabbitMQ 3.10 (v2 graph from the dev stack's definitions): lateness and throughput.

(a) Lateness: messages with delays of 1–16 s published at a steady rate; lateness = arrival − (sent +
    delay). Target p99 ≤ 100 ms.
(b) Throughput: the same burst of messages published (confirms, persistent) once straight to an
    endpoint queue and once through the delay graph with a 2-hop delay (3 s: level 1 then level 0
    queue); rate = messages / (last arrival − first send − delay). Target delayed/plain ≥ 0.5.
Figures are printed, never asserted; the machine is shared, so they are what this run saw.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import time
from dataclasses import replace

from nsb_delays.brokers.delivery import ArrivalCollector, DelayedPublisher, DelayedSend
from nsb_delays.brokers.local import LocalRabbitMq
from nsb_delays.brokers.management import ManagementApi
from nsb_delays.components.model import rabbitmq as rmq
from nsb_delays.infra.config import load_stack
from nsb_delays.infra.render import render

RATE_PER_SECOND = float(os.environ.get("NSB_BENCH_RATE", "50"))
STEADY_SECONDS = float(os.environ.get("NSB_BENCH_SECONDS", "20"))
LATENESS_DELAYS = range(1, 17)
BURST = int(os.environ.get("NSB_BENCH_BURST", "6000"))  # long enough that publishing overlaps the delay
WARM_UP = 500
TWO_HOP_DELAY = 3  # bits 1 and 0: two level queues
VHOST = "bench"


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def lateness(broker: LocalRabbitMq, endpoints: list[str]) -> None:
    schedule = random.Random(7)
    with ArrivalCollector(broker.amqp_url, VHOST, endpoints) as collector:
        sends: list[DelayedSend] = []
        with DelayedPublisher(broker.amqp_url, VHOST) as publisher:
            start = time.monotonic()
            count = int(RATE_PER_SECOND * STEADY_SECONDS)
            for i in range(count):
                pause = start + i / RATE_PER_SECOND - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                sends.append(publisher.send(endpoints[i % len(endpoints)], schedule.choice(LATENESS_DELAYS)))
        arrived_all = collector.wait_for([s.message_id for s in sends], timeout=max(LATENESS_DELAYS) + 60)
    arrivals = collector.by_id()
    late_ms = [(arrivals[s.message_id][0].arrived_at - s.due_at) * 1000 for s in sends if s.message_id in arrivals]
    early = sum(1 for value in late_ms if value < 0)
    print(f"(a) lateness, {len(sends)} messages at {RATE_PER_SECOND:g}/s over {STEADY_SECONDS:g} s, delays 1-16 s")
    print(f"    arrived {len(late_ms)}/{len(sends)}{'' if arrived_all else ' (TIMED OUT)'}, early {early}")
    print(
        f"    lateness ms: p50 {statistics.median(late_ms):.1f}  p99 {percentile(late_ms, 0.99):.1f}  "
        f"max {max(late_ms):.1f}   (target p99 <= 100)"
    )


def burst_rate(broker: LocalRabbitMq, endpoint: str, delay: int | None, count: int = BURST) -> float:
    """Messages per second from first send to last arrival, minus the requested delay."""
    with ArrivalCollector(broker.amqp_url, VHOST, [endpoint]) as collector:
        with DelayedPublisher(broker.amqp_url, VHOST) as publisher:
            if delay is None:
                sends = [publisher.publish_plain(endpoint) for _ in range(count)]
            else:
                sends = [publisher.send(endpoint, delay) for _ in range(count)]
        if not collector.wait_for([s.message_id for s in sends], timeout=(delay or 0) + 120):
            raise RuntimeError(f"burst to {endpoint} (delay {delay}) did not fully arrive")
    last = max(a.arrived_at for a in collector.arrivals)
    return count / (last - sends[0].sent_at - (delay or 0))


def throughput(broker: LocalRabbitMq, endpoint: str) -> None:
    path = rmq.delay_path(TWO_HOP_DELAY, endpoint)
    hops = sum(1 for hop in path.hops if hop.seconds_in_queue)
    burst_rate(broker, endpoint, None, WARM_UP)  # first quorum writes and connections warm up here, unmeasured
    plain = burst_rate(broker, endpoint, None)
    delayed = burst_rate(broker, endpoint, TWO_HOP_DELAY)
    print(f"(b) throughput, burst of {BURST} persistent messages with publisher confirms to {endpoint}")
    print(f"    plain publish->consume       {plain:8.0f} msg/s")
    print(f"    delayed {TWO_HOP_DELAY} s ({hops} hops)       {delayed:8.0f} msg/s")
    print(f"    ratio delayed/plain          {delayed / plain:8.2f}   (target >= 0.5)")


def main() -> None:
    stack = load_stack("dev")
    assert stack.rabbitmq is not None
    # Debian's RabbitMQ 3.10 refuses NServiceBus's delivery-limit policies (apply-to 'quorum_queues'): off here
    rabbitmq = replace(stack.rabbitmq, vhost=VHOST, delivery_limit_policies=False)
    stack = replace(stack, rabbitmq=rabbitmq, sqs=None)
    with LocalRabbitMq() as broker:
        api = ManagementApi(broker.management_url, broker.username, broker.password)
        api.create_vhost(VHOST)
        api.import_definitions(json.loads(render(stack, "rabbitmq-definitions", "dev")))
        endpoints = [endpoint.name for endpoint in stack.rabbitmq.endpoints]
        print(f"RabbitMQ {api.overview()['rabbitmq_version']}, v2 graph + {len(endpoints)} endpoints (quorum)")
        lateness(broker, endpoints)
        throughput(broker, endpoints[0])


if __name__ == "__main__":
    main()
