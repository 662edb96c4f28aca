"""RabbitMQ and moto as the tests and benchmarks drive them: the demo's servers
(``nsb_delays.infra.commands.demo.servers``) plus what only a test or a benchmark does to them — restart or crash a
broker, run ``rabbitmqctl``, read its version and its Erlang VM's PID, set ``rabbit`` application settings, reset
moto — and Debian 13's RabbitMQ 4.0 and Debian forky's 4.3, each in a chroot.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import requests

from nsb_delays.infra.commands.demo.servers import (
    RABBITMQ_4_0,
    RABBITMQ_4_3,
    DemoChrootRabbitMq,
    DemoMoto,
    DemoRabbitMq,
    RabbitMqRelease,
    process_group_alive,
)

from . import PROJECT

# `make setup` (as root) builds them: debootstrap --variant=minbase --include=rabbitmq-server trixie / forky.
RABBITMQ4_ROOT = RABBITMQ_4_0.root(PROJECT)
RABBITMQ43_ROOT = RABBITMQ_4_3.root(PROJECT)


class BrokerCommandFailed(RuntimeError):
    """A RabbitMQ command-line tool (rabbitmqctl) refused or failed; the message has its output."""


@dataclass
class LocalRabbitMq(DemoRabbitMq):
    """The demo's broker (Debian's 3.10, configured and launched the same way) with the tests' controls."""

    # Settings of the ``rabbit`` application that rabbitmq.conf cannot express (advanced.config), e.g.
    # ``dead_letter_worker_consumer_prefetch``; read when the broker starts.
    rabbit_app_env: dict[str, int] = field(default_factory=dict)
    # rabbitmq.conf lines after the demo's own, e.g. ``management_agent.disable_metrics_collector = true``.
    extra_config: tuple[str, ...] = ()

    def write_config(self) -> None:
        super().write_config()
        if self.extra_config:
            with (self.state_dir / "rabbitmq.conf").open("a") as conf:
                conf.write("".join(f"{line}\n" for line in self.extra_config))

    def advanced_config(self) -> str:
        settings = ", ".join(f"{{{name}, {value}}}" for name, value in self.rabbit_app_env.items())
        return f"[{{rabbit, [{settings}]}}].\n"

    def version(self) -> str:
        """The broker's own ``rabbitmq_version`` (``3.10.8``, ``4.0.5``)."""
        response = requests.get(f"{self.management_url}/api/overview", auth=(self.username, self.password), timeout=5)
        response.raise_for_status()
        return str(response.json()["rabbitmq_version"])

    def kill_broker(self) -> None:
        """SIGKILL the broker's whole process group: a crash, no clean shutdown (epmd and state stay).

        Returns once every member is gone (a chroot broker's mounts, and so its state folder, are
        released only then)."""
        if self.server is not None:
            group = self.server.pid
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
            self.server.wait(30)
            deadline = time.monotonic() + 10
            while process_group_alive(group) and time.monotonic() < deadline:
                time.sleep(0.05)
        self.server = None

    def restart(self, timeout: float = 90) -> None:
        self.stop_broker()
        self.launch_server()
        self.wait_ready(timeout, "RabbitMQ restart")

    def ctl(self, *args: str, timeout: float = 120) -> str:
        """``rabbitmqctl -n <this node> ARGS`` with the broker's environment (its cookie, epmd port); stdout."""
        command = self.tool_command("rabbitmqctl", "-n", self.node, *args)
        tool = subprocess.Popen(
            command,
            env=self._env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,  # its own group: a hung CLI VM is killed with everything it started
        )
        try:
            stdout, stderr = tool.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(tool.pid, signal.SIGKILL)
            tool.communicate()
            raise BrokerCommandFailed(
                f"rabbitmqctl {' '.join(args)} on {self.node}: no answer in {timeout:.0f} s"
            ) from None
        result = subprocess.CompletedProcess(command, tool.returncode, stdout, stderr)
        if result.returncode:
            raise BrokerCommandFailed(
                f"rabbitmqctl {' '.join(args)} on {self.node} exited with {result.returncode}: "
                f"{(result.stderr or result.stdout).strip()[-1000:]}"
            )
        return result.stdout

    def beam_pid(self) -> int | None:
        """The Erlang VM (``beam.smp``) among the broker's processes, for its RSS."""
        if self.server is None:
            return None
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError):
                name, rest = stat.read_text().split(" (", 1)[1].rsplit(")", 1)
                if name.startswith("beam") and int(rest.split()[3]) == self.server.pid:
                    return int(stat.parent.name)
        return None

    def another(self, extra_config: tuple[str, ...] | None = None) -> LocalRabbitMq:
        """A second broker of this kind and version (``extra_config``: its rabbitmq.conf lines, default this one's): its
        own node, ports, epmd and state, nothing started."""
        return type(self)(extra_config=self.extra_config if extra_config is None else extra_config)

    @contextlib.contextmanager
    def statistics_frozen(self) -> Iterator[None]:
        """The management API's view of every queue held as it is: the processes that copy queue statistics into it
        (``queue_metrics_metrics_collector`` and the other ``queue_*`` collectors of rabbitmq_management_agent) are
        suspended (``sys:suspend``) until the block ends, so what the API shows of a queue's policy lags the broker
        for as long as a test needs, whatever the machine's load."""
        collectors = (
            '[P || N <- registered(), lists:prefix("queue_", atom_to_list(N)), '
            'lists:suffix("metrics_collector", atom_to_list(N)), P <- [whereis(N)], is_pid(P)]'
        )
        found = self.ctl("eval", f"length({collectors}).").strip()
        if found in ("", "0"):
            raise BrokerCommandFailed(f"no queue metrics collector runs on {self.node} (statistics off?)")
        self.ctl("eval", f"[sys:suspend(P) || P <- {collectors}], ok.")
        try:
            yield
        finally:
            self.ctl("eval", f"[sys:resume(P) || P <- {collectors}], ok.")

    def api(self) -> requests.Session:
        session = requests.Session()
        session.auth = (self.username, self.password)
        return session


