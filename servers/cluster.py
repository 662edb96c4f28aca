"""A RabbitMQ cluster on loopback: three nodes, one Erlang cookie, one private epmd, joined by rabbitmqctl.

Each node is a ``servers.rabbitmq.LocalRabbitMq`` (or a launcher derived from it, such as the RabbitMQ 4.0
chroot) with its own node name, ports and state folder; the cluster only adds what makes them one
cluster: the same ``.erlang.cookie`` in every node's home, one epmd on a free port that every node
(and every ``rabbitmqctl``) registers with and looks the others up in, and the join itself, as an
operator does it: ``rabbitmqctl stop_app``, ``join_cluster <first node>``, ``start_app``.

What the delay graph gets from it, per RabbitMQ's source (3.10.8 and 4.0.5):
- a quorum queue declared on the cluster gets a member on every node: without
  ``x-quorum-initial-group-size`` its size is the ``quorum_cluster_size`` setting, default 3
  (``rabbit_quorum_queue:get_default_quorum_initial_group_size/1``);
- its leader is the node that declared it: the default ``queue_leader_locator`` is ``client-local``
  (``rabbit_queue_location:leader_locator0/1``), so a graph applied through one node's management
  API is led by that node until a fault moves the leaders;
- ``rabbitmqctl forget_cluster_node`` also removes the node from every quorum queue
  (``forget_cluster_node_command.ex`` calls ``rabbit_quorum_queue:shrink_all/1``).

Every process is ours and stopped by PID (each node's process group, then the one epmd).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from nsb_delays.brokers.management import ManagementApi
from nsb_delays.infra.commands.demo.servers import free_port, stop_process_group, wait_until

from .rabbitmq import BrokerCommandFailed, LocalRabbitMq


@dataclass(frozen=True)
class QuorumMembers:
    """A quorum queue's replicas as the broker reports them (``GET /api/queues``)."""

    queue: str
    leader: str
    members: tuple[str, ...]
    online: tuple[str, ...]
    messages: int


