"""``nsb-delays preflight`` of a stack of 1,000 endpoints on a fresh RabbitMQ 4.3 and 3.10, against ``nsb-delays
verify`` of the same stack (issue 38: preflight of 1,000 endpoints within 60 s here).

Each stack is provisioned as a team without Pulumi does (``render --format rabbitmq-definitions``, then POST
/api/definitions; tests/provisioning.py ``provision_rabbitmq``), into a vhost of its own, in two variants:
(a) ``admin``: endpoints without users, each judged with the given (administrator) login;
(b) ``users``: each endpoint with its own least-privilege user (``render --passwords FILE`` creates them; preflight logs
    in as each with the same file). Before RabbitMQ 3.13 the stack turns the StreamsEnabled check off (the broker
    answers GET /api/feature-flags to administrators only there).
Each variant on a broker of its own: on RabbitMQ 3.10 ``rabbitmqctl delete_vhost`` of the users' vhost had not ended
after 10 minutes.
Then ROUNDS times in turns ``preflight --stack … --json --wait 30`` and ``verify --stack …``, each a CLI subprocess as
an operator runs it (Python's start included): wall time, the CLI's CPU seconds, the broker's (beam.smp) meanwhile, and
the most file descriptors preflight held open at once (sampled every 20 ms). The first preflight starts right after
the import, as a pipeline's would, so its ``waitedSeconds`` is the wait for the management API to show what the
broker applies. Prints that first run, the medians, the ratio preflight/verify and whether every preflight took at most
60 s; stops, naming the reasons, when an endpoint's verdict is not ``starts`` or verify finds a drift (a failing run
measures nothing). Figures are printed, never asserted.
Settings: NSB_BENCH_PREFLIGHT_ENDPOINTS (default 1000), NSB_BENCH_PREFLIGHT_VERSIONS (default 4.3,3.10),
NSB_BENCH_PREFLIGHT_ROUNDS (default 5), NSB_BENCH_PREFLIGHT_VARIANTS (default admin,users).
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from nsb_delays.brokers.management import ManagementApi
from nsb_delays.components.model.rabbitmq.versions import broker_version_of, parse_reported_broker_version
from nsb_delays.infra.commands.errors import sigterm_as_interrupt
from servers.rabbitmq import LocalRabbitMq, broker_of

from .pulumi_measures import cpu_seconds, load

ENDPOINTS = int(os.environ.get("NSB_BENCH_PREFLIGHT_ENDPOINTS", "1000"))
VERSIONS = tuple(os.environ.get("NSB_BENCH_PREFLIGHT_VERSIONS", "4.3,3.10").split(","))
ROUNDS = int(os.environ.get("NSB_BENCH_PREFLIGHT_ROUNDS", "5"))
VARIANTS = tuple(os.environ.get("NSB_BENCH_PREFLIGHT_VARIANTS", "admin,users").split(","))
WAIT_SECONDS = "30"
TARGET_SECONDS = 60.0
FEATURE_FLAGS_OPEN_FROM = (3, 13)  # GET /api/feature-flags: administrators only before RabbitMQ 3.13
CLI = (sys.executable, "-m", "nsb_delays.infra.cli")
COLUMNS = (
    ("broker", 6), ("logins", 6), ("endpoints", 9), ("first s", 7), ("waited", 6), ("pre s", 6), ("pre cpu", 7),
    ("brk cpu", 7), ("fds", 4), ("ver s", 6), ("ver cpu", 7), ("brk cpu", 7), ("ratio", 5), ("starts", 6),
    ("<= 60 s", 7), ("load", 9),
)  # fmt: skip


def user_name(index: int) -> str:
    return f"endpoint{index:05d}"


def section(vhost: str, reported: str, users: bool) -> dict[str, Any]:
    """The stack's ``rabbitmq`` section: ``ENDPOINTS`` endpoints, each with its own user when ``users``."""
    version = parse_reported_broker_version(reported)
    closed_flags = users and version < FEATURE_FLAGS_OPEN_FROM
    return {
        "vhost": vhost,
        "brokerVersion": broker_version_of(version),
        **({"disabledBrokerRequirementChecks": ["StreamsEnabled"]} if closed_flags else {}),
        "endpoints": [
            {"name": f"Endpoint{i:05d}", "user": {"name": user_name(i), "passwordKey": f"{user_name(i)}Password"}}
            if users
            else f"Endpoint{i:05d}"
            for i in range(ENDPOINTS)
        ],
    }


