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
from dataclasses import dataclass, replace

from nsb_delays.brokers.delivery import ArrivalCollector, DelayedPublisher, DelayedSend
from nsb_delays.brokers.management import ManagementApi
from nsb_delays.components.model.rabbitmq.names import Generation
from nsb_delays.components.model.rabbitmq.routing import delay_path
from nsb_delays.infra.render import render
from nsb_delays.stack.config import load_stack
from servers.rabbitmq import LocalRabbitMq

RATE_PER_SECOND = float(os.environ.get("NSB_BENCH_RATE", "50"))
STEADY_SECONDS = float(os.environ.get("NSB_BENCH_SECONDS", "20"))
LATENESS_DELAYS = range(1, 17)
BURST = int(os.environ.get("NSB_BENCH_BURST", "6000"))  # long enough that publishing overlaps the delay
WARM_UP = 500
TWO_HOP_DELAY = 3  # bits 1 and 0: two level queues
VHOST = "bench"


def percentile(values: list[float] | tuple[float, ...], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


@dataclass(frozen=True)
class Lateness:
    """Arrival − (sent + delay) of every message of a steady stream, in milliseconds."""

    sent: int
    late_ms: tuple[float, ...]

    @property
    def p50(self) -> float:
        return statistics.median(self.late_ms)

    @property
    def p99(self) -> float:
        return percentile(self.late_ms, 0.99)

    @property
    def max(self) -> float:
        return max(self.late_ms)

    def summary(self) -> str:
        early = sum(1 for value in self.late_ms if value < 0)
        missing = self.sent - len(self.late_ms)
        return (
            f"p50 {self.p50:.1f}  p99 {self.p99:.1f}  max {self.max:.1f} ms  "
            f"(arrived {len(self.late_ms)}/{self.sent}{' TIMED OUT' if missing else ''}, early {early})"
        )


def stream_lateness(
    amqp_url: str, vhost: str, endpoints: list[str], rate: float = RATE_PER_SECOND, seconds: float = STEADY_SECONDS
) -> Lateness:
    """Publish ``rate`` messages a second for ``seconds`` s (delays 1–16 s, same seed every run) and time them."""
    schedule = random.Random(7)
    with ArrivalCollector(amqp_url, vhost, endpoints) as collector:
        sends: list[DelayedSend] = []
        with DelayedPublisher(amqp_url, vhost, Generation.V2) as publisher:
            start = time.monotonic()
            for i in range(int(rate * seconds)):
                pause = start + i / rate - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                sends.append(publisher.send(endpoints[i % len(endpoints)], schedule.choice(LATENESS_DELAYS)))
        collector.wait_for([s.message_id for s in sends], timeout=max(LATENESS_DELAYS) + 60)
    arrivals = collector.by_id()
    late = tuple((arrivals[s.message_id][0].arrived_at - s.due_at) * 1000 for s in sends if s.message_id in arrivals)
    return Lateness(len(sends), late)


def lateness(broker: LocalRabbitMq, endpoints: list[str]) -> None:
    figures = stream_lateness(broker.amqp_url, VHOST, endpoints)
    print(f"(a) lateness, {figures.sent} messages at {RATE_PER_SECOND:g}/s over {STEADY_SECONDS:g} s, delays 1-16 s")
    print(f"    lateness ms: {figures.summary()}   (target p99 <= 100)")


def burst_rate(broker: LocalRabbitMq, endpoint: str, delay: int | None, count: int = BURST) -> float:
    """Messages per second from first send to last arrival, minus the requested delay."""
    with ArrivalCollector(broker.amqp_url, VHOST, [endpoint]) as collector:
        with DelayedPublisher(broker.amqp_url, VHOST, Generation.V2) as publisher:
            if delay is None:
                sends = [publisher.publish_plain(endpoint) for _ in range(count)]
            else:
                sends = [publisher.send(endpoint, delay) for _ in range(count)]
        if not collector.wait_for([s.message_id for s in sends], timeout=(delay or 0) + 120):
            raise RuntimeError(f"burst to {endpoint} (delay {delay}) did not fully arrive")
    last = max(a.arrived_at for a in collector.arrivals)
    return count / (last - sends[0].sent_at - (delay or 0))


def throughput(broker: LocalRabbitMq, endpoint: str) -> None:
    path = delay_path(TWO_HOP_DELAY, endpoint, Generation.V2)
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
    stack = replace(stack.with_values("rabbitmq", vhost=VHOST, deliveryLimitPolicies=False), sqs=None)
    assert stack.rabbitmq is not None
    rabbitmq = stack.rabbitmq
    with LocalRabbitMq() as broker:
        api = ManagementApi(broker.management_url, broker.username, broker.password)
        api.create_vhost(VHOST)
        api.import_definitions(json.loads(render(stack, "rabbitmq-definitions", "dev")))
        endpoints = [endpoint.endpoint for endpoint in rabbitmq.endpoints]
        print(f"RabbitMQ {api.overview()['rabbitmq_version']}, v2 graph + {len(endpoints)} endpoints (quorum)")
        lateness(broker, endpoints)
        throughput(broker, endpoints[0])


if __name__ == "__main__":
    main()
