"""The demo's own servers: a private, loopback-only RabbitMQ and moto (SQS, CloudFormation) for
``nsb-delays demo``, and the port and process helpers they need.

Each server gets its own state folder and free ports, is started by us and stopped by us by PID,
and never listens beyond 127.0.0.1. Debian's ``rabbitmq-server`` provides the broker (``make setup``
installs it), or a newer Debian release's from a chroot root ``make setup`` builds (``DemoChrootRabbitMq``); a
missing one raises ``ServiceUnavailable`` with the install hint.

Only what the demo runs ships here. The tests and benchmarks build their servers on these in
``servers/`` (not installed): ``servers/rabbitmq.py`` adds what only they do to a broker (restarts,
crashes, ``rabbitmqctl``), ``servers/cluster.py`` is the three-node cluster, ``servers/databases.py``
and ``servers/spark.py`` hold the rest.
"""

from __future__ import annotations

import contextlib
import os
import random
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self
from urllib.parse import quote

import requests

HOST = "127.0.0.1"
RABBITMQ_BIN = Path(os.environ.get("NSB_RABBITMQ_BIN", "/usr/lib/rabbitmq/bin"))
INSTALL_HINT = (
    "run `make setup` (as root it apt-installs rabbitmq-server postgresql libpostgresql-jdbc-java "
    "mariadb-server libmariadb-java)"
)


class ServiceUnavailable(RuntimeError):
    """A server cannot be started on this machine (not installed, or it failed to come up)."""


# Where ``free_port`` looks: below the kernel's ephemeral range (``ip_local_port_range``, 32768-60999 by
# default), which every outgoing connection draws its local port from. A port the kernel hands out for
# ``bind(0)`` is in that range, so between choosing it and the broker binding it a client connection of
# a parallel test could take it: a 4.0 node then refused to boot (``listen_error ... eaddrinuse`` on its
# management port) in a CI run. ``NSB_LOCAL_PORT_RANGE=LOW-HIGH`` narrows it (the tests give every
# pytest-xdist worker its own slice, so two workers never choose the same port).
DEFAULT_PORT_RANGE = (10000, 32767)
_handed_out: set[int] = set()


def local_port_range() -> tuple[int, int]:
    """``NSB_LOCAL_PORT_RANGE`` (``LOW-HIGH``) or ``DEFAULT_PORT_RANGE``."""
    setting = os.environ.get("NSB_LOCAL_PORT_RANGE", "")
    if not setting:
        return DEFAULT_PORT_RANGE
    try:
        low, high = (int(part) for part in setting.split("-"))
    except ValueError:
        raise ValueError(f"NSB_LOCAL_PORT_RANGE={setting!r}: expected LOW-HIGH, e.g. 10000-20000") from None
    if not 1024 <= low < high <= 65535:
        raise ValueError(f"NSB_LOCAL_PORT_RANGE={setting!r}: expected 1024 <= LOW < HIGH <= 65535")
    return low, high


def free_port() -> int:
    """A loopback port nothing holds now, outside the ephemeral range, never handed out before by this process."""
    low, high = local_port_range()
    for _ in range(200):
        port = random.randint(low, high)
        if port not in _handed_out and port_is_free(port):
            _handed_out.add(port)
            return port
    raise ServiceUnavailable(f"no free port in {low}-{high} on {HOST} after 200 tries (NSB_LOCAL_PORT_RANGE)")


def port_is_free(port: int) -> bool:
    """Whether nothing on this machine holds ``port`` on the loopback address right now."""
    with socket.socket() as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
        return True


