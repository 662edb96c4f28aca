"""The README's quickstart, run as written from an empty repository outside the checkout, on RabbitMQ 3.10 and the
newest 4.x; then on that repository: a good change and a bad one through ``pulumi preview --policy-pack policies``,
a second ``pulumi up`` that changes nothing, and the two pipelines ``init`` wrote, run step by step
(``tests/consumer/pipelines.py``) for a pull/merge request and for main.

The quickstart block is changed in three places only: its ``pip install nsb-delays`` is the session's wheel in a
fresh virtualenv (``consumer_cli``; the package is not on PyPI); ``init`` gets ``--requirement <the wheel>`` and
``--vhost`` (a vhost of the test's own on the shared test broker); ``pulumi login --local`` logs in to a directory of
the test's own (``--local`` is the passwd entry's home, whatever $HOME says). And one command is added: ``nsb-delays
preflight --stack prod --json`` right after its ``pulumi up``, its JSON and exit code kept for
``test_preflight_right_after_the_first_up_judges_every_endpoint_to_start`` (the block's own ``preflight``, its last
line, comes after ``verify``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nsb_delays.brokers.management import ManagementApi
from nsb_delays.components.model.rabbitmq.versions import broker_version_of, parse_reported_broker_version
from servers.rabbitmq import LocalRabbitMq
from tests.conftest import release_folder
from tests.consumer.conftest import (
    CONSUMER_BROKERS,
    SHOWN,
    ConsumerCli,
    output_tail,
    package_location,
    user_bash,
    user_environment,
)
from tests.consumer.gate import HeldAfterFirstDeclaration
from tests.consumer.pipelines import GIT_IDENTITY, JobRun, git, run_github_job, run_gitlab_job
from tests.docs.examples import Block, blocks_run_in, console_commands
from tests.docs.live import CONSUMER, missing_lines
from tests.engine.conftest import require_pulumi
from tests.packaging.conftest import PROJECT, from_wheelhouse

README = PROJECT / "README.md"
STACK = "prod"
STACK_FILE = "Pulumi.prod.yaml"
INSTALL_LINE = "pip install nsb-delays"
LOCAL_LOGIN = "pulumi login --local"
PREFLIGHT_JSON = f"nsb-delays preflight --stack {STACK} --json"

ON_BROKERS = pytest.mark.parametrize(
    "rabbitmq", CONSUMER_BROKERS, indirect=True, scope="session", ids=[f"rabbitmq-{v}" for v in CONSUMER_BROKERS]
)


def quickstart_commands() -> list[str]:
    """The README's Quickstart block, one command a line (comments kept: bash reads them)."""
    text = README.read_text()
    section = text[text.index("## Quickstart") :]
    match = re.search(r"```bash\n(?P<block>.*?)```", section, re.S)
    assert match is not None, "README.md's Quickstart has no ```bash block"
    return [line for line in match.group("block").splitlines() if line.strip()]


def test_the_quickstart_is_at_most_ten_commands_from_an_empty_repository() -> None:
    commands = quickstart_commands()
    assert len(commands) <= 10
    assert commands[0].split("#")[0].strip() == INSTALL_LINE
    assert commands[1].split("#")[0].strip() == "git init delays && cd delays"
    assert [command.split("#")[0].strip() for command in commands[-2:]] == [
        f"nsb-delays verify --stack {STACK}",
        f"nsb-delays preflight --stack {STACK}",
    ]


@dataclass(frozen=True)
class PreflightRun:
    """``PREFLIGHT_JSON`` as the quickstart's script ran it: its exit code, stdout (the JSON) and stderr."""

    returncode: int
    stdout: str
    stderr: str

    def explain(self) -> str:
        return (
            f"{PREFLIGHT_JSON} exited {self.returncode}\n--- stdout\n{self.stdout[-SHOWN:]}\n--- stderr\n{self.stderr}"
        )


def is_pulumi_up(command: str) -> bool:
    return command.split("#")[0].split()[:2] == ["pulumi", "up"]