@dataclass
class ChrootRabbitMq(DemoChrootRabbitMq, LocalRabbitMq):
    """A Debian release's RabbitMQ from its chroot (``DemoChrootRabbitMq``: Debian 13's 4.0 by default, Debian
    forky's 4.3 with ``release=RABBITMQ_4_3``) with the tests' controls; its root is this checkout's unless the
    release's variable names another."""

    release: RabbitMqRelease = RABBITMQ_4_0

    @property
    def root(self) -> Path:
        return self.chroot or self.release.root(PROJECT)

    def another(self, extra_config: tuple[str, ...] | None = None) -> LocalRabbitMq:
        config = self.extra_config if extra_config is None else extra_config
        return ChrootRabbitMq(release=self.release, chroot=self.chroot, extra_config=config)


def chroot_broker(release: RabbitMqRelease) -> Callable[..., LocalRabbitMq]:
    """What ``BROKERS`` and ``RabbitMqCluster`` call to make a broker of ``release``."""
    return functools.partial(ChrootRabbitMq, release=release)


# Every broker the tests and benchmarks can start, by MAJOR.MINOR (the tests' id suffix `rabbitmq-4.3`, the benches'
# NSB_BENCH_RABBITMQ / NSB_BENCH_PULUMI_VERSIONS): Debian 12's 3.10 on the machine, 4.0 and 4.3 from their chroots.
BROKERS_BY_VERSION: dict[str, Callable[..., LocalRabbitMq]] = {
    "3.10": LocalRabbitMq,
    "4.0": chroot_broker(RABBITMQ_4_0),
    "4.3": chroot_broker(RABBITMQ_4_3),
}


def broker_of(version: str, setting: str) -> Callable[..., LocalRabbitMq]:
    """The broker of ``version``, given by the variable ``setting``: a SystemExit naming the choices otherwise."""
    if version not in BROKERS_BY_VERSION:
        raise SystemExit(f"{setting}={version}: give one of {', '.join(BROKERS_BY_VERSION)}")
    return BROKERS_BY_VERSION[version]


@dataclass
class LocalMoto(DemoMoto):
    """The demo's moto server, which a test empties between uses."""

    def reset(self) -> None:
        requests.post(f"{self.endpoint_url}/moto-api/reset", timeout=5)
