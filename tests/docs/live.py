"""What a ``<!-- runs-with: … -->`` block of the documentation is run with (issue 30, item 6).

A block runs as a reader runs it: in a folder laid out as the reader's project (the project's ``Pulumi.dev.yaml``
pointed at the test's broker, as that file's own comment says to do, and the reader's ``Pulumi.prod.yaml``,
written here), with the session's servers standing in for the reader's and their addresses exported as the
variables the pages use. Each name a marker may give is one entry of ``SERVICES``.

The page's host names and ports are the reader's; ``SUBSTITUTIONS`` is the one table that replaces them with the
test servers' before a block runs, and maps the servers' back in its output before the output is compared with
the page. Credentials are not substituted: the broker gets the users the pages log in with (``USERS``), the
database the role and database the JDBC URLs name.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from nsb_delays.infra.commands.demo.servers import HOST
from tests.jobs import JOB_HANG_GUARD_SECONDS, wait_for_fault_point
from tests.services import ctrl_c_as_from_a_terminal

PROJECT = Path(__file__).resolve().parents[2]
AMQP_PORT, MANAGEMENT_PORT = 5672, 15672  # RabbitMQ's defaults, which the pages' readers have
SHOWN_OUTPUT = 6000
# The broker's user for stacks with no credentials given (the provider's variables) is the broker's own; these are
# the other logins the pages show, created on the test broker with full permissions on every vhost.
USERS = {"user": "pass", "nsb": "pass"}
# The reader's production stack: what `--stack prod` reads on the pages (the tutorial's two endpoints, on the
# test broker's version; a vhost of its own, so the dev stack beside it on the same broker is not in its way).
PROD_VHOST = "prod"
PROD_ENDPOINTS = ["Sales", "Billing"]
PROD_REGION = "eu-west-1"  # the region the pages' SQS commands name
# Blue-green (move-delays.md): two stacks of the same endpoints, each in a vhost of its own.
BLUE_GREEN = ("blue", "green")
# The SQS side of move-delays.md's move to AWS: the endpoints' queues, and the bucket for bodies over 1 MiB.
AWS_STACK_PREFIX, LARGE_BODIES_BUCKET = "prod-", "nsb-large-bodies"
# The endpoint move-delays.md retires while delays are on their way to it, and how many of them get parked.
RETIRED_ENDPOINT, PARKED_MESSAGES = "Shipping", 2
# Delayed messages left in a graph for a move to carry: one due within SQS's 900 s, two beyond it (seconds).
WAITING_DELAYS = [600, 3600, 86400]
# The earlier version of Pulumi.prod.yaml that drift.md's `git show HEAD~1:Pulumi.prod.yaml` reads: one endpoint
# more, which the current file dropped (so `--baseline` has something to compare).
PROD_ENDPOINTS_BEFORE = [*PROD_ENDPOINTS, "Shipping"]
# The drift docs/how-to/drift.md shows: level 3's queue re-declared with another TTL, Shipping's delivery binding gone.
DRIFTED_LEVEL, DRIFTED_TTL, UNBOUND_ENDPOINT = "nsb.v2.delay-level-03", 9000, "Shipping"
# The reader's policy.json of ci.md (the --policy-pack-config format): every rule mandatory.
POLICY_CONFIG = {"all": "mandatory"}
# The timeout store the pages' JDBC URLs name (jdbc:postgresql://db:5432/app?user=nsb) and the endpoint they migrate.
DATABASE, DATABASE_ROLE, ENDPOINT = "app", "nsb", "Sales"
# The stuck level stuck-level.md shows (Particular/NServiceBus.RabbitMQ#1407, parking off): delayed messages for
# the retired endpoint, which no delivery binding routes, expire out of level 1 (a 2 s delay's highest bit) and wait
# in its dead-letter backlog; messages for Sales a long way off (2^21 s) wait in level 21.
STUCK_LEVEL, STUCK_MESSAGES = 1, 3
LONG_DELAY_LEVEL, LONG_DELAY_MESSAGES = 21, 4
# The policy docs/tutorials/demo.md shows in the way of the demo: a team's retries limit over Sales.
CONFLICTING_POLICY = {"pattern": "^Sales$", "definition": {"delivery-limit": 5}, "apply-to": "queues"}
# The timeouts migrate-timeouts.md moves: the table's (stored-timeouts), due from an hour to 30 days ahead, so the
# page's --cutoff keeps some and leaves others; and the exports' (exports), in the formats the pipeline reads.
STORED_TIMEOUTS, EXPORTED_TIMEOUTS = 120, 100
EXPORTS = {"exports/timeoutdatas.jsonl": "json", "exports/timeouts.parquet": "parquet"}
LEDGER_DATABASE = "ledger"  # the export's ledger database the pages' --ledger-jdbc-url names
# How a stopped run (stopped-run, stopped-export-run) is made: the batch size, and where the run's test hook
# (--fault, pipeline/faults.py) fails it (each task of the export's at its first publish, whatever the cores); the
# interrupted run (ctrl-c) has its one task held after publishing its second batch, then gets Ctrl-C.
STOPPED_RUN = ("30", "after-publish:2:raise")
STOPPED_EXPORT_RUN = ("50", "after-publish:1:raise")
INTERRUPTED_AT = "after-publish:2:hang"
FAULT_VARIABLE = "NSB_DELAYS_FAULT"  # the hidden --fault option's variable


@dataclass
class Scene:
    """One block's run: its folder, environment and the servers' addresses for ``SUBSTITUTIONS``."""

    folder: Path
    env: dict[str, str]
    addresses: dict[str, str] = field(default_factory=dict)  # a key of SUBSTITUTIONS' values -> host:port (or path)
    interrupt_when: Path | None = None  # Ctrl-C the block's command once this file exists (ctrl-c)

    def substituted(self, text: str) -> str:
        """The text with the reader's addresses replaced by the servers'."""
        for page, key in SUBSTITUTIONS:
            if key in self.addresses:
                text = text.replace(page, self.addresses[key])
        return text

    def as_on_the_page(self, output: str, page_text: str) -> str:
        """The output with the servers' addresses written as the page writes them (in ``page_text``)."""
        for page, key in SUBSTITUTIONS:
            if page in page_text and key in self.addresses:
                output = output.replace(self.addresses[key], page)
        return output


