"""A thousand endpoints in one stack (issue 29), through the real engine on each broker the suite runs (3.10, 4.3).

- **Up:** ``pulumi up`` with PULUMI_SKIP_CHECKPOINTS of the graph and 1,000 endpoints creates every object of the
  model, with the stack's combined parking and delivery-limit policies (4.x declares the latter); then a no-change
  ``preview --expect-no-changes``, a ``refresh --expect-no-changes`` and ``verify`` reporting no drift, right away:
  it computes each object's policy from the definitions and waits for no statistic.
- **Killed midway:** the same ``up`` SIGKILLed (its process group) once 30 % of the model's queues exist. With
  PULUMI_SKIP_CHECKPOINTS the DIY backend writes the state only when the update ends (pulumi/pulumi
  pkg/backend/snapshot.go ``NewSnapshotManager`` picks ``unsafeServiceLoop``, which saves only on close), so the
  state is what it was before (no resource, no pending operation), and the update's lock file stays
  (pkg/backend/diy/backend.go ``Update`` takes ``Lock`` and releases it in a ``defer`` the kill never runs): the
  next ``up`` is refused until ``pulumi cancel`` deletes it (``CancelCurrentUpdate``). The recovery, as
  docs/how-to/ci.md shows it: ``pulumi cancel --yes``, then the same ``pulumi up``, which declares again what
  exists (the provider's create is a declaration, cyrilgdn/terraform-provider-rabbitmq rabbitmq/resource_queue.go
  ``CreateQueue`` -> ``declareQueue``): no drift, no object twice, nothing replaced or deleted.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from nsb_delays.brokers.management import ManagementApi, path_segment
from nsb_delays.brokers.verify import verify_rabbitmq
from nsb_delays.stack.config import RabbitMqConfig, parse_stack_config
from servers.rabbitmq import LocalRabbitMq
from tests.engine.conftest import Stack
from tests.engine.test_adoption_and_change import configure, section, summary
from tests.scale.conftest import ENDPOINTS, PARALLEL, UP_TIMEOUT, endpoint_names, opted_in
from tests.services import session_members, wait_gone

pytestmark = opted_in
KILL_AT_SHARE = 0.3  # of the model's queues on the broker when the up is killed


def up(stack: Stack, *extra: str) -> str:
    result = stack.run("up", "--yes", "--skip-preview", "--parallel", PARALLEL, *extra, timeout=UP_TIMEOUT)
    return result.stdout


def model_size(config: RabbitMqConfig) -> int:
    topology = config.topology
    return len(topology.exchanges) + len(topology.queues) + len(topology.bindings) + len(topology.policies)


def parsed(raw: dict[str, Any], stack: Stack) -> RabbitMqConfig:
    config = parse_stack_config({"rabbitmq": raw}, stack.name).rabbitmq
    assert config is not None
    return config


def new_scale_stack(
    rabbitmq: LocalRabbitMq, new_vhost, new_stack, broker_version: tuple[int, ...], label: str
) -> tuple[Stack, RabbitMqConfig]:
    """A new stack configured for the graph and ``ENDPOINTS`` endpoints in a vhost of its own, and its parsed config
    (parsed with the stack's name, which names its combined policies)."""
    vhost = new_vhost(f"scale-{label}")
    stack = new_stack(rabbitmq, label)
    raw = section(vhost, broker_version, endpoint_names())
    configure(stack, rabbitmq, raw)
    return stack, parsed(raw, stack)


def assert_no_drift(management: ManagementApi, config: RabbitMqConfig) -> None:
    assert verify_rabbitmq(management, config) == []


def test_a_thousand_endpoints_up_then_no_change(
    rabbitmq: LocalRabbitMq, management: ManagementApi, new_vhost, new_stack, broker_version: tuple[int, ...], figure
) -> None:
    stack, config = new_scale_stack(rabbitmq, new_vhost, new_stack, broker_version, "scale")
    vhost = config.vhost
    assert bool(config.topology.delivery_limit_policies) == (broker_version >= (4, 0))
    start = time.monotonic()
    output = up(stack)
    up_seconds = time.monotonic() - start
    assert state_objects(stack) == model_size(config), output[-3000:]
    assert {p["name"] for p in management.policies(vhost)} == {p.name for p in config.topology.policies}
    start = time.monotonic()
    stack.run("preview", "--expect-no-changes", "--parallel", PARALLEL, timeout=UP_TIMEOUT)
    preview_seconds = time.monotonic() - start
    start = time.monotonic()
    refreshed = stack.run(
        "refresh", "--yes", "--skip-preview", "--expect-no-changes", "--parallel", PARALLEL, timeout=UP_TIMEOUT
    )
    refresh_seconds = time.monotonic() - start
    assert set(summary(refreshed.stdout)) == {"unchanged"}, refreshed.stdout[-3000:]
    assert_no_drift(management, config)
    figure(
        f"scale {rabbitmq.version()}: {ENDPOINTS} endpoints, {model_size(config)} objects: up {up_seconds:.0f} s, "
        f"no-change preview {preview_seconds:.0f} s, refresh {refresh_seconds:.0f} s, load {os.getloadavg()[0]:.1f}"
    )


def lock_files(stack: Stack) -> list[Path]:
    """The DIY backend's lock files of ``stack`` (pulumi/pulumi pkg/backend/diy/lock.go ``lockPath``:
    ``.pulumi/locks/<stack's qualified name>/<lock id>.json``)."""
    return [path for path in (stack.engine.backend / ".pulumi" / "locks").rglob("*.json") if stack.name in str(path)]


def exported_state(stack: Stack) -> dict[str, Any]:
    exported = stack.engine.run("stack", "export", "--stack", stack.name, cwd=stack.project_dir, env=stack.env)
    deployment: dict[str, Any] = json.loads(exported.stdout)["deployment"]
    return deployment


def state_objects(stack: Stack) -> int:
    """The RabbitMQ objects in the stack's state (an up's output of thousands of lines is no reliable count)."""
    return sum(1 for r in exported_state(stack).get("resources") or [] if r["type"].startswith("rabbitmq:"))


def queue_count(management: ManagementApi, vhost: str) -> int:
    return len(management.request("GET", f"queues/{path_segment(vhost)}?columns=name"))


def kill_midway(stack: Stack, management: ManagementApi, vhost: str, kill_at: int) -> tuple[int, list[str]]:
    """Start ``pulumi up``, SIGKILL its process group once ``kill_at`` queues exist; the queues then and the plugin
    processes that outlived the group (the engine starts each plugin in a process group of its own: pulumi/pulumi
    sdk/go/common/util/cmdutil/child_unix.go ``RegisterProcessGroup``), which are then killed too."""
    process = stack.start("up", "--yes", "--skip-preview", "--parallel", PARALLEL)
    survivors: list[int] = []
    try:
        while (queues := queue_count(management, vhost)) < kill_at and process.poll() is None:
            time.sleep(0.2)
        assert process.poll() is None, f"the up ended before {kill_at} queues existed: {process.communicate()}"
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        survivors = session_members(process.pid)
        names = [Path(f"/proc/{pid}/comm").read_text().strip() for pid in survivors if Path(f"/proc/{pid}").exists()]
        return queues, names
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        for pid in survivors or session_members(process.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        wait_gone(session_members(process.pid))


def test_an_up_killed_midway_recovers_with_cancel_and_the_same_up(
    rabbitmq: LocalRabbitMq, management: ManagementApi, new_vhost, new_stack, broker_version: tuple[int, ...], figure
) -> None:
    stack, config = new_scale_stack(rabbitmq, new_vhost, new_stack, broker_version, "killed")
    vhost = config.vhost
    queues_at_kill, survivors = kill_midway(stack, management, vhost, int(len(config.topology.queues) * KILL_AT_SHARE))

    # what the kill left: objects on the broker, a state without them, the update's lock
    assert queues_at_kill < len(config.topology.queues)
    state = exported_state(stack)
    assert not [r for r in state.get("resources") or [] if r["type"].startswith("rabbitmq:")], state
    assert not state.get("pending_operations"), state
    [lock] = lock_files(stack)
    refused = stack.run("up", "--yes", "--skip-preview", check=False)
    assert refused.returncode != 0
    assert "the stack is currently locked by 1 lock(s)" in refused.output, refused.explain()

    # the recovery: cancel (deletes the lock), the same up
    stack.engine.run("cancel", "--yes", "--stack", stack.name, cwd=stack.project_dir, env=stack.env)
    assert not lock.exists() and not lock_files(stack)
    output = up(stack)
    counts = summary(output)
    assert not {"replaced", "deleted", "updated"} & set(counts), output[-3000:]
    assert state_objects(stack) == model_size(config), output[-3000:]
    stack.run("preview", "--expect-no-changes", "--parallel", PARALLEL, timeout=UP_TIMEOUT)
    assert_no_drift(management, config)
    topology = config.topology
    bindings = [b for b in management.bindings(vhost) if b["source"]]  # not the default exchange's
    assert len(bindings) == len(topology.bindings)
    assert sorted(p["name"] for p in management.policies(vhost)) == sorted(p.name for p in topology.policies)
    assert len(management.queues(vhost)) == len(topology.queues)
    own_exchanges = [e for e in management.exchanges(vhost) if e["name"] and not e["name"].startswith("amq.")]
    assert len(own_exchanges) == len(topology.exchanges)
    figure(
        f"scale {rabbitmq.version()}: up killed at {queues_at_kill} of {len(topology.queues)} queues; outlived the "
        f"process group: {', '.join(survivors) or 'nothing'}; recovered by cancel + up: {counts}"
    )