def preflight_after_up(scratch: Path) -> list[str]:
    """The script's lines that run ``PREFLIGHT_JSON`` into files of ``scratch`` and go on whatever it exits (the test
    judges the exit code; the block's own ``preflight`` and ``set -e`` stop the script on a failure later)."""
    out, err, code = (shlex.quote(str(scratch / name)) for name in ("preflight.json", "preflight.err", "preflight.rc"))
    return [
        f"echo {shlex.quote('$ ' + PREFLIGHT_JSON)}",
        f'code=0; {PREFLIGHT_JSON} > {out} 2> {err} || code=$?; echo "$code" > {code}',
    ]


def read_preflight(scratch: Path) -> PreflightRun:
    return PreflightRun(
        int((scratch / "preflight.rc").read_text()),
        (scratch / "preflight.json").read_text(),
        (scratch / "preflight.err").read_text(),
    )


@dataclass
class Repository:
    path: Path
    env: dict[str, str]
    output: str
    vhost: str
    broker: LocalRabbitMq
    state: Path  # the DIY backend's directory
    first_preflight: PreflightRun  # PREFLIGHT_JSON right after the first `pulumi up`

    def run(self, *command: str, check: bool = True, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            command, cwd=cwd or self.path, env=self.env, capture_output=True, text=True, timeout=1200,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        if check and result.returncode != 0:
            pytest.fail(f"{shlex.join(command)} exited {result.returncode}\n{output_tail(result)}", pytrace=False)
        return result


def _broker_version(broker: LocalRabbitMq) -> str:
    return broker_version_of(parse_reported_broker_version(broker.version()))


@pytest.fixture(scope="module")
def repository(
    rabbitmq: LocalRabbitMq,
    consumer_cli: ConsumerCli,
    pulumi_bin: Path,
    wheelhouse: Path,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> Iterator[Repository]:
    """The quickstart run in a new directory: the README's commands after the install, in one shell."""
    root = tmp_path_factory.mktemp("consumer")
    home, state = root / "home", root / "pulumi-state"
    (home / ".pulumi").mkdir(parents=True)
    state.mkdir()
    engine_home = require_pulumi().home
    if engine_home is not None:  # the engine `make setup` built: its provider, nothing downloaded
        (home / ".pulumi" / "plugins").symlink_to(engine_home / "plugins")
    work = root / "work"
    work.mkdir()
    management = ManagementApi(rabbitmq.management_url, rabbitmq.username, rabbitmq.password)
    vhost = f"consumer-{uuid.uuid4().hex[:6]}"
    management.create_vhost(vhost)
    env = user_environment(
        home, consumer_cli.bin, pulumi_bin, pip=from_wheelhouse(wheelhouse),
        BROKER_URL=rabbitmq.management_url, BROKER_VERSION=_broker_version(rabbitmq),
        BROKER_USER=rabbitmq.username, BROKER_PASSWORD=rabbitmq.password,
        PULUMI_CONFIG_PASSPHRASE="consumer-tier", PULUMI_HOME=str(home / ".pulumi"), **GIT_IDENTITY,
    )  # fmt: skip
    commands = quickstart_commands()
    assert commands[0].split("#")[0].strip() == INSTALL_LINE  # done by consumer_cli
    first_up = next(index for index, command in enumerate(commands) if is_pulumi_up(command))
    script = []
    for index, command in enumerate(commands[1:], start=1):
        if command.startswith(LOCAL_LOGIN):
            # ~ of `file://~` is the passwd entry's home, not $HOME (pulumi/pulumi pkg/backend/diy/backend.go
            # `massageBlobPath`: user.Current()): a directory of the test's own instead
            command = f"pulumi login {state.as_uri()}"
        elif command.startswith("nsb-delays init "):
            command = command.split("#")[0].rstrip()
            command += f" --requirement {shlex.quote(str(consumer_cli.wheel))} --vhost {vhost}"
        script += [f"echo {shlex.quote('$ ' + command)}", command]
        if index == first_up:
            # before verify: the closest to the up, when the management API is most behind the broker (RabbitMQ
            # 4.3's by 5-7 s); and verify after it finds no drift, so preflight's reading changed nothing
            script += preflight_after_up(root)
    result = user_bash("\n".join(script), work, env, timeout=1800)
    if result.returncode != 0:
        pytest.fail(f"the README's quickstart stopped (exit {result.returncode})\n{output_tail(result)}", pytrace=False)
    try:
        yield Repository(
            work / "delays", env, result.stdout + result.stderr, vhost, rabbitmq, state, read_preflight(root)
        )
    finally:
        management.delete_vhost(vhost)
        release_folder(request, root)


@ON_BROKERS
def test_the_quickstart_deploys_and_verifies_with_the_stacks_secret_password(repository: Repository) -> None:
    """Its last command, ``nsb-delays verify --stack prod``, found no drift, with the password only in the stack
    (a Pulumi secret) and no credentials in the environment."""
    assert "BROKER_PASSWORD" not in repository.path.joinpath(STACK_FILE).read_text()
    assert not {"RABBITMQ_PASSWORD", "RABBITMQ_USERNAME"} & repository.env.keys()
    assert "secure:" in repository.path.joinpath(STACK_FILE).read_text()
    assert "no drift" in repository.output, repository.output[-SHOWN:]


@ON_BROKERS
def test_preflight_right_after_the_first_up_judges_every_endpoint_to_start(repository: Repository) -> None:
    """``nsb-delays preflight --stack prod --json``, run right after the quickstart's ``pulumi up`` with the stack's own
    login (its secret password): Sales and Billing, no endpoint users, each ``starts`` (and its work too); exit 0.
    Whether the management API still lagged the broker when it asked depends on the machine's load, so a wait is not
    required: when it waited, a note says so. (The block's last line, ``preflight`` after ``verify``, exited 0 too:
    the script runs with ``set -e``.)"""
    run = repository.first_preflight
    assert run.returncode == 0, run.explain()
    document = json.loads(run.stdout)
    assert document["ready"] is True, run.explain()
    broker = document["rabbitmq"]
    assert broker["vhost"] == repository.vhost
    verdicts = {report["endpoint"]: report["verdict"] for report in broker["endpoints"]}
    assert verdicts == {"Sales": "starts", "Billing": "starts"}, run.explain()
    assert all(report["starts"] and report["works"] for report in broker["endpoints"]), run.explain()
    if broker["waitedSeconds"] > 0:
        assert any(note.startswith("waited") for note in broker["notes"]), run.explain()


@ON_BROKERS
def test_the_program_and_the_pack_run_in_the_virtualenvs_pulumi_made(repository: Repository) -> None:
    """Pulumi made venv/ and policies/venv/ from the requirements init wrote: the package is there, not the checkout
    (whose folders are not on any path here: the CLI's own python is not on PATH either)."""
    for venv in ("venv", "policies/venv"):
        python = repository.path / venv / "bin" / "python"
        where = repository.run(str(python), "-c", "import nsb_delays; print(nsb_delays.__path__[0])").stdout.strip()
        assert Path(where).is_relative_to(repository.path / venv), where
    assert repository.run("sh", "-c", "command -v python3").stdout.strip() == "/usr/bin/python3"


@ON_BROKERS
def test_the_pack_passes_a_good_change_and_refuses_a_bad_one_naming_the_rule(repository: Repository) -> None:
    stack_file = repository.path / STACK_FILE
    deployed = stack_file.read_text()
    try:
        stack_file.write_text(deployed.replace('      - "Billing"\n', '      - "Billing"\n      - "Shipping"\n'))
        good = repository.run("pulumi", "preview", "--stack", STACK, "--policy-pack", "policies", "--non-interactive")
        assert "Shipping" in good.stdout and "mandatory" not in good.stdout
        unprotected = deployed.replace(
            "  nsb-delays:rabbitmq:\n", "  nsb-delays:rabbitmq:\n    protectDelayQueues: false\n"
        )
        stack_file.write_text(unprotected)
        bad = repository.run(
            "pulumi", "preview", "--stack", STACK, "--policy-pack", "policies", "--non-interactive", check=False
        )
        assert bad.returncode != 0, output_tail(bad)
        assert re.search(r"\[mandatory\]\s+delay-queue-protected", bad.stdout), output_tail(bad)
    finally:
        stack_file.write_text(deployed)
    again = repository.run(
        "pulumi",
        "up",
        "--stack",
        STACK,
        "--policy-pack",
        "policies",
        "--yes",
        "--expect-no-changes",
        "--non-interactive",
    )
    assert re.search(r"Resources:\s+\d+ unchanged\s*\n\s*\n", again.stdout), output_tail(again)


# The pipelines


@dataclass
class Ci:
    """A clone of the repository as a CI checks it out, and the secrets and variables the CI gives its jobs."""

    checkout: Path
    origin: Path
    env: dict[str, str]
    secrets: dict[str, str]


@pytest.fixture(scope="module")
def ci(repository: Repository, pulumi_bin: Path) -> Ci:
    """The quickstart's repository committed and pushed to an origin of its own; a clone of it for the jobs.
    Python (``setup-python``, the image's) is the machine's python3 as ``python``; the engine is Pulumi's CLI."""
    origin = repository.path.parent / "origin.git"
    repository.run("git", "add", "-A")
    repository.run("git", "commit", "-q", "-m", "Delayed delivery for Sales and Billing")
    repository.run("git", "branch", "-M", "main")
    repository.run("git", "init", "-q", "--bare", str(origin))
    repository.run("git", "remote", "add", "origin", str(origin))
    repository.run("git", "push", "-q", "origin", "main")
    checkout = repository.path.parent / "ci-checkout"
    repository.run("git", "clone", "-q", str(origin), str(checkout))
    python_bin = repository.path.parent / "python-bin"
    python_bin.mkdir()
    (python_bin / "python").symlink_to("/usr/bin/python3")
    env = {**repository.env, "PATH": ":".join([str(python_bin), str(pulumi_bin), "/usr/local/bin", "/usr/bin", "/bin"])}
    for name in ("BROKER_URL", "BROKER_VERSION", "BROKER_USER", "BROKER_PASSWORD"):
        env.pop(name)
    secrets = {
        "secrets.PULUMI_CONFIG_PASSPHRASE": repository.env["PULUMI_CONFIG_PASSPHRASE"],
        "vars.PULUMI_BACKEND_URL": repository.state.as_uri(),
        "secrets.RABBITMQ_USERNAME": repository.broker.username,
        "secrets.RABBITMQ_PASSWORD": repository.broker.password,
    }
    return Ci(checkout, origin, env, secrets)


def push_change(ci: Ci, branch: str, change: str, message: str) -> str:
    """A branch from main whose stack file has ``change`` applied (``old=>new``); returns its commit."""
    git(ci.checkout, "fetch", "-q", "origin")
    git(ci.checkout, "checkout", "-q", "-B", branch, "origin/main")
    old, new = change.split("=>")
    stack_file = ci.checkout / STACK_FILE
    text = stack_file.read_text()
    assert old in text
    stack_file.write_text(text.replace(old, new))
    git(ci.checkout, "commit", "-q", "-am", message)
    git(ci.checkout, "push", "-q", "origin", branch)
    return git(ci.checkout, "rev-parse", "HEAD")


def merge(ci: Ci, branch: str) -> tuple[str, str]:
    """Fast-forward main to ``branch``; returns main's commit before and after, and leaves main checked out."""
    git(ci.checkout, "fetch", "-q", "origin")
    before = git(ci.checkout, "rev-parse", "origin/main")
    git(ci.checkout, "push", "-q", "origin", f"{branch}:main")
    git(ci.checkout, "fetch", "-q", "origin")
    git(ci.checkout, "checkout", "-q", "-B", "main", "origin/main")
    return before, git(ci.checkout, "rev-parse", "HEAD")


def succeeded(run: JobRun) -> JobRun:
    assert run.failed is None, run.explain()
    return run


ADD_SHIPPING = '      - "Billing"\n=>      - "Billing"\n      - "Shipping"\n'
DROP_BILLING = '      - "Billing"\n=>'
ADD_INVOICING = '      - "Sales"\n=>      - "Sales"\n      - "Invoicing"\n'


@ON_BROKERS
def test_the_github_workflow_reviews_pull_requests_and_deploys_main(ci: Ci) -> None:
    workflow = ci.checkout / ".github" / "workflows" / "nsb-delays.yml"
    push_change(ci, "add-shipping", ADD_SHIPPING, "Shipping")
    pull_request = ci.env | {"GITHUB_BASE_REF": "main"}
    review = succeeded(run_github_job(workflow, "review", ci.checkout, pull_request, ci.secrets))
    assert {"actions/checkout@v5", "actions/setup-python@v6", "pulumi/actions@v6"} == {
        skipped.split(":")[0] for skipped in review.skipped
    }
    assert ":x:" not in review.summary and "policy check on `prod`" in review.summary, review.summary
    assert "Shipping" in review.steps[-1].output  # the preview

    push_change(ci, "drop-billing", DROP_BILLING, "Billing retired")
    retired = succeeded(run_github_job(workflow, "review", ci.checkout, pull_request, ci.secrets))
    assert "endpoint-retirement-order" in retired.summary and "Billing" in retired.summary, retired.summary

    before, _ = merge(ci, "add-shipping")
    deploy = succeeded(
        run_github_job(workflow, "deploy", ci.checkout, ci.env, ci.secrets | {"github.event.before": before})
    )
    verify, preflight = deploy.steps[-2:]
    assert verify.name == "nsb-delays verify" and "no drift" in verify.output, deploy.explain()
    # exit 0 (succeeded): every endpoint, Shipping just deployed included, would start with installers off
    assert preflight.name == "nsb-delays preflight" and "Shipping" in preflight.output, deploy.explain()


@ON_BROKERS
def test_the_gitlab_pipeline_reviews_merge_requests_and_deploys_the_default_branch(ci: Ci) -> None:
    ci_file = ci.checkout / ".gitlab-ci.yml"
    variables = {
        "PULUMI_CONFIG_PASSPHRASE": ci.secrets["secrets.PULUMI_CONFIG_PASSPHRASE"],
        "PULUMI_BACKEND_URL": ci.secrets["vars.PULUMI_BACKEND_URL"],
        "RABBITMQ_USERNAME": ci.secrets["secrets.RABBITMQ_USERNAME"],
        "RABBITMQ_PASSWORD": ci.secrets["secrets.RABBITMQ_PASSWORD"],
    }
    push_change(ci, "drop-sales-mr", '      - "Sales"\n=>', "Sales retired")
    review = succeeded(
        run_gitlab_job(
            ci_file, "review", ci.checkout, ci.env | variables | {"CI_MERGE_REQUEST_TARGET_BRANCH_NAME": "main"}
        )
    )
    assert "endpoint-retirement-order" in review.summary and "Sales" in review.summary, review.summary

    push_change(ci, "add-invoicing", ADD_INVOICING, "Invoicing")
    before, _ = merge(ci, "add-invoicing")
    deploy = succeeded(
        run_gitlab_job(ci_file, "deploy", ci.checkout, ci.env | variables | {"CI_COMMIT_BEFORE_SHA": before})
    )
    assert "no drift" in deploy.steps[-1].output, deploy.explain()
    # its last line, after verify; exit 0 (succeeded): every endpoint, Invoicing just deployed included, would start
    _, ran, preflight = deploy.steps[-1].output.partition('$ nsb-delays preflight --stack "$STACK"\n')
    assert ran and "Invoicing" in preflight, deploy.explain()


# The pages' blocks marked `runs-with: consumer` (tests/docs/live.py SERVICES): first-stack.md, ci.md

FIRST_STACK = PROJECT / "docs" / "tutorials" / "first-stack.md"
CI_PAGE = PROJECT / "docs" / "how-to" / "ci.md"
# Pulumi's timings (`created (0.02s)`, `Duration: 5s`): the page's run took its own.
TIMING = re.compile(r"\(\d+(?:\.\d+)?s\)|Duration: \d+(?:\.\d+)?s")
ON_OLDEST_BROKER = pytest.mark.parametrize(
    "rabbitmq", CONSUMER_BROKERS[:1], indirect=True, scope="session", ids=[f"rabbitmq-{CONSUMER_BROKERS[0]}"]
)


def consumer_blocks(page: Path) -> list[Block]:
    return blocks_run_in(CONSUMER, [page])


def ci_block(containing: str) -> Block:
    """The ci.md block of ``consumer_blocks`` whose source holds ``containing``: the page's order may change."""
    (block,) = [block for block in consumer_blocks(CI_PAGE) if containing in block.source]
    return block


def without_timings(text: str) -> str:
    return TIMING.sub("(…s)", text)


@dataclass
class ProjectCopy:
    """The quickstart's repository copied: the project of first-stack.md's step 1, which the quickstart made with the
    same commands (the virtualenvs `pulumi install` made are linked, not made again); on a vhost and a local backend
    of its own, stack prod initialised and empty."""

    path: Path
    env: dict[str, str]
    backend: Path

    def bash(self, script: str) -> subprocess.CompletedProcess[str]:
        return user_bash(script, self.path, self.env, timeout=1200)


@contextlib.contextmanager
def project_copy(repository: Repository, root: Path, management_url: str | None = None) -> Iterator[ProjectCopy]:
    """``management_url``: the stack's ``rabbitmq:endpoint`` instead of the broker's."""
    path = root / "delays"
    shutil.copytree(repository.path, path, symlinks=True, ignore=shutil.ignore_patterns("venv"))
    for venv in ("venv", "policies/venv"):
        (path / venv).symlink_to(repository.path / venv)
    vhost = f"copy-{uuid.uuid4().hex[:6]}"
    stack_file = path / STACK_FILE
    text = stack_file.read_text()
    assert repository.vhost in text and repository.broker.management_url in text
    text = text.replace(repository.vhost, vhost)  # a name of the test's own: only the vhost's value
    stack_file.write_text(
        text.replace(repository.broker.management_url, management_url or repository.broker.management_url)
    )
    management = ManagementApi(repository.broker.management_url, repository.broker.username, repository.broker.password)
    management.create_vhost(vhost)
    backend = root / "pulumi-state"
    backend.mkdir()
    env = repository.env | {"PULUMI_BACKEND_URL": backend.as_uri()}
    try:
        dataclasses.replace(repository, path=path, env=env).run("pulumi", "stack", "init", STACK)
        yield ProjectCopy(path, env, backend)
    finally:
        management.delete_vhost(vhost)


@pytest.fixture(scope="module")
def tutorial(repository: Repository, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProjectCopy]:
    with project_copy(repository, tmp_path_factory.mktemp("tutorial")) as copy:
        yield copy


@ON_OLDEST_BROKER
def test_the_first_stack_tutorial_deploys_previews_no_change_verifies_and_preflights_as_its_page_shows(
    tutorial: ProjectCopy,
) -> None:
    """Step 2 (``pulumi up --yes``) and step 3 (``pulumi preview --expect-no-changes``) print the page's lines, in
    order, and exit 0; then step 3's ``verify`` and ``preflight`` block exits 0 (no drift; every endpoint would
    start)."""
    blocks = consumer_blocks(FIRST_STACK)
    assert [block.kind for block in blocks] == ["console", "console", "bash"], [block.where for block in blocks]
    *shown, checks = blocks
    for block in shown:
        for command in console_commands(block.source):
            result = tutorial.bash(command.line)
            output = without_timings(result.stdout + result.stderr)
            missing = missing_lines([without_timings(text) for text in command.expected], output, lambda text: False)
            assert result.returncode == 0 and not missing, (
                f"{block.page}:{block.line_of(command.index)}: `{command.line}` exited {result.returncode}, lines "
                f"not printed: {missing}\n{output_tail(result)}"
            )
    assert "nsb-delays preflight --stack prod" in checks.source, checks.where
    result = tutorial.bash(checks.source)
    assert result.returncode == 0, f"{checks.where}: exited {result.returncode}\n{output_tail(result)}"
    assert "no drift" in result.stdout, output_tail(result)


@ON_OLDEST_BROKER
def test_the_ci_pages_deploy_on_main_previews_with_the_pack_deploys_and_verifies(tutorial: ProjectCopy) -> None:
    """ci.md's "On main: deploy" block, in the tutorial's project (deployed or not: `up` makes it so)."""
    deploy = ci_block("pulumi up --stack prod --yes")
    assert deploy.kind == "bash" and "pulumi up --stack prod --yes" in deploy.source, deploy.where
    result = tutorial.bash(deploy.source)
    assert result.returncode == 0, f"{deploy.where}: exited {result.returncode}\n{output_tail(result)}"
    assert "Loading policy packs...: done" in result.stdout and "no drift" in result.stdout, output_tail(result)


PACK_WRITTEN = "nsb-delays pulumi-plugin policy-pack nsb-delays-policies"


@ON_OLDEST_BROKER
def test_the_ci_pages_pack_from_an_installed_package_runs_in_a_preview_of_stack_dev(
    repository: Repository, consumer_cli: ConsumerCli, tmp_path: Path
) -> None:
    """ci.md's block for an installed package: ``pulumi-plugin policy-pack`` writes the pack (its requirements.txt
    naming the session's wheel, ``--requirement``: the package is not on PyPI), ``pulumi install`` makes its virtualenv
    with the package in it, and ``pulumi preview --stack dev --policy-pack`` loads it and passes. Stack dev is the
    quickstart's stack file under that name (its vhost and password), initialised on the copy's backend."""
    block = ci_block(PACK_WRITTEN)
    script = block.source.replace(PACK_WRITTEN, f"{PACK_WRITTEN} --requirement {shlex.quote(str(consumer_cli.wheel))}")
    with project_copy(repository, tmp_path) as copy:
        shutil.copy(copy.path / STACK_FILE, copy.path / "Pulumi.dev.yaml")
        init = copy.bash("pulumi stack init dev")
        assert init.returncode == 0, output_tail(init)
        result = copy.bash(script)
        assert result.returncode == 0, f"{block.where}: exited {result.returncode}\n{output_tail(result)}"
        assert "Loading policy packs...: done" in result.stdout, output_tail(result)
        pack = copy.path / "nsb-delays-policies"
        assert str(consumer_cli.wheel) in (pack / "requirements.txt").read_text()
        where = package_location(pack / "venv" / "bin" / "python", copy.path)
        assert where.is_relative_to(pack / "venv"), where


def descendants(pid: int) -> list[int]:
    """The processes ``pid`` started, and theirs (``/proc/<pid>/stat``: the parent is the field after the state)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = [], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


@ON_OLDEST_BROKER
def test_the_ci_pages_recovery_after_an_up_killed_midway_deploys_everything_without_drift(
    repository: Repository, tmp_path: Path
) -> None:
    """ci.md's recovery steps after an ``up`` (``PULUMI_SKIP_CHECKPOINTS=true``, a DIY backend) killed midway: the
    ``up`` is held once the broker has answered its first declaration (tests/consumer/gate.py), then it, the language
    host and the provider are killed (the page's step 1); the block (steps 2 to 4) exits 0 with no drift, having found
    the killed update's lock, and replaces or deletes nothing."""
    recovery = ci_block("pulumi cancel")
    assert recovery.kind == "bash" and "pulumi cancel" in recovery.source, recovery.where
    gate = HeldAfterFirstDeclaration(repository.broker.management_port)
    try:
        with project_copy(repository, tmp_path, gate.url) as copy:
            assert copy.env["PULUMI_SKIP_CHECKPOINTS"] == "true"
            up = subprocess.Popen(
                ["pulumi", "up", "--yes", "--skip-preview", "--stack", STACK], cwd=copy.path, env=copy.env,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
            try:
                assert gate.declared.wait(600), "the up declared nothing"
                assert up.poll() is None, "the up ended while held"
            finally:
                for pid in [up.pid, *descendants(up.pid)]:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                up.wait()
            assert list(copy.backend.glob(".pulumi/locks/**/*.json")), "the killed update left no lock"
            gate.reopen()
            result = copy.bash(recovery.source)
            assert result.returncode == 0, f"{recovery.where}: exited {result.returncode}\n{output_tail(result)}"
            assert "no drift" in result.stdout, output_tail(result)
            assert not re.search(r"\d+ (deleted|replaced)", result.stdout), output_tail(result)
    finally:
        gate.close()