# The reader's address on a page -> which test server stands in for it. Longest first: each is replaced as a whole.
SUBSTITUTIONS: list[tuple[str, str]] = [
    ("127.0.0.1:15672", "management"),  # the demo's and the dev stack's broker
    ("127.0.0.1:5672", "amqp"),
    ("127.0.0.1:5000", "moto"),  # moto's default port: drift.md's --sqs-endpoint-url
    ("rabbit:15672", "management"),  # a host named rabbit (migrate, exit codes)
    ("rabbit:5672", "amqp"),
    ("db:5432", "postgres"),  # a host named db (the timeout store)
    # cluster.md's three nodes (rabbit-cluster): rabbit-1's management API is the broker's, its AMQP port refuses
    ("rabbit-1:15672", "management"),
    ("rabbit-1:5672", "rabbit-1"),
    ("rabbit-2:5672", "rabbit-2"),
    ("rabbit-3:5672", "rabbit-3"),
    # the Spark cluster of migrate-timeouts.md: its master, a Connect server (its URL, the /dev/tcp path a reader
    # waits on, the port it is started on) and the paths on the cluster's machines
    ("spark-master:7077", "spark-master"),
    ("spark-connect:15002", "spark-connect"),
    ("spark-connect/15002", "spark-connect-tcp"),
    ("grpc.binding.port=15002", "spark-connect-port"),
    ("/usr/share/java/postgresql.jar", "postgres-jdbc-jar"),  # the PostgreSQL JDBC driver
    ("/opt/nsb-executor/bin/python", "executor-python"),  # the executors' Python
    ("/opt/nsb-connect", "connect-venv"),  # the Connect client's virtualenv
    # the reader's prod stack is on vhost '/' of a broker of its own; the test's shares the broker with the dev
    # stack, so it has a vhost of its own (PROD_VHOST): output only, no page command names a vhost
    ("vhost '/'", "prod-vhost"),
]
# The services of SERVICES this tier does not set up: another tier, where the service runs anyway, runs their blocks
# (the test module named; each parametrizes over ``blocks_run_in`` its service).
CONSUMER = "consumer"
PULUMI_YAML = "pulumi-yaml"
CHECKOUT_COPY = "checkout-copy"
PACKAGE_INDEX = "package-index"
SPARK_CLUSTER, SPARK_CONNECT = "spark-cluster", "spark-connect"
SPARK_BLOCKS = "tests/sparkcluster/test_documented_blocks.py"
PYTEST = "pytest"
ELSEWHERE = {
    PYTEST: "tests/unit/test_pulumi_unit_test_pattern.py",
    CHECKOUT_COPY: "tests/consumer/test_from_a_checkout.py",
    CONSUMER: "tests/consumer/test_quickstart.py",
    PACKAGE_INDEX: "tests/consumer/test_package_index.py",
    PULUMI_YAML: "tests/engine/test_components_from_other_languages.py",
    SPARK_CLUSTER: SPARK_BLOCKS,
    SPARK_CONNECT: SPARK_BLOCKS,
}
# The services a runs-with marker may name, and what each provides (the fixture of test_live_examples.py sets
# them up in this order).
SERVICES = {
    "rabbitmq": "the session's RabbitMQ 3.10; Pulumi.dev.yaml and Pulumi.prod.yaml point at it, the pages' users exist",
    "rabbitmq-env": "RABBITMQ_ENDPOINT/USERNAME/PASSWORD name the broker and its administrator, as a pipeline sets "
    "the provider's variables",
    "sqs": "moto (SQS, CloudFormation); AWS_* variables name it",
    "deployed": "the dev and prod stacks provisioned (rabbitmq-definitions imported; with sqs, the CloudFormation "
    "template in moto)",
    "git": "the project folder is a git repository whose previous commit holds an earlier Pulumi.prod.yaml",
    "origin": "the project folder is a clone of a bare repository (origin) whose main holds the stack files and the "
    "reader's policy.json (POLICY_CONFIG): origin/main is what was deployed",
    "drift": "drift made on purpose on the dev stack: level 3's TTL changed, Shipping's delivery binding removed",
    "conflicting-policy": "a policy team-retries with delivery-limit 5 over the dev stack's Sales queue",
    "pulumi": "the Pulumi engine (on PATH, else the one make setup built) on a local file backend with a "
    "passphrase, in a project running this package's program and policy pack (policies/); stack prod initialised "
    "(its SQS and MSMQ sections dropped: the engine built here has no AWS provider)",
    "pulumi-up": "stack prod deployed by `pulumi up`",
    "pulumi-dev": "with pulumi: stack dev initialised too (its SQS and MSMQ sections dropped, as prod's)",
    "blue-green": "stacks blue and green (Pulumi.blue.yaml, Pulumi.green.yaml: vhosts of the one broker standing in "
    "for two), both provisioned, delayed messages waiting on blue",
    "aws-stack": "stack aws (Pulumi.aws.yaml: the endpoints' SQS queues, in moto) and the bucket nsb-large-bodies; "
    "delayed messages waiting on prod",
    "v1-graph": "the prod stack's vhost also holds NServiceBus's v1 delay graph (transport 6.x), delayed messages "
    "waiting in it",
    "parked": "delayed messages for Shipping, which the prod stack dropped, parked on prod; then Shipping recreated "
    "(its queue and delivery binding, as its endpoint's installers declare them), as the page tells the reader to",
    "opentofu": "tofu on PATH (tools/opentofu's build) with a CLI configuration that installs the RabbitMQ provider "
    "from the build's filesystem mirror, offline; Pulumi.prod.yaml's SQS and MSMQ sections dropped (no AWS provider is "
    "built here)",
    "rabbitmqctl": "a rabbitmqctl on PATH that talks to the session's broker node, as on a node of the reader's",
    CONSUMER: "not in this tier: tests/consumer/test_quickstart.py runs the block in a copy of the README "
    "quickstart's repository (the project `nsb-delays init` wrote, from the wheel, its virtualenvs made by "
    "`pulumi install`), on a vhost and a local backend of its own, so its stack prod starts empty",
    "stuck-level": "the prod stack with parking off (parkUnroutable: false; before deployed provisions it), "
    "delayed messages for Sales waiting in level 21 and, for Shipping, which no delivery binding routes, in level "
    "1's dead-letter backlog: the management API shows the backlog once it is set up",
    PULUMI_YAML: "not in this tier: tests/engine/test_components_from_other_languages.py runs the block's command in "
    "a copy of its Pulumi YAML program (component_programs/yaml, with the page's component only: brokerVersion read "
    "from the stack's config, \"3.10\" there) with the provider's plugin, on a stack of the engine tier's backend",
    PYTEST: "not in this tier: tests/unit/test_pulumi_unit_test_pattern.py saves the block as a test file in a "
    "folder of its own and runs pytest on it, in a process of its own (Pulumi's mocks are set once per process)",
    CHECKOUT_COPY: "not in this tier: tests/consumer/test_from_a_checkout.py runs the block in a copy of the "
    "checkout's files (as a fresh clone has them), with a new virtualenv's python and pip first on PATH (PyPA build "
    "installed in it); the page's version must be pyproject.toml's",
    PACKAGE_INDEX: "not in this tier: tests/consumer/test_package_index.py runs the block in a folder of its own "
    "with a new virtualenv's python and pip first on PATH, where pip finds nsb-delays as a package index would "
    "serve it: the session's wheel in a folder PIP_FIND_LINKS names (pip's setting for another place to find "
    "packages; the dependencies in the run's wheelhouse, the other folder it names, and PIP_NO_INDEX set)",
    "database": "PostgreSQL with the role nsb and the database app the pages' JDBC URLs name, holding SQL "
    "persistence's timeout table of Sales",
    "stored-timeouts": f"the database's Sales table holds {STORED_TIMEOUTS:,} timeouts for Sales, due from an hour "
    "to 30 days ahead (written as SQL persistence stores them)",
    "exports": f"exports/timeoutdatas.jsonl (JSON lines) and exports/timeouts.parquet, each {EXPORTED_TIMEOUTS} "
    "RavenDB TimeoutData documents of Sales, as tests/spark/test_run_export.py writes exports",
    "ledger-database": f"PostgreSQL with the database {LEDGER_DATABASE} of the role nsb (an export's ledger)",
    "stopped-run": "a run of the Sales table into the dev stack's broker, in one task (Spark's default parallelism "
    f"1), that stopped after its first batch of {STOPPED_RUN[0]} (failed by the run's test hook, --fault "
    f"{STOPPED_RUN[1]}): that batch dispatched, the rest hidden and pending",
    "stopped-export-run": f"a run of exports/timeouts.parquet (ledger in {LEDGER_DATABASE}) that stopped before "
    f"its tasks marked a batch (--fault {STOPPED_EXPORT_RUN[1]}): its rows staged and pending",
    "ctrl-c": "the block's command runs in a process group of its own and gets SIGINT, as a terminal sends on "
    "Ctrl-C, once the run's one task (Spark's default parallelism 1, spark-defaults.conf in SPARK_CONF_DIR) has "
    f"published its second batch, where the run's test hook ({FAULT_VARIABLE}={INTERRUPTED_AT}) holds it: the "
    "first batch confirmed and marked, the second sent and not marked",
    "rabbit-cluster": "three nodes rabbit-1..3 stood in for by the one broker: rabbit-1's AMQP port is a closed "
    "loopback port held bound (refused at once, so the failover starts on rabbit-2), rabbit-2's and rabbit-3's "
    "are loopback addresses of their own forwarded to the broker (live.StandardPorts); rabbit-1's management API "
    "is the broker's",
    SPARK_CLUSTER: f"not in this tier: {SPARK_BLOCKS} runs the block in the cluster tier: its standalone master and "
    "executors' Python, its PostgreSQL as `database` here with timeouts of Sales in the table (some due, some an "
    "hour out), its RabbitMQ 3.10 with the pages' users and Sales's delay graph on vhost '/'; the operator's shell "
    "has the project's virtualenv first on PATH and the cluster's SPARK_HOME, SPARK_CONF_DIR (spark-defaults.conf: "
    "no web UI, a Connect server on 127.0.0.1 only), SPARK_LOG_DIR and SPARK_PID_DIR of the test's own",
    SPARK_CONNECT: f"not in this tier: {SPARK_BLOCKS} runs it as spark-cluster's, the Connect server it starts on a "
    "free port and stopped after it; two lines changed: `pip install --no-deps nsb-delays` installs the session's "
    "wheel (the package is not on an index), and the virtualenv the line before makes does not install "
    "connect-requirements.txt again (1.2 GB, a minute with pip's cache warm) but is given the packages of the one "
    "`make setup` installed from the same file (NSB_SPARK_CONNECT_VENV; the line compares the two files first)",
}