@dataclass(frozen=True)
class Provisioned:
    vhost: str
    stack: Path
    passwords: Path | None
    users: tuple[str, ...]
    render_seconds: float
    import_seconds: float


def provision(broker: LocalRabbitMq, api: ManagementApi, folder: Path, variant: str) -> Provisioned:
    """The stack file (the broker's login as the provider's; each user's password a secret placeholder, which render
    and preflight take from ``--passwords`` instead), rendered and imported into a fresh vhost."""
    users = variant == "users"
    vhost = f"bench-preflight-{variant}"
    names = tuple(user_name(i) for i in range(ENDPOINTS)) if users else ()
    config: dict[str, Any] = {
        "rabbitmq:endpoint": broker.management_url,
        "rabbitmq:username": broker.username,
        "rabbitmq:password": broker.password,
        **{f"nsb-delays:{name}Password": {"secure": f"v1:{name}"} for name in names},
        "nsb-delays:rabbitmq": section(vhost, broker.version(), users),
    }
    stack = folder / f"Pulumi.{vhost}.yaml"
    stack.write_text(yaml.safe_dump({"config": config}))
    passwords = None
    if users:
        passwords = folder / f"passwords-{variant}.yaml"
        passwords.write_text(yaml.safe_dump({name: f"{name}-secret" for name in names}))
    definitions = folder / f"definitions-{variant}.json"
    options = ("--passwords", str(passwords)) if passwords else ()
    rendered = timed_cli(None, "render", "--stack", str(stack), "--format", "rabbitmq-definitions", *options, "-o",
                         str(definitions))  # fmt: skip
    api.create_vhost(vhost)
    began = time.perf_counter()
    api.import_definitions(json.loads(definitions.read_text()))
    return Provisioned(vhost, stack, passwords, names, rendered.wall, time.perf_counter() - began)


@dataclass(frozen=True)
class Timed:
    wall: float
    cli_cpu: float
    broker_cpu: float
    most_fds: int  # the most file descriptors the CLI held open at once (sampled every 20 ms)
    stdout: str


def children_cpu() -> float:
    """User + system CPU seconds of this process's waited-for children (the CLI runs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0  # ended meanwhile


def timed_cli(broker: LocalRabbitMq | None, *arguments: str, codes: tuple[int, ...] = (0,)) -> Timed:
    """``nsb-delays ARGUMENTS`` as its own process: its wall time, CPU seconds and most open file descriptors, and the
    broker's CPU seconds meanwhile; SystemExit with its output when its exit code is not in ``codes``."""
    beam = broker.beam_pid() if broker is not None else None
    cpu_before, broker_before = children_cpu(), cpu_seconds(beam)
    began = time.perf_counter()
    with subprocess.Popen(
        [*CLI, *arguments], stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True
    ) as process:
        most = 0
        done = threading.Event()

        def sample() -> None:
            nonlocal most
            while not done.wait(0.02):
                most = max(most, open_fds(process.pid))

        sampler = threading.Thread(target=sample, name="fd-sampler", daemon=True)
        sampler.start()
        stdout, stderr = process.communicate()
        done.set()
        sampler.join()
    wall = time.perf_counter() - began
    if process.returncode not in codes:
        raise SystemExit(f"nsb-delays {arguments[0]} exited with {process.returncode}:\n{stdout[-3000:]}\n"
                         f"{stderr[-3000:]}")  # fmt: skip
    return Timed(wall, children_cpu() - cpu_before, cpu_seconds(beam) - broker_before, most, stdout)


def starting(document: dict[str, Any], variant: str, version: str) -> int:
    """How many endpoints preflight says start (and work); SystemExit naming the others and why."""
    rows = (document.get("rabbitmq") or {}).get("endpoints") or []
    failing = [row for row in rows if row.get("verdict") != "starts"]
    if failing or len(rows) != ENDPOINTS:
        shown = "\n".join(
            f"  {row['endpoint']} ({row['login']}): {row['verdict']}: {'; '.join(row['reasons'])}"
            for row in failing[:5]
        )
        raise SystemExit(
            f"preflight of {ENDPOINTS} endpoints on RabbitMQ {version} ({variant}): {len(rows)} judged, "
            f"{len(failing)} of them not 'starts'; a failing run measures nothing:\n{shown}"
        )
    return len(rows)


