"""A real ``pulumi up`` of the delay graph plus 100, 300 and 1,000 endpoints into a fresh RabbitMQ 3.10 and 4.3,
against the ceiling: the same objects created by a bare client through the management API at the same parallelism.

(a) ``up``: wall time and objects/s of ``pulumi up --parallel P`` (the program, the engine, the RabbitMQ provider),
    each size into a vhost of its own, against the baseline (bench/pulumi_measures.py ``baseline``: the same
    exchanges, queues and policies, then the bindings, P threads). On 4.x the stack declares delivery-limit
    policies, on 3.10 not. Each size with PULUMI_SKIP_CHECKPOINTS=true (one state write at the end; pulumi/pulumi
    sdk/go/common/env/env.go SkipCheckpoints) and, up to NSB_BENCH_PULUMI_CHECKPOINTED_MAX endpoints (default
    300), as a DIY backend runs by default (the whole state written after every step). Targets: up within 2x of
    the baseline at 100 and 1,000 endpoints with skip-checkpoints.
(b) Time per endpoint and the growth exponent (least squares of log(time) on log(endpoints)) of each curve.
    Target: <= 1.15 with skip-checkpoints.
(c) The largest skip-checkpoints stack: a no-change ``preview --expect-no-changes`` (target <= 60 s), a
    ``refresh --expect-no-changes``, and ``verify`` (0 drifts) against one GET /api/definitions/<vhost>
    (target <= 2x).
(d) CPU seconds: of the up's processes (the CLI, the language host and program, the provider: this process's
    waited-for children) and of the bare client (this process); and the broker's (beam.smp utime+stime) per
    endpoint during the up, the stack's combined policies (policyScope stack) against one policy per object
    (policyScope endpoint), the latter up to NSB_BENCH_PULUMI_PER_OBJECT_MAX endpoints (default 300: 1,000 took
    21 min and failed before combined policies).
(e) Pulumi's floor (bench/pulumi_floor.py): the program's ``up``, no-change ``preview``, state bytes and dependency
    entries against a plain Pulumi program registering the same ``pulumi_rabbitmq`` resources with the same inputs,
    flat, at NSB_BENCH_PULUMI_FLOOR_ENDPOINTS (default 200,500,1000), NSB_BENCH_PULUMI_ROUNDS rounds (default 2), on
    RabbitMQ 4.3 unless NSB_BENCH_PULUMI_VERSIONS is set; its docstring says how.
Each row prints the 1-minute load average at its start and end. Figures are printed, never asserted.
Settings: NSB_BENCH_PULUMI_ENDPOINTS (default 100,300,1000), NSB_BENCH_PULUMI_VERSIONS (default 3.10,4.3; for (e)
4.3), NSB_BENCH_PULUMI_PARALLEL (default 16). ``python -m bench pulumi --floor-only`` runs (e) alone, ``--skip-floor``
(a)-(d) alone; without either, (a)-(d) then (e).
"""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import ExitStack
from dataclasses import dataclass, field

from nsb_delays.brokers.management import ManagementApi
from nsb_delays.components.model.rabbitmq.combined import PolicyScope
from nsb_delays.infra.commands.errors import sigterm_as_interrupt
from nsb_delays.infra.pulumi_engine import (
    LocalStack,
    PulumiCli,
    PulumiFailed,
    find_pulumi,
    provider_credentials,
)
from nsb_delays.stack.config import NAMESPACE, RabbitMqConfig, parse_stack_config
from servers.rabbitmq import LocalRabbitMq, broker_of

from .pulumi_floor import measure_floor
from .pulumi_measures import (
    UpCpu,
    baseline,
    client_cpu,
    cpu_seconds,
    growth_exponent,
    load,
    no_change_checks,
    provider_objects,
    section,
    timed,
)

