"""One estate in several stacks: the delay graph in one stack, STACKS team stacks of ENDPOINTS endpoints each
(default 5 x 200) in the same vhost of a fresh RabbitMQ, each ``pulumi up`` with PULUMI_SKIP_CHECKPOINTS.

Prints each stack's up time and objects, ``verify``'s drifts for every stack, then destroys the first team's stack and
says whether every object of the graph and of the other teams stayed exactly as it was. The team stacks find the
graph by name (each bench stack has a state of its own, so no stack reference);
tests/engine/test_split_stacks_deployed.py proves the reference. Figures are printed, never asserted.
Settings: NSB_BENCH_SPLIT_STACKS (5), NSB_BENCH_SPLIT_ENDPOINTS (200), NSB_BENCH_PULUMI_PARALLEL (16).
"""

from __future__ import annotations

import os
import time
from contextlib import ExitStack
from typing import Any

from nsb_delays.brokers.management import ManagementApi
from nsb_delays.brokers.verify import verify_rabbitmq
from nsb_delays.components.model.rabbitmq.versions import broker_version_of, parse_reported_broker_version
from nsb_delays.infra.commands.errors import sigterm_as_interrupt
from nsb_delays.infra.pulumi_engine import LocalStack, created_provider_objects, find_pulumi, provider_credentials
from nsb_delays.stack.config import NAMESPACE, parse_stack_config
from servers.rabbitmq import LocalRabbitMq
from servers.vhost_definitions import objects_of_others

STACKS = int(os.environ.get("NSB_BENCH_SPLIT_STACKS", "5"))
ENDPOINTS = int(os.environ.get("NSB_BENCH_SPLIT_ENDPOINTS", "200"))
PARALLEL = int(os.environ.get("NSB_BENCH_PULUMI_PARALLEL", "16"))
VHOST = "estate"
SKIP_CHECKPOINTS = {"PULUMI_SKIP_CHECKPOINTS": "true"}


def load() -> str:
    return "/".join(f"{figure:.1f}" for figure in os.getloadavg())


def team_section(team: int, broker_version: str) -> dict[str, Any]:
    names = [f"Team{team}.Endpoint{i:04d}" for i in range(ENDPOINTS)]
    return {"vhost": VHOST, "brokerVersion": broker_version, "declaresGraph": False, "endpoints": names}


def main() -> None:
    cli = find_pulumi()
    if cli is None:
        raise SystemExit("no Pulumi CLI: run `make setup` (it builds one into .cache/engine) or put pulumi on PATH")
    print(f"{STACKS} team stacks x {ENDPOINTS} endpoints beside one graph stack; --parallel {PARALLEL}", flush=True)
    with sigterm_as_interrupt(), LocalRabbitMq() as broker, ExitStack() as cleanup:
        api = ManagementApi(broker.management_url, broker.username, broker.password)
        version = broker_version_of(parse_reported_broker_version(broker.version()))
        api.create_vhost(VHOST)
        credentials = provider_credentials(broker.username, broker.password) | SKIP_CHECKPOINTS
        sections = {"graph": {"vhost": VHOST, "brokerVersion": version, "endpoints": []}}
        sections |= {f"team{team}": team_section(team, version) for team in range(1, STACKS + 1)}
        print(f"RabbitMQ {broker.version()}; load {load()} at the start")
        print(f"{'stack':>8} {'objects':>8} {'up s':>7} {'drifts':>7} {'load 1/5/15':>14}")
        stacks: dict[str, LocalStack] = {}
        for name, section in sections.items():
            config = {"rabbitmq:endpoint": broker.management_url, f"{NAMESPACE}:rabbitmq": section}
            stacks[name] = cleanup.enter_context(LocalStack(cli, name, config, credentials))
            start = time.perf_counter()
            output = stacks[name].run("up", "--yes", "--skip-preview", "--parallel", str(PARALLEL))
            seconds = time.perf_counter() - start
            parsed = parse_stack_config({"rabbitmq": section}, name).rabbitmq
            assert parsed is not None
            drifts = len(verify_rabbitmq(api, parsed))
            print(f"{name:>8} {len(created_provider_objects(output)):>8} {seconds:>7.1f} {drifts:>7} {load():>14}")
        leaving = "team1"
        team = list(sections[leaving]["endpoints"])
        before = objects_of_others(api.definitions(VHOST), team, leaving)
        start = time.perf_counter()
        stacks[leaving].run("destroy", "--yes", "--skip-preview", "--parallel", str(PARALLEL))
        seconds = time.perf_counter() - start
        unchanged = objects_of_others(api.definitions(VHOST), team, leaving) == before
        others = [name for name in sections if name != leaving]
        drifts = 0
        for name in others:
            parsed = parse_stack_config({"rabbitmq": sections[name]}, name).rabbitmq
            assert parsed is not None
            drifts += len(verify_rabbitmq(api, parsed))
        print(
            f"destroy {leaving}: {seconds:.1f} s; every object of the graph and the other teams unchanged: "
            f"{'yes' if unchanged else 'NO'}; drifts of the {len(others)} other stacks: {drifts}; load {load()}",
            flush=True,
        )


if __name__ == "__main__":
    main()