def wait_until(check: Any, what: str, timeout: float, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if check():
                return
        time.sleep(0.1)
    tail = log.read_text(errors="replace")[-2000:] if log and log.exists() else ""
    raise ServiceUnavailable(f"{what} did not become ready within {timeout:.0f} s\n{tail}")


def process_group_alive(group: int) -> bool:
    """Whether any process of the process group ``group`` still exists."""
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - a member we may not signal still exists
        return True
    return True


# The grace of a broker that has not answered yet: it holds nothing to keep, and it may not act on a SIGTERM while
# it boots (RabbitMQ 4.3.6 in the demo's chroot still ran 30 s after one, 3 times out of 3).
BOOTING_GRACE = 2.0
# The grace of a running broker: the Erlang VM stops gracefully on SIGTERM.
RUNNING_GRACE = 30.0


def stop_process_group(process: subprocess.Popen[bytes] | None, timeout: float = RUNNING_GRACE) -> None:
    """SIGTERM the process group we started (the Erlang VM stops gracefully on it), then SIGKILL; return once
    every member is gone, not just the leader (a helper that outlives it would keep a chroot broker's
    private mounts, and so its state folder, busy)."""
    if process is None:
        return
    group = process.pid  # started with start_new_session: the group is the one our child leads
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
            process.wait(10)
    deadline = time.monotonic() + 10
    while process_group_alive(group) and time.monotonic() < deadline:
        time.sleep(0.05)
    if process_group_alive(group):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)