def stack_file(config: dict[str, Any]) -> str:
    return yaml.safe_dump({"config": config}, sort_keys=False)


def dev_stack(management_url: str, broker_version: str) -> str:
    """The project's Pulumi.dev.yaml pointed at the test broker, as its comment tells a reader with another broker."""
    text = (PROJECT / "Pulumi.dev.yaml").read_text(encoding="utf-8")
    text = text.replace("rabbitmq:endpoint: http://127.0.0.1:15672", f"rabbitmq:endpoint: {management_url}")
    return re.sub(r'brokerVersion: "[^"]*"', f'brokerVersion: "{broker_version}"', text)


def prod_stack(management_url: str, broker_version: str, endpoints: list[str]) -> str:
    """The reader's production stack: RabbitMQ, SQS queues and MSMQ endpoints' delayed store (without-pulumi.md
    renders all three)."""
    return stack_file(
        {
            "rabbitmq:endpoint": management_url,
            "aws:region": PROD_REGION,
            "nsb-delays:rabbitmq": {"vhost": PROD_VHOST, "brokerVersion": broker_version, "endpoints": endpoints},
            "nsb-delays:sqs": {"queueNamePrefix": "prod-", "endpoints": endpoints},
            "nsb-delays:msmq": {"endpoints": endpoints},
        }
    )


