"""A restarted node's Erlang distribution port: kept while free, replaced when something else took it."""

from __future__ import annotations

import socket
from pathlib import Path

from nsb_delays.brokers.local import HOST, LocalRabbitMq, port_is_free


def test_a_restart_keeps_the_dist_port_while_nothing_holds_it(tmp_path: Path) -> None:
    node = LocalRabbitMq(state_dir=tmp_path)
    before = node.dist_port
    assert node.claim_dist_port() == before


def test_a_restart_takes_a_fresh_dist_port_when_another_process_listens_on_the_old_one(tmp_path: Path) -> None:
    node = LocalRabbitMq(state_dir=tmp_path)
    taken, node_name, amqp = node.dist_port, node.node, node.amqp_port
    with socket.socket() as squatter:  # what happened on a shared machine while a node was down
        squatter.bind((HOST, taken))
        squatter.listen()
        assert not port_is_free(taken)
        fresh = node.claim_dist_port()
        assert fresh != taken and port_is_free(fresh)
    # Peers find the node through epmd by its name; clients by its AMQP port: neither moves.
    assert (node.node, node.amqp_port, node.dist_port) == (node_name, amqp, fresh)