@dataclass
class RabbitMqCluster:
    """``size`` nodes of ``node_type`` clustered on 127.0.0.1; ``amqp_urls`` lists every node for failover."""

    node_type: Callable[..., LocalRabbitMq] = LocalRabbitMq
    size: int = 3
    epmd_port: int = field(default_factory=free_port)
    cookie: str = field(default_factory=lambda: secrets.token_hex(20).upper())
    # ``rabbit`` application settings for every node (advanced.config), e.g. the dead-letter worker's.
    rabbit_app_env: dict[str, int] = field(default_factory=dict)
    nodes: list[LocalRabbitMq] = field(init=False)

    def __post_init__(self) -> None:
        self.nodes = [
            self.node_type(epmd_port=self.epmd_port, rabbit_app_env=dict(self.rabbit_app_env)) for _ in range(self.size)
        ]

    @property
    def first(self) -> LocalRabbitMq:
        return self.nodes[0]

    @property
    def amqp_urls(self) -> list[str]:
        return [node.amqp_url for node in self.nodes]

    def node_named(self, name: str) -> LocalRabbitMq:
        return next(node for node in self.nodes if node.node == name)

    def running(self) -> list[LocalRabbitMq]:
        """Nodes whose broker process we have not stopped (whether or not they answer yet)."""
        return [node for node in self.nodes if node.server is not None and node.server.poll() is None]

    def api(self) -> ManagementApi:
        """The management API of the first node we have not stopped (any node answers for the cluster)."""
        node = self.running()[0]
        return ManagementApi(node.management_url, node.username, node.password)

    # --- forming and stopping -------------------------------------------------------------------------

    def _write_cookie(self, node: LocalRabbitMq) -> None:
        """The shared secret in the node's $HOME (owner-only, or Erlang refuses it); the CLI reads it too."""
        cookie = node.state_dir / "home" / ".erlang.cookie"
        cookie.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            cookie.chmod(0o600)
        cookie.write_text(self.cookie)
        cookie.chmod(0o400)

    def start(self, timeout: float = 180) -> RabbitMqCluster:
        for node in self.nodes:
            node.check_installed()
        try:
            for node in self.nodes:
                node.write_config()
                self._write_cookie(node)
            self.first.start_epmd()  # the one epmd: every node has epmd_port = self.epmd_port
            for node in self.nodes:  # boot in parallel, then wait for each
                node.launch_server()
            for node in self.nodes:
                node.wait_ready(timeout)
            joining = self.nodes[1:]
            with ThreadPoolExecutor(len(self.nodes)) as pool:  # each ctl is an Erlang VM start: overlap them
                list(pool.map(lambda node: node.ctl("stop_app"), joining))
                for node in joining:  # one schema change at a time
                    node.ctl("join_cluster", self.first.node)
                list(pool.map(lambda node: node.ctl("start_app"), joining))
            self.wait_members({node.node for node in self.nodes}, timeout)
        except BaseException:  # also Ctrl-C while forming: leave nothing running
            self.stop()
            raise
        return self

    def cluster_nodes(self) -> dict[str, bool]:
        """Node name -> running, as the cluster itself reports it (``GET /api/nodes``)."""
        return {node["name"]: bool(node.get("running")) for node in self.api().request("GET", "nodes")}

    def wait_members(self, running: set[str], timeout: float = 120) -> None:
        """Until the cluster reports exactly ``running`` as its running nodes."""
        wait_until(
            lambda: {name for name, up in self.cluster_nodes().items() if up} == running,
            f"cluster with running nodes {sorted(running)}",
            timeout,
        )

    def stop(self) -> None:
        """Stop every node (SIGTERM to all at once, so no node waits for the others' shutdown), then epmd."""
        for node in self.running():
            assert node.server is not None
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.server.pid, signal.SIGTERM)
        for node in self.nodes:
            node.stop_broker()
        stop_process_group(self.first.epmd, timeout=5)
        self.first.epmd = None

    def __enter__(self) -> RabbitMqCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        for node in self.nodes:
            shutil.rmtree(node.state_dir, ignore_errors=True)

    # --- faults ---------------------------------------------------------------------------------------

    def stop_node(self, node: LocalRabbitMq) -> None:
        """A clean stop (SIGTERM: RabbitMQ shuts down in order); its data stays for ``start_node``."""
        node.stop_broker()

    def kill_node(self, node: LocalRabbitMq) -> None:
        """SIGKILL: the node vanishes mid-work, as in a crash or an OOM kill."""
        node.kill_broker()

    def start_node(self, node: LocalRabbitMq, timeout: float = 180) -> None:
        """Start a stopped node with its data; returns when the cluster counts it as running again."""
        node.launch_server()
        node.wait_ready(timeout, "RabbitMQ node restart")
        self.wait_members({n.node for n in self.running()}, timeout)

    def restart_node(self, node: LocalRabbitMq, timeout: float = 180) -> None:
        """Stop a node cleanly and start it again: the recovery for a node whose dead-letter supervisor is gone."""
        self.stop_node(node)
        self.start_node(node, timeout)

    # --- the at-least-once dead-letter workers ----------------------------------------------------------

    def dead_letter_supervisor_running(self, node: LocalRabbitMq) -> bool:
        """Whether ``node`` can still run at-least-once dead-letter workers (its ``rabbit_fifo_dlx_sup`` is alive).

        Every worker of a node is a child of that one registered supervisor, and a quorum queue starts its
        worker only on becoming leader (``rabbit_fifo_dlx:state_enter/4`` -> ``start_worker/1``). When the
        supervisor exceeds its restart intensity it exits with ``shutdown``; ``rabbit_sup`` started it as a
        ``transient`` child (``rabbit_sup:start_supervisor_child/3``), so it is not restarted: from then on
        the level queues that node leads dead-letter nothing, their expired messages wait as
        ``messages_dlx``. On 3.10.8 the intensity is 1 restart in 5 s with ``permanent`` workers, and a worker
        whose ``{dlx, checkout}`` reached a member that was no longer leader crashes
        (``rabbit_fifo_dlx_client:process_command/3`` returns ``{error, ra_command_failed}``): two such
        crashes after a leader change are enough. 4.0.5 allows 100 a second with ``transient`` workers
        (rabbitmq/rabbitmq-server#7677); rabbitmq/rabbitmq-server#16652 is the same end state on 4.2.4.
        """
        return node.ctl("eval", "is_pid(whereis(rabbit_fifo_dlx_sup)).").strip() == "true"

    def dead_letter_workers(self, node: LocalRabbitMq) -> int:
        """At-least-once dead-letter workers running on ``node``: one per such quorum queue it leads."""
        answer = node.ctl(
            "eval",
            "case whereis(rabbit_fifo_dlx_sup) of undefined -> 0; Sup -> length(supervisor:which_children(Sup)) end.",
        )
        return int(answer.strip())

    def stop_dead_letter_supervisor(self, node: LocalRabbitMq) -> None:
        """The state a leader change can leave on 3.10.8, made on purpose: ``node``'s dead-letter workers crash
        until their supervisor gives up (on 3.10.8 the second crash does it; 4.0.5 takes over 100 in a second).

        Only workers are killed, never the supervisor itself: its ``transient`` exit with ``shutdown`` is what
        the intensity limit produces, and ``rabbit_sup`` (``one_for_all``, intensity 0) leaves it stopped.
        """
        answer = node.ctl(
            "eval",
            "Crash = fun Crash(0) -> still_running;"
            " Crash(N) -> case whereis(rabbit_fifo_dlx_sup) of"
            "   undefined -> gone;"
            "   Sup -> Workers = try supervisor:which_children(Sup) catch _:_ -> [] end,"
            "          [exit(Pid, kill) || {_, Pid, _, _} <- Workers, is_pid(Pid)],"
            "          timer:sleep(5), Crash(N - 1) end end,"
            " Crash(400).",
        )
        if answer.strip() != "gone":
            raise BrokerCommandFailed(f"{node.node}: the dead-letter supervisor is still running ({answer.strip()})")

    def forget_node(self, node: LocalRabbitMq) -> str:
        """Remove a stopped node from the cluster and from every quorum queue's members (from a running peer)."""
        return self.running()[0].ctl("forget_cluster_node", node.node)

    # --- what the cluster reports ---------------------------------------------------------------------

    def quorum_members(self, vhost: str, queues: list[str] | None = None) -> dict[str, QuorumMembers]:
        """Leader, members and online members of the quorum queues of ``vhost`` (only ``queues`` if given)."""
        reported: dict[str, QuorumMembers] = {}
        for queue in self.api().queues(vhost):
            if queue.get("type") != "quorum" or (queues is not None and queue["name"] not in queues):
                continue
            reported[queue["name"]] = QuorumMembers(
                queue["name"],
                str(queue.get("leader", "")),
                tuple(sorted(queue.get("members", []))),
                tuple(sorted(queue.get("online", []))),
                int(queue.get("messages", 0)),
            )
        return reported

    def wait_quorum_online(self, vhost: str, queues: list[str], timeout: float = 120) -> None:
        """Until each of ``queues`` has a leader on a running node and every member on a running node online.

        A member on a node stopped for good (and not forgotten) stays in ``members`` and out of ``online``:
        the queue runs on the majority left, which is what an operator gets from losing a node.
        """

        def healthy() -> bool:
            running = {node.node for node in self.running()}
            reported = self.quorum_members(vhost, queues)
            return len(reported) == len(queues) and all(
                q.leader in running and q.members and set(q.online) == set(q.members) & running
                for q in reported.values()
            )

        wait_until(healthy, f"every quorum member of {len(queues)} queues in {vhost!r} online", timeout)
