"""A real ``pulumi up`` of the delay graph plus 10, 100 and 1,000 endpoints into a fresh RabbitMQ 3.10, against the
ceiling: the same objects created by a bare client through the management API at the same parallelism.

(a) ``up``: wall time and resources/s of ``pulumi up --parallel P`` (the program, the engine, the RabbitMQ
    provider), each size into a vhost of its own; the baseline PUTs the same exchanges, queues and policies, then
    the bindings, with P threads (HTTP keep-alive, one session per thread). Target: up within 2x of the baseline.
    Each size twice: as a DIY backend runs by default, writing the whole state after every step (quadratic in
    the stack's size), and with PULUMI_SKIP_CHECKPOINTS=true (one write at the end; pulumi/pulumi
    sdk/go/common/env/env.go SkipCheckpoints); the default only up to NSB_BENCH_PULUMI_CHECKPOINTED_MAX
    endpoints (default 100: 1,000 would take well over an hour).
(b) A no-change ``pulumi preview`` of the largest stack, against the same program under mocks (the program's own
    cost, no engine). Target: under 60 s on this machine.
Figures are printed, never asserted: the machine is shared, so they are what this run saw.
Settings: NSB_BENCH_PULUMI_ENDPOINTS (default 10,100,1000), NSB_BENCH_PULUMI_PARALLEL (default 16).
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any

from nsb_delays.brokers.management import ManagementApi, path_segment
from nsb_delays.components.model import rabbitmq as rmq
from nsb_delays.components.recording import record
from nsb_delays.infra.commands.errors import sigterm_as_interrupt
from nsb_delays.infra.program import declare
from nsb_delays.infra.pulumi_engine import (
    LocalStack,
    PulumiFailed,
    created_provider_objects,
    find_pulumi,
    provider_credentials,
)
from nsb_delays.stack.config import NAMESPACE, RabbitMqConfig, parse_stack_config
from servers.rabbitmq import LocalRabbitMq

SIZES = tuple(int(n) for n in os.environ.get("NSB_BENCH_PULUMI_ENDPOINTS", "10,100,1000").split(","))
PARALLEL = int(os.environ.get("NSB_BENCH_PULUMI_PARALLEL", "16"))
CHECKPOINTED_MAX = int(os.environ.get("NSB_BENCH_PULUMI_CHECKPOINTED_MAX", "100"))
MODES = {"checkpoints": {}, "skip-checkpoints": {"PULUMI_SKIP_CHECKPOINTS": "true"}}
BROKER_VERSION = "3.10"


def section(vhost: str, endpoints: int) -> dict[str, Any]:
    names = [f"Endpoint{i:05d}" for i in range(endpoints)]
    return {"vhost": vhost, "brokerVersion": BROKER_VERSION, "deliveryLimitPolicies": False, "endpoints": names}


def baseline(api: ManagementApi, config: RabbitMqConfig) -> tuple[float, int]:
    """The model's objects through the management API, P at a time: exchanges, queues and policies, then bindings."""
    topology = config.topology
    vhost = path_segment(config.vhost)
    local = threading.local()

    def session() -> ManagementApi:
        if not hasattr(local, "api"):
            local.api = ManagementApi(api.url, api.username, api.password)
        return local.api  # type: ignore[no-any-return]

    def put(path_and_body: tuple[str, dict[str, Any]]) -> None:
        session().request("PUT", *path_and_body)

    def post(path_and_body: tuple[str, dict[str, Any]]) -> None:
        session().request("POST", *path_and_body)

    arguments = {q.name: rmq.queue_arguments_as_stored(q.arguments, BROKER_VERSION) for q in topology.queues}
    first = [
        *(
            (f"exchanges/{vhost}/{path_segment(e.name)}", {"type": e.type, "durable": e.durable})
            for e in topology.exchanges
        ),
        *(
            (f"queues/{vhost}/{path_segment(q.name)}", {"durable": q.durable, "arguments": arguments[q.name]})
            for q in topology.queues
        ),
        *(
            (
                f"policies/{vhost}/{path_segment(p.name)}",
                {
                    "pattern": p.pattern,
                    "apply-to": p.apply_to,
                    "priority": p.priority,
                    "definition": dict(p.definition),
                },
            )
            for p in topology.policies
        ),
    ]
    kind = {"queue": "q", "exchange": "e"}
    second = [
        (
            f"bindings/{vhost}/e/{path_segment(b.source)}/{kind[b.destination_type]}/{path_segment(b.destination)}",
            {"routing_key": b.routing_key},
        )
        for b in topology.bindings
    ]
    start = time.perf_counter()
    with ThreadPoolExecutor(PARALLEL) as pool:
        list(pool.map(put, first))
        list(pool.map(post, second))
    return time.perf_counter() - start, len(first) + len(second)