def without_parking(stack_path: Path) -> None:
    """The stack file with ``parkUnroutable: false``: an unroutable delayed message then waits in its level."""
    data = yaml.safe_load(stack_path.read_text(encoding="utf-8"))
    data["config"]["nsb-delays:rabbitmq"]["parkUnroutable"] = False
    stack_path.write_text(yaml.safe_dump(data, sort_keys=False))


def rabbitmq_stack(management_url: str, broker_version: str, vhost: str, username: str, password: str) -> str:
    """A blue-green side: its broker's login in the file (a transfer reads its destination's login from the
    --destination-stack file or flags only; a reader keeps the password as a secret)."""
    return stack_file(
        {
            "rabbitmq:endpoint": management_url,
            "rabbitmq:username": username,
            "rabbitmq:password": password,
            "nsb-delays:rabbitmq": {"vhost": vhost, "brokerVersion": broker_version, "endpoints": PROD_ENDPOINTS},
        }
    )


def aws_stack() -> str:
    return stack_file(
        {
            "aws:region": PROD_REGION,
            "nsb-delays:sqs": {"queueNamePrefix": AWS_STACK_PREFIX, "endpoints": PROD_ENDPOINTS},
        }
    )


def rabbitmqctl_script(command: list[str], env: dict[str, str]) -> str:
    """A ``rabbitmqctl`` that runs ``command`` (the broker's own, with its node) in the broker's environment."""
    own = {key: value for key, value in env.items() if os.environ.get(key) != value}  # its cookie's HOME, epmd port, …
    exports = "".join(f"export {key}={shlex.quote(value)}\n" for key, value in own.items())
    return f'#!/bin/sh\n{exports}exec {shlex.join(command)} "$@"\n'