SIZES = tuple(int(n) for n in os.environ.get("NSB_BENCH_PULUMI_ENDPOINTS", "100,300,1000").split(","))
VERSIONS = tuple(os.environ.get("NSB_BENCH_PULUMI_VERSIONS", "3.10,4.3").split(","))
PARALLEL = int(os.environ.get("NSB_BENCH_PULUMI_PARALLEL", "16"))
CHECKPOINTED_MAX = int(os.environ.get("NSB_BENCH_PULUMI_CHECKPOINTED_MAX", "300"))
PER_OBJECT_MAX = int(os.environ.get("NSB_BENCH_PULUMI_PER_OBJECT_MAX", "300"))
SKIP = {"PULUMI_SKIP_CHECKPOINTS": "true"}
CHECKPOINTS = {"PULUMI_SKIP_CHECKPOINTS": "false"}
COLUMNS = (
    ("version", 7), ("state", 16), ("policies", 8), ("endpoints", 9), ("objects", 7), ("up s", 7), ("obj/s", 6),
    ("bare s", 6), ("obj/s", 6), ("ratio", 5), ("ms/endpt", 8), ("cpu s/endpt", 11), ("up cpu", 6), ("bare cpu", 8),
    ("load", 9),
)  # fmt: skip


def row(*cells: object) -> str:
    return " ".join(f"{cell:>{width}}" for cell, (_, width) in zip(cells, COLUMNS, strict=True))


