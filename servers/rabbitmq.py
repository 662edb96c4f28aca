"""RabbitMQ and moto as the tests and benchmarks drive them: the demo's servers (``nsb_delays.brokers.demo_servers``)
plus what only a test or a benchmark does to them — restart or crash a broker, run ``rabbitmqctl``, read its version
and its Erlang VM's PID, set ``rabbit`` application settings, reset moto — and Debian 13's RabbitMQ 4.0 in a chroot.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import requests

from nsb_delays.brokers.demo_servers import (
    HOST,
    DemoMoto,
    DemoRabbitMq,
    ServiceUnavailable,
    process_group_alive,
)
from nsb_delays.brokers.management import ManagementApi

from . import PROJECT

# `make setup` (as root) builds it: debootstrap --variant=minbase --include=rabbitmq-server trixie.
RABBITMQ4_ROOT = Path(os.environ.get("NSB_RABBITMQ4_ROOT") or PROJECT / ".cache" / "rabbitmq-4.0")
RABBITMQ4_HINT = (
    f"run `make setup` as root: it builds Debian 13's rabbitmq-server 4.0 into {RABBITMQ4_ROOT} with "
    "debootstrap (apt-get install debootstrap first if it is missing; NSB_RABBITMQ4_ROOT=DIR shares one "
    "built root between checkouts)"
)


class BrokerCommandFailed(RuntimeError):
    """A RabbitMQ command-line tool (rabbitmqctl) refused or failed; the message has its output."""


@dataclass
class LocalRabbitMq(DemoRabbitMq):
    """The demo's broker (Debian's 3.10, configured and launched the same way) with the tests' controls."""

    # Settings of the ``rabbit`` application that rabbitmq.conf cannot express (advanced.config), e.g.
    # ``dead_letter_worker_consumer_prefetch``; read when the broker starts.
    rabbit_app_env: dict[str, int] = field(default_factory=dict)

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

    def api(self) -> requests.Session:
        session = requests.Session()
        session.auth = (self.username, self.password)
        return session


@dataclass
class ChrootRabbitMq(LocalRabbitMq):
    """Debian 13's RabbitMQ 4.0 (Erlang 27) from a chroot, configured exactly like ``LocalRabbitMq``.

    Only the launch differs. The server (and ``rabbitmqctl``) starts in a private mount namespace (``unshare --mount
    --propagation private``) that mounts ``proc``, binds ``/dev``, puts a tmpfs on the root's ``/tmp``
    and binds this broker's state folder on the root's ``/mnt`` before it ``chroot``s: those mounts
    exist only for the broker's processes and vanish with the last of them, so a killed test leaves
    no mount behind and any number of brokers share one read-only-in-practice root at once. epmd (the
    root's own, Erlang 27) needs no mounts and runs through plain ``chroot``. Both are stopped by PID
    (their process groups) like the Debian 12 broker.
    """

    root: Path = RABBITMQ4_ROOT

    @property
    def broker_state_dir(self) -> Path:
        return Path("/mnt")

    @property
    def rabbitmq_bin(self) -> Path:
        return Path("/usr/lib/rabbitmq/bin")

    def check_installed(self) -> None:
        if os.geteuid() != 0:
            raise ServiceUnavailable(f"RabbitMQ 4.0 runs in a chroot and needs root; {RABBITMQ4_HINT}")
        if not (self.root / "usr/lib/rabbitmq/bin/rabbitmq-server").exists():
            raise ServiceUnavailable(f"RabbitMQ 4.0 root {self.root} is not built; {RABBITMQ4_HINT}")
        if not shutil.which("unshare") or not shutil.which("chroot"):
            raise ServiceUnavailable("unshare and chroot (util-linux, coreutils) are needed for RabbitMQ 4.0")

    def tool_command(self, tool: str, *args: str) -> list[str]:
        """The server and the CLI tools (rabbitmqctl must be Erlang 27's too) run inside the root."""
        root = shlex.quote(str(self.root))
        command = " ".join(shlex.quote(part) for part in (str(self.rabbitmq_bin / tool), *args))
        mounts = " && ".join(
            [
                f"mount -t proc proc {root}/proc",
                f"mount --rbind /dev {root}/dev",
                f"mount -t tmpfs tmpfs {root}/tmp",
                f"mount --bind {shlex.quote(str(self.state_dir))} {root}{self.broker_state_dir}",
                f"exec chroot {root} {command}",
            ]
        )
        return ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", mounts]

    def epmd_command(self) -> list[str]:
        return ["chroot", str(self.root), "/usr/bin/epmd", "-port", str(self.epmd_port), "-address", HOST]


def statistics_settled(api: ManagementApi, vhost: str, timeout: float = 120) -> float:
    """Seconds until every queue of ``vhost`` shows its statistics as of its policy: an effective policy definition,
    and on RabbitMQ 4.x a ``delivery_limit`` equal to that definition's ``delivery-limit``. Both are statistics the
    queue reports every few seconds (``collect_statistics_interval``): right after a policy changes the API shows
    the old limit (4.0's default 20) beside the new policy, and ``verify`` would report it. Returns after
    ``timeout`` either way, so a check that follows reports what never settled."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        queues = api.queues(vhost)
        stale = [
            q
            for q in queues
            if "effective_policy_definition" not in q
            or (
                "delivery_limit" in q
                and "delivery-limit" in (q["effective_policy_definition"] or {})
                and q["delivery_limit"] != q["effective_policy_definition"]["delivery-limit"]
            )
        ]
        if not stale:
            break
        time.sleep(0.5)
    return time.monotonic() - start


@dataclass
class LocalMoto(DemoMoto):
    """The demo's moto server, which a test empties between uses."""

    def reset(self) -> None:
        requests.post(f"{self.endpoint_url}/moto-api/reset", timeout=5)