def pulumi_project(folder: Path) -> None:
    """The project as a reader's checkout has it, in ``folder``: Pulumi.yaml, the program under infra/ and the
    virtualenv Pulumi.yaml names (``runtime.options.virtualenv``: this test's own)."""
    (folder / "Pulumi.yaml").write_text((PROJECT / "Pulumi.yaml").read_text(encoding="utf-8"))
    (folder / "infra").symlink_to(PROJECT / "infra")
    virtualenv = yaml.safe_load((PROJECT / "Pulumi.yaml").read_text(encoding="utf-8"))["runtime"]["options"][
        "virtualenv"
    ]
    (folder / virtualenv).symlink_to(Path(sys.prefix))
    (folder / "policies").symlink_to(PROJECT / "policies")  # the pack, run in that virtualenv (its ../.venv)


def rabbitmq_only(stack_path: Path) -> None:
    data = yaml.safe_load(stack_path.read_text(encoding="utf-8"))
    data["config"] = {
        key: value for key, value in data["config"].items() if key.startswith(("rabbitmq:", "nsb-delays:rabbitmq"))
    }
    stack_path.write_text(yaml.safe_dump(data, sort_keys=False))


def git(folder: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=folder, check=True, capture_output=True, stdin=subprocess.DEVNULL)


def new_repository(folder: Path) -> None:
    """``folder`` a git repository on branch main, with a committer of its own."""
    git(folder, "init", "--quiet", "--initial-branch", "main")
    git(folder, "config", "user.email", "docs@example.invalid")
    git(folder, "config", "user.name", "docs")