@dataclass
class DemoRabbitMq:
    """RabbitMQ (Debian's 3.10) with the management plugin, private state, its own epmd, free ports.

    How the broker is configured (``rabbitmq.conf``, plugins, ``advanced.config``, the environment naming
    every state path, node, port and epmd) is built here once; how its processes are launched is the
    ``tool_command``/``epmd_command`` pair (the server and ``rabbitmqctl`` are both tools), so a
    launcher that runs another RabbitMQ the same way (the tests run Debian 13's 4.0 in a chroot) only
    replaces those and where the broker sees its state folder and scripts.
    """

    state_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="nsb-rabbitmq-")))
    amqp_port: int = field(default_factory=free_port)
    management_port: int = field(default_factory=free_port)
    dist_port: int = field(default_factory=free_port)
    epmd_port: int = field(default_factory=free_port)
    username: str = "guest"
    password: str = "guest"
    server: subprocess.Popen[bytes] | None = None
    epmd: subprocess.Popen[bytes] | None = None

    @property
    def node(self) -> str:
        return f"nsb{self.amqp_port}@localhost"

    @property
    def management_url(self) -> str:
        return f"http://{HOST}:{self.management_port}"

    @property
    def amqp_url(self) -> str:
        return self.vhost_amqp_url("/")

    def vhost_amqp_url(self, vhost: str) -> str:
        return f"amqp://{self.username}:{self.password}@{HOST}:{self.amqp_port}/{quote(vhost, safe='')}"

    # --- what a launcher may replace ------------------------------------------------------------------

    @property
    def broker_state_dir(self) -> Path:
        """The state folder as the broker's processes see it (the same folder here)."""
        return self.state_dir

    @property
    def rabbitmq_bin(self) -> Path:
        """RabbitMQ's scripts as the broker's processes see them."""
        return RABBITMQ_BIN

    def check_installed(self) -> None:
        if not (RABBITMQ_BIN / "rabbitmq-server").exists() or not shutil.which("epmd"):
            raise ServiceUnavailable(
                f"RabbitMQ is not installed ({RABBITMQ_BIN}/rabbitmq-server missing); {INSTALL_HINT}"
            )

    def tool_command(self, tool: str, *args: str) -> list[str]:
        """One of RabbitMQ's scripts (``rabbitmq-server``, ``rabbitmqctl``, ...) as this broker runs it."""
        return [str(self.rabbitmq_bin / tool), *args]

    def server_command(self) -> list[str]:
        return self.tool_command("rabbitmq-server")

    def epmd_command(self) -> list[str]:
        return ["epmd", "-port", str(self.epmd_port), "-address", HOST]

    # --- one configuration for every launcher ---------------------------------------------------------

    def _env(self) -> dict[str, str]:
        d = self.broker_state_dir
        inet = "-kernel inet_dist_use_interface {127,0,0,1}"
        return {
            **os.environ,
            "HOME": str(d / "home"),
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_CONFIG_FILE": str(d / "rabbitmq"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(d / "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(d / "enabled_plugins"),
            "RABBITMQ_MNESIA_BASE": str(d / "mnesia"),
            "RABBITMQ_LOG_BASE": str(d / "log"),
            "RABBITMQ_NODE_IP_ADDRESS": HOST,
            "RABBITMQ_NODE_PORT": str(self.amqp_port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "ERL_EPMD_ADDRESS": HOST,
            "ERL_EPMD_PORT": str(self.epmd_port),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": inet,
            "RABBITMQ_CTL_ERL_ARGS": inet,
            "PATH": f"{self.rabbitmq_bin}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        }

    def write_config(self) -> None:
        """Write rabbitmq.conf, enabled_plugins and advanced.config (again: a restart reads them anew)."""
        d = self.state_dir
        for sub in ("home", "mnesia", "log"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        (d / "rabbitmq.conf").write_text(
            f"listeners.tcp.default = {HOST}:{self.amqp_port}\n"
            f"management.tcp.ip = {HOST}\nmanagement.tcp.port = {self.management_port}\n"
            "loopback_users = none\n"
            # the management API's message counts and applied policies every second, not every 5 s (the
            # default): what `status`, `verify` and the tests read settles that much sooner
            "collect_statistics_interval = 1000\n"
        )
        (d / "enabled_plugins").write_text("[rabbitmq_management].\n")
        (d / "advanced.config").write_text(self.advanced_config())

    def advanced_config(self) -> str:
        """``advanced.config``: what rabbitmq.conf cannot express. The demo's broker needs nothing there."""
        return "[].\n"

    def claim_dist_port(self) -> int:
        """Keep the Erlang distribution port if still free, else take a fresh one; returns the port used.

        Peers find a node through epmd by its node name (epmd maps the name to whatever port the node
        registered at boot), so a restarted node may listen on another dist port. Its AMQP and management
        ports cannot move: clients hold them. On a shared machine something else took a stopped node's
        dist port once (RabbitMQ 4.0.5 then refused to boot: ``dist_port_already_used ... not_erlang``).
        """
        if not port_is_free(self.dist_port):
            self.dist_port = free_port()
        return self.dist_port

    def launch_server(self) -> None:
        """Start rabbitmq-server (its own process group) without waiting; ``wait_ready`` waits."""
        self.claim_dist_port()
        log = self.server_log
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            self.server = subprocess.Popen(
                self.server_command(),
                env=self._env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.state_dir,
                start_new_session=True,
            )

    @property
    def server_log(self) -> Path:
        return self.state_dir / "log" / "stdout.log"

    def wait_ready(self, timeout: float = 90, what: str = "RabbitMQ") -> None:
        wait_until(self._ready, f"{what} on {self.management_url}", timeout, self.server_log)

    def start_epmd(self) -> None:
        """The broker's own epmd on ``epmd_port`` (a cluster starts one and every node registers with it)."""
        self.epmd = subprocess.Popen(
            self.epmd_command(),
            env=self._env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def start(self, timeout: float = 90) -> Self:
        """Start epmd and the broker and wait until it answers; a second call on a running broker does nothing
        (``with DemoRabbitMq().start() as broker`` would otherwise start a second one and lose the first)."""
        if self.server is not None and self.server.poll() is None:
            return self
        self.check_installed()
        self.write_config()
        self.start_epmd()
        try:
            self.launch_server()
            self.wait_ready(timeout)
        except BaseException:  # also Ctrl-C while waiting: leave nothing running
            self.stop(grace=BOOTING_GRACE)
            raise
        return self

    def _ready(self) -> bool:
        if self.server is not None and self.server.poll() is not None:
            raise ServiceUnavailable(f"rabbitmq-server exited with {self.server.returncode}")
        response = requests.get(f"{self.management_url}/api/overview", auth=(self.username, self.password), timeout=2)
        return response.status_code == 200

    def stop_broker(self, grace: float = RUNNING_GRACE) -> None:
        """Stop the broker but keep epmd and the state folder (for a restart with the same data)."""
        stop_process_group(self.server, timeout=grace)
        self.server = None

    def stop(self, grace: float = RUNNING_GRACE) -> None:
        """Stop the broker (SIGTERM, SIGKILL after ``grace`` seconds) and epmd."""
        self.stop_broker(grace)
        stop_process_group(self.epmd, timeout=5)
        self.epmd = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        shutil.rmtree(self.state_dir, ignore_errors=True)


@dataclass(frozen=True)
class RabbitMqRelease:
    """A Debian release's ``rabbitmq-server`` debootstrapped into a root (``make setup`` builds them as root:
    ``make rabbitmq4-root``, ``make rabbitmq43-root``), found through ``variable`` or the checkout's ``.cache``."""

    version: str  # "4.3": what the broker must report as MAJOR.MINOR
    debian: str  # "Debian forky": where it comes from, for messages
    variable: str  # NSB_RABBITMQ43_ROOT: where a built root is, when not the default
    make_target: str  # rabbitmq43-root

    def root(self, checkout: Path | None = None) -> Path:
        """``$variable``, else ``.cache/rabbitmq-VERSION`` of ``checkout`` (the current directory by default: the
        demo runs from the checkout ``make demo`` runs in)."""
        return Path(os.environ.get(self.variable) or (checkout or Path.cwd()) / ".cache" / f"rabbitmq-{self.version}")

    def hint(self, root: Path) -> str:
        return (
            f"run `make setup` as root: it builds {self.debian}'s rabbitmq-server {self.version} into {root} with "
            f"debootstrap (`make {self.make_target}` builds only that; {self.variable}=DIR shares one built root "
            "between checkouts)"
        )


RABBITMQ_4_0 = RabbitMqRelease("4.0", "Debian 13", "NSB_RABBITMQ4_ROOT", "rabbitmq4-root")
RABBITMQ_4_3 = RabbitMqRelease("4.3", "Debian forky", "NSB_RABBITMQ43_ROOT", "rabbitmq43-root")


@dataclass
class DemoChrootRabbitMq(DemoRabbitMq):
    """A Debian release's RabbitMQ from its root, configured exactly like ``DemoRabbitMq``; only the launch differs.

    The server (and ``rabbitmqctl``) starts in a private mount namespace (``unshare --mount --propagation
    private``) that mounts ``proc``, binds ``/dev``, puts a tmpfs on the root's ``/tmp`` and binds this broker's
    state folder on the root's ``/mnt`` before it ``chroot``s: those mounts exist only for the broker's processes
    and vanish with the last of them, so a killed broker leaves no mount behind and any number of brokers share one
    read-only-in-practice root at once. epmd (the root's own, of the root's Erlang) needs no mounts and runs
    through plain ``chroot``. Both are stopped by PID (their process groups) like the Debian 12 broker. Needs root.
    """

    release: RabbitMqRelease = RABBITMQ_4_3
    chroot: Path | None = None  # the release's root (RabbitMqRelease.root) when not given

    @property
    def root(self) -> Path:
        return self.chroot or self.release.root()

    @property
    def broker_state_dir(self) -> Path:
        return Path("/mnt")

    @property
    def rabbitmq_bin(self) -> Path:
        return Path("/usr/lib/rabbitmq/bin")

    def check_installed(self) -> None:
        version, hint = self.release.version, self.release.hint(self.root)
        if os.geteuid() != 0:
            raise ServiceUnavailable(f"RabbitMQ {version} runs in a chroot and needs root; {hint}")
        if not (self.root / "usr/lib/rabbitmq/bin/rabbitmq-server").exists():
            raise ServiceUnavailable(f"RabbitMQ {version} root {self.root} is not built; {hint}")
        if not shutil.which("unshare") or not shutil.which("chroot"):
            raise ServiceUnavailable(f"unshare and chroot (util-linux, coreutils) are needed for RabbitMQ {version}")

    def tool_command(self, tool: str, *args: str) -> list[str]:
        """The server and the CLI tools (rabbitmqctl must be of the root's Erlang too) run inside the root."""
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


@dataclass
class DemoMoto:
    """moto's SQS (and CloudFormation) server in a thread of this process, on a free loopback port."""

    port: int = field(default_factory=free_port)
    region: str = "us-east-1"
    _server: Any = None

    @property
    def endpoint_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> Self:
        try:
            from moto.server import ThreadedMotoServer
        except ImportError as error:
            raise ServiceUnavailable(f"moto[server] is not installed ({error}); {INSTALL_HINT}") from None
        self._server = ThreadedMotoServer(ip_address=HOST, port=self.port, verbose=False)
        self._server.start()
        wait_until(lambda: requests.get(f"{self.endpoint_url}/moto-api/", timeout=2).ok, "moto server", 20)
        return self

    def client(self, service: str = "sqs") -> Any:
        import boto3

        return boto3.client(
            service,
            endpoint_url=self.endpoint_url,
            region_name=self.region,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
