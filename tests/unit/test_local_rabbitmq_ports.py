"""A restarted node's Erlang distribution port: kept while free, replaced when something else took it."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from nsb_delays.infra.commands.demo.servers import DEFAULT_PORT_RANGE, HOST, free_port, port_is_free
from servers.rabbitmq import LocalRabbitMq
from tests.conftest import worker_port_range


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


def test_servers_take_ports_below_the_ephemeral_range_that_client_connections_draw_from(monkeypatch) -> None:
    monkeypatch.delenv("NSB_LOCAL_PORT_RANGE", raising=False)
    low, high = DEFAULT_PORT_RANGE
    ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [free_port() for _ in range(50)]
    assert all(low <= port <= high < ephemeral_low for port in ports)
    assert len(set(ports)) == 50, "a port handed out twice by one process"


def test_each_pytest_worker_gets_its_own_slice_of_the_range(monkeypatch) -> None:
    slices = [worker_port_range(f"gw{i}", 2, *DEFAULT_PORT_RANGE) for i in range(2)]
    assert slices == ["10000-21383", "21384-32767"]
    monkeypatch.setenv("NSB_LOCAL_PORT_RANGE", slices[1])
    assert all(21384 <= free_port() <= 32767 for _ in range(20))


def test_a_bad_port_range_setting_names_the_variable_and_the_rule(monkeypatch) -> None:
    monkeypatch.setenv("NSB_LOCAL_PORT_RANGE", "20000")
    with pytest.raises(ValueError, match=r"NSB_LOCAL_PORT_RANGE='20000': expected LOW-HIGH"):
        free_port()
    monkeypatch.setenv("NSB_LOCAL_PORT_RANGE", "30000-20000")
    with pytest.raises(ValueError, match=r"1024 <= LOW < HIGH <= 65535"):
        free_port()