def pushed_to_origin(folder: Path, origin: Path) -> None:
    """``folder`` a repository whose main, holding its files, is pushed to a bare ``origin`` (origin/main fetched)."""
    (folder / "policy.json").write_text(json.dumps(POLICY_CONFIG))
    git(origin.parent, "init", "--quiet", "--bare", "--initial-branch", "main", str(origin))
    new_repository(folder)
    git(folder, "add", "Pulumi.dev.yaml", "Pulumi.prod.yaml", "policy.json")
    git(folder, "commit", "--quiet", "-m", "stacks")
    git(folder, "remote", "add", "origin", str(origin))
    git(folder, "push", "--quiet", "origin", "main")
    git(folder, "fetch", "--quiet", "origin")


def commit_history(folder: Path, management_url: str, broker_version: str) -> None:
    """A repository whose previous commit has Shipping in Pulumi.prod.yaml and whose last commit dropped it."""
    new_repository(folder)
    (folder / "Pulumi.prod.yaml").write_text(prod_stack(management_url, broker_version, PROD_ENDPOINTS_BEFORE))
    git(folder, "add", "Pulumi.prod.yaml")
    git(folder, "commit", "--quiet", "-m", "prod with Shipping")
    (folder / "Pulumi.prod.yaml").write_text(prod_stack(management_url, broker_version, PROD_ENDPOINTS))
    git(folder, "commit", "--quiet", "-am", "Shipping retired")