def main() -> None:
    cli = find_pulumi()
    if cli is None:
        raise SystemExit("no Pulumi CLI: run `make setup` (it builds one into .cache/engine) or put pulumi on PATH")
    print(f"pulumi {cli.executable}; --parallel {PARALLEL}; RabbitMQ {BROKER_VERSION}", flush=True)
    header = ("state", "endpoints", "objects", "up s", "obj/s", "bare s", "obj/s", "ratio")
    print(" ".join(f"{title:>{width}}" for title, width in zip(header, (16, 9, 7, 7, 7, 7, 7, 6), strict=True)))
    # SIGTERM unwinds like Ctrl-C: the broker and the stacks' temporary folders are removed either way
    with sigterm_as_interrupt(), LocalRabbitMq() as broker, ExitStack() as cleanup:
        api = ManagementApi(broker.management_url, broker.username, broker.password)
        credentials = provider_credentials(broker.username, broker.password)
        largest: tuple[LocalStack, dict[str, Any]] | None = None
        for mode, mode_env in MODES.items():
            for size in SIZES:
                if mode == "checkpoints" and size > CHECKPOINTED_MAX:
                    continue
                vhost = f"{mode}-{size}"
                config = {"rabbitmq:endpoint": broker.management_url, f"{NAMESPACE}:rabbitmq": section(vhost, size)}
                api.create_vhost(vhost)
                stack = cleanup.enter_context(LocalStack(cli, f"bench-{mode}-{size}", config, credentials | mode_env))
                start = time.perf_counter()
                try:
                    output = stack.run("up", "--yes", "--skip-preview", "--parallel", str(PARALLEL))
                except PulumiFailed as failed:
                    # e.g. 1,000 endpoints on RabbitMQ 3.10: policy PUTs answered EOF after 60 s (README, benchmarks)
                    summary = " ".join(line.strip() for line in str(failed).splitlines()[-4:])
                    print(f"{mode:>16} {size:>9} up failed after {time.perf_counter() - start:.0f} s: {summary}")
                    continue
                up_seconds = time.perf_counter() - start
                objects = len(created_provider_objects(output))
                parsed = parse_stack_config({"rabbitmq": section(f"bare-{vhost}", size)}).rabbitmq
                assert parsed is not None
                api.create_vhost(parsed.vhost)
                bare_seconds, bare_objects = baseline(api, parsed)
                assert bare_objects == objects, f"{bare_objects} objects through the API, {objects} through pulumi up"
                print(
                    f"{mode:>16} {size:>9} {objects:>7} {up_seconds:>7.1f} {objects / up_seconds:>7.0f} "
                    f"{bare_seconds:>7.1f} {bare_objects / bare_seconds:>7.0f} {up_seconds / bare_seconds:>6.2f}",
                    flush=True,
                )
                largest = (stack, section(vhost, size))
        if largest is None:
            return
        stack, raw = largest
        start = time.perf_counter()
        stack.run("preview", "--expect-no-changes", "--parallel", str(PARALLEL))
        preview_seconds = time.perf_counter() - start
        start = time.perf_counter()
        recorded = record(lambda: declare(parse_stack_config({"rabbitmq": raw}), {}), stack="bench")
        mocks_seconds = time.perf_counter() - start
        print(
            f"no-change preview of {len(raw['endpoints'])} endpoints: {preview_seconds:.1f} s "
            f"(target < 60 s); the program under mocks: {mocks_seconds:.1f} s for {len(recorded)} resources "
            f"(ratio {preview_seconds / mocks_seconds:.1f})",
            flush=True,
        )


if __name__ == "__main__":
    main()