@dataclass
class Run:
    """One broker version's rows: ``curves`` maps a curve's name to its (endpoints, seconds) points."""

    cli: PulumiCli
    version: str
    broker: LocalRabbitMq
    cleanup: ExitStack
    curves: dict[str, list[tuple[int, float]]] = field(default_factory=dict)

    @property
    def api(self) -> ManagementApi:
        return ManagementApi(self.broker.management_url, self.broker.username, self.broker.password, timeout=300)

    def up(
        self, state: str, scope: PolicyScope, size: int, with_baseline: bool
    ) -> tuple[LocalStack, RabbitMqConfig] | None:
        """One row: an ``up`` of ``size`` endpoints into a vhost of its own (and the bare client's into another);
        the stack and its parsed config, or None when the up failed."""
        label = f"{self.version.replace('.', '')}-{state}-{scope}-{size}"
        raw = section(f"bench-{label}", self.version, size, scope)
        self.api.create_vhost(raw["vhost"])
        credentials = provider_credentials(self.broker.username, self.broker.password)
        config = {"rabbitmq:endpoint": self.broker.management_url, f"{NAMESPACE}:rabbitmq": raw}
        env = SKIP if state == "skip-checkpoints" else CHECKPOINTS
        stack = self.cleanup.enter_context(LocalStack(self.cli, f"bench-{label}", config, credentials | env))
        load_before, cpu_before, client_before = load(), cpu_seconds(self.broker.beam_pid()), client_cpu(children=True)
        try:
            with UpCpu() as parts:
                up_seconds, _ = timed(lambda: stack.run("up", "--yes", "--skip-preview", "--parallel", str(PARALLEL)))
        except PulumiFailed as failed:
            summary = " ".join(line.strip() for line in str(failed).splitlines()[-4:])
            print(f"{self.version:>7} {state:>16} {scope:>8} {size:>9} up FAILED: {summary}", flush=True)
            return None
        cpu = (cpu_seconds(self.broker.beam_pid()) - cpu_before) / size
        up_cpu = client_cpu(children=True) - client_before
        objects = provider_objects(stack)
        parsed = parse_stack_config({"rabbitmq": raw}, stack.name).rabbitmq
        assert parsed is not None
        bare, bare_cpu = ("", "", ""), ""
        if with_baseline:
            bare_config = parse_stack_config({"rabbitmq": raw | {"vhost": f"bare-{label}"}}, stack.name).rabbitmq
            assert bare_config is not None
            self.api.create_vhost(bare_config.vhost)
            bare_before = client_cpu(children=False)
            bare_seconds, bare_objects = baseline(self.api, bare_config, PARALLEL)
            bare_cpu = f"{client_cpu(children=False) - bare_before:.1f}"
            self.api.delete_vhost(bare_config.vhost)
            if bare_objects != objects:
                print(f"  {bare_objects} objects through the API, {objects} in the stack's state", flush=True)
            bare = (f"{bare_seconds:.1f}", f"{bare_objects / bare_seconds:.0f}", f"{up_seconds / bare_seconds:.2f}")
            self.curves.setdefault("bare client", []).append((size, bare_seconds))
        self.curves.setdefault(f"up {state} policies {scope}", []).append((size, up_seconds))
        print(
            row(
                self.version, state, str(scope), size, objects, f"{up_seconds:.1f}", f"{objects / up_seconds:.0f}",
                *bare, f"{1000 * up_seconds / size:.0f}", f"{cpu:.3f}", f"{up_cpu:.0f}",
                bare_cpu, f"{load_before:.1f}-{load():.1f}",
            ),
            flush=True,
        )  # fmt: skip
        shares = ", ".join(f"{part} {seconds:.1f}" for part, seconds in parts.by_part().items())
        print(f"  up cpu s by process (sampled every {parts.interval} s): {shares}", flush=True)
        return stack, parsed

    def measure(self) -> None:
        biggest: tuple[LocalStack, RabbitMqConfig] | None = None
        for size in SIZES:
            made = self.up("skip-checkpoints", PolicyScope.STACK, size, with_baseline=True)
            if made is not None and size == max(SIZES):
                biggest = made
            elif made is not None:
                self.api.delete_vhost(made[1].vhost)
        if biggest is not None:
            for line in no_change_checks(biggest[0], self.api, biggest[1], PARALLEL):
                print(line, flush=True)
            self.api.delete_vhost(biggest[1].vhost)
        for size in SIZES:
            if size > PER_OBJECT_MAX:
                print(f"{self.version:>7} {'skip-checkpoints':>16} {'endpoint':>8} {size:>9} not run (over "
                      f"NSB_BENCH_PULUMI_PER_OBJECT_MAX={PER_OBJECT_MAX}): per-object policies, 1,000 endpoints "
                      "failed after 21 min (docs/measurements.md)", flush=True)  # fmt: skip
                continue
            made = self.up("skip-checkpoints", PolicyScope.ENDPOINT, size, with_baseline=False)
            if made is not None:
                self.api.delete_vhost(made[1].vhost)
        for size in SIZES:
            if size > CHECKPOINTED_MAX:
                continue
            made = self.up("checkpoints", PolicyScope.STACK, size, with_baseline=False)
            if made is not None:
                self.api.delete_vhost(made[1].vhost)
        for name, points in self.curves.items():
            per_endpoint = ", ".join(f"{size}: {1000 * seconds / size:.0f} ms" for size, seconds in points)
            print(f"  {self.version} {name}: per endpoint {per_endpoint}; growth exponent "
                  f"{growth_exponent(points):.2f}", flush=True)  # fmt: skip


def main(arguments: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench pulumi", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--floor-only", action="store_true", help="only the program against Pulumi's floor")
    which.add_argument("--skip-floor", action="store_true", help="everything but the program against Pulumi's floor")
    options = parser.parse_args(arguments or [])
    cli = find_pulumi()
    if cli is None:
        raise SystemExit("no Pulumi CLI: run `make setup` (it builds one into .cache/engine) or put pulumi on PATH")
    print(f"pulumi {cli.executable}; --parallel {PARALLEL}; {os.cpu_count()} cores; load {load():.1f}", flush=True)
    # SIGTERM unwinds like Ctrl-C: the brokers and the stacks' temporary folders are removed either way
    with sigterm_as_interrupt():
        if not options.floor_only:
            print(row(*(title for title, _ in COLUMNS)), flush=True)
            for version in VERSIONS:
                with broker_of(version, "NSB_BENCH_PULUMI_VERSIONS")() as broker, ExitStack() as cleanup:
                    Run(cli, version, broker, cleanup).measure()
        if not options.skip_floor:
            measure_floor(cli, PARALLEL, CHECKPOINTED_MAX)
    print(f"load at the end {load():.1f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