def command_environment(extra: dict[str, str]) -> dict[str, str]:
    """The test's environment without its Pulumi engine (a block that needs it says so) and with this venv's
    ``nsb-delays`` first on PATH; wide enough that rich wraps nothing a page shows on one line."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PULUMI_", "RABBITMQ_", "AWS_"))}
    env.pop("NSB_ENGINE_DIR", None)
    venv_bin = str(Path(sys.executable).parent)
    path = [venv_bin, *(p for p in env.get("PATH", "").split(os.pathsep) if p and not shutil.which("pulumi", path=p))]
    return env | {"PATH": os.pathsep.join(path), "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"} | extra


@dataclass(frozen=True)
class Run:
    command: str
    returncode: int
    output: str

    def explain(self) -> str:
        return f"`{self.command}` exited {self.returncode}:\n{self.output[-SHOWN_OUTPUT:]}"


def run_bash(scene: Scene, script: str, timeout: float = JOB_HANG_GUARD_SECONDS) -> Run:
    """The script as a reader pastes it into bash: stopping at the first command that fails."""
    if scene.interrupt_when is not None:
        return run_interrupted(scene, script, scene.interrupt_when, timeout)
    completed = subprocess.run(**reader_shell(scene, script), timeout=timeout, check=False)
    return Run(script, completed.returncode, completed.stdout)


def reader_shell(scene: Scene, script: str) -> dict[str, Any]:
    """The subprocess arguments of the script as a reader's bash runs it in the scene: stopping at the first command
    that fails, its output and errors interleaved as a terminal shows them, no input."""
    return {
        "args": ["bash", "-e", "-o", "pipefail", "-c", script],
        "cwd": scene.folder,
        "env": scene.env,
        "stdout": subprocess.PIPE,
        "stderr": subprocess.STDOUT,
        "stdin": subprocess.DEVNULL,
        "text": True,
    }


def run_interrupted(scene: Scene, script: str, marker: Path, timeout: float) -> Run:
    """The script as run from a terminal, and Ctrl-C pressed once ``marker`` exists: SIGINT to its process group
    (a session of its own, SIGINT's default action as a terminal's shell leaves it). What the group still holds
    afterwards (the task the test hook holds) is killed."""
    job = subprocess.Popen(**reader_shell(scene, script), start_new_session=True, preexec_fn=ctrl_c_as_from_a_terminal)
    try:
        if wait_for_fault_point(marker, lambda: job.poll() is None, guard=timeout):
            os.killpg(job.pid, signal.SIGINT)
        output = job.communicate(timeout=timeout)[0]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    reached = "" if marker.exists() else f"\n(never interrupted: {marker} was not written)"
    return Run(script, job.returncode, output + reached)


# Box-drawing characters of rich's tables: a row is compared by its cells, whatever the column widths.
BOX = re.compile(r"[━─┃│┏┓┗┛┡┩┳┻╇╈┣┫└┘┌┐┴┬├┤┼╋]+")


def flat(text: str) -> str:
    """Text with table borders removed and all whitespace (line breaks too) collapsed to one space: rich wraps
    and pads by the terminal's width, the page by the author's."""
    return re.sub(r"\s+", " ", BOX.sub(" ", text)).strip()


# ``…`` standing alone (at the start of a line or after a space) elides lines, cells or words: the line is skipped.
ELIDED = re.compile(r"(?:^|\s)…")
# A word cut short with ``…`` (``run 39350fc5…:``) stands for any word: a run id, a URN.
CUT_WORD = re.compile(r"\S*…")


def missing_lines(
    expected: list[str], output: str, varies: Callable[[str], bool], *, counts_vary: bool = False
) -> list[str]:
    """The page's output lines not found, in order, in the command's output (a line with an elision, ``…``
    standing alone, and a line ``varies`` accepts are skipped; a word cut short with ``…`` stands for any
    word); ``counts_vary``: any number stands for any other (the page's run moved thousands of messages, the
    test's a few)."""
    haystack, position, missing = flat(output), 0, []
    for line in expected:
        wanted = flat(line)
        if not wanted or ELIDED.search(wanted) or varies(line):
            continue
        pieces = [re.escape(piece) for piece in CUT_WORD.split(wanted)]
        if counts_vary:
            pieces = [re.sub(r"\d[\d,]*(?:\\\.\d+)?", r"\\d[\\d,]*(?:\\.\\d+)?", piece) for piece in pieces]
        pattern = r"\S*".join(pieces)
        found = re.compile(pattern).search(haystack, position)
        if found is None:
            missing.append(line)
        else:
            position = found.end()
    return missing


class StandardPorts:
    """The broker at its standard ports (AMQP 5672, management 15672) on a loopback address of its own
    (127.x.y.z), forwarded to the ports the test broker chose: what a page leaves at its default (the AMQP URL
    a command derives from the management host, "the management host on 5672") then holds for the test broker.
    Connections are copied byte for byte, each direction in a thread; ``close`` stops listening."""

    def __init__(self, targets: dict[int, int]) -> None:
        self.host = f"127.{random.randrange(1, 255)}.{random.randrange(1, 255)}.{random.randrange(2, 255)}"
        self.listeners = []
        for port, target in targets.items():
            listener = socket.create_server((self.host, port))
            self.listeners.append(listener)
            threading.Thread(target=self._accept, args=(listener, target), daemon=True).start()

    def _accept(self, listener: socket.socket, target: int) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed
            try:
                upstream = socket.create_connection((HOST, target))
            except OSError:
                client.close()
                continue
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._copy, args=(source, sink), daemon=True).start()

    @staticmethod
    def _copy(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        for listener in self.listeners:
            listener.close()