def row(*cells: object) -> str:
    return " ".join(f"{cell:>{width}}" for cell, (_, width) in zip(cells, COLUMNS, strict=True))


def measure(broker: LocalRabbitMq, api: ManagementApi, folder: Path, version: str, variant: str) -> str:
    """``ROUNDS`` of preflight and verify in turns on the variant's stack, each round printed; the row of figures."""
    made = provision(broker, api, folder, variant)
    print(f"  {variant}: render {made.render_seconds:.1f} s, import {made.import_seconds:.1f} s "
          f"({len(made.users)} users); load {load():.1f}", flush=True)  # fmt: skip
    load_before = load()
    passwords = ("--passwords", str(made.passwords)) if made.passwords else ()
    preflights: list[Timed] = []
    verifies: list[Timed] = []
    waited: list[float] = []
    started = 0
    for turn in range(ROUNDS):  # in turns: a moment of load weighs on both alike
        run = timed_cli(broker, "preflight", "--stack", str(made.stack), "--json", "--wait", WAIT_SECONDS, *passwords,
                        codes=(0, 1))  # fmt: skip
        document = json.loads(run.stdout)
        started = starting(document, variant, version)
        waited.append(float(document["rabbitmq"]["waitedSeconds"]))
        preflights.append(run)
        verifies.append(timed_cli(broker, "verify", "--stack", str(made.stack)))  # exit 1 (a drift) stops the bench
        check = verifies[-1]
        print(
            f"    round {turn + 1}: preflight {run.wall:.2f} s (cli {run.cli_cpu:.1f}, broker {run.broker_cpu:.1f} "
            f"CPU s, waited {waited[-1]:.1f} s, at most {run.most_fds} fds), verify {check.wall:.2f} s (cli "
            f"{check.cli_cpu:.1f}, broker {check.broker_cpu:.1f} CPU s); load {load():.1f}",
            flush=True,
        )
    preflight_s = statistics.median(run.wall for run in preflights)
    verify_s = statistics.median(run.wall for run in verifies)
    slowest = max(run.wall for run in preflights)
    return row(
        version, variant, ENDPOINTS, f"{preflights[0].wall:.1f}", f"{waited[0]:.1f}", f"{preflight_s:.2f}",
        f"{statistics.median(run.cli_cpu for run in preflights):.1f}",
        f"{statistics.median(run.broker_cpu for run in preflights):.1f}", max(run.most_fds for run in preflights),
        f"{verify_s:.2f}", f"{statistics.median(run.cli_cpu for run in verifies):.1f}",
        f"{statistics.median(run.broker_cpu for run in verifies):.1f}", f"{preflight_s / verify_s:.1f}", started,
        "met" if slowest <= TARGET_SECONDS else "NOT met", f"{load_before:.1f}-{load():.1f}",
    )  # fmt: skip


def main() -> None:
    for variant in VARIANTS:
        if variant not in ("admin", "users"):
            raise SystemExit(f"NSB_BENCH_PREFLIGHT_VARIANTS={variant}: give admin, users or both")
    print(f"preflight vs verify of {ENDPOINTS} endpoints, {ROUNDS} rounds in turns, the medians; {os.cpu_count()} "
          f"cores; load {load():.1f}", flush=True)  # fmt: skip
    rows = []
    # SIGTERM unwinds like Ctrl-C: the brokers and the temporary folders are removed either way
    with sigterm_as_interrupt():
        for version in VERSIONS:
            broker_kind = broker_of(version, "NSB_BENCH_PREFLIGHT_VERSIONS")
            for variant in VARIANTS:  # a fresh broker each: cheaper than deleting the vhost
                with broker_kind() as broker, tempfile.TemporaryDirectory() as tmp:
                    api = ManagementApi(broker.management_url, broker.username, broker.password, timeout=300)
                    print(f"RabbitMQ {broker.version()}; load {load():.1f}", flush=True)
                    rows.append(measure(broker, api, Path(tmp), version, variant))
    print(row(*(title for title, _ in COLUMNS)), *rows, sep="\n", flush=True)
    print(f"load at the end {load():.1f}", flush=True)


if __name__ == "__main__":
    main()
