"""``nsb-delays init --tool opentofu`` against a broker: the repository it writes, committed, and the deploy job of its
GitHub workflow run step by step (tests/consumer/pipelines.py) as the runner would, with a real ``tofu`` and the
provider from the filesystem mirror (the engine tier's ``opentofu`` fixture), the state kept by the
module's own ``backend.tf`` (the http backend) in a state server of the test's: the render equals the committed
module, ``tofu apply`` creates the topology, ``nsb-delays verify`` finds no drift and ``nsb-delays preflight`` passes;
the job run again applies nothing (the state persisted). Then an endpoint dropped from the stack file: committed
without its render, the job stops before tofu; rendered and committed, the review job plans and the deploy job
applies, and the dropped endpoint's queue stays on the broker (the render's ``removed`` blocks).

The GitLab file's deploy job too, its state where its variables put it (GitLab's API, as the job token, locked).

What stands in for the runner's machine: the test's interpreter is the job's ``python`` and ``nsb-delays`` (the
package is not on an index: the install step is left out), the mirror's ``tofu`` is ``setup-opentofu``'s (and the
GitLab image's)."""

from __future__ import annotations

import base64
import os
import re
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from nsb_delays.brokers.management import ManagementApi
from nsb_delays.infra.cli import cli
from servers.rabbitmq import LocalRabbitMq
from tests.consumer.pipelines import JobRun, git, machine_path, run_github_job, run_gitlab_job
from tests.engine.test_transports_deployed import release
from tests.opentofu import OpenTofu

INSTALL_STEP = "Install nsb-delays in the virtualenv venv"


class StateServer(ThreadingHTTPServer):
    """OpenTofu's http backend protocol: GET the state (404: none yet), POST a new one, DELETE it; POST and DELETE
    on ``…/lock`` lock and unlock it (GitLab's lock and unlock methods), counted, never refused."""

    state: bytes | None = None
    writes = 0
    locks = 0
    paths: set[str]  # every path asked, without the query
    logins: set[str]  # every Authorization header


class StateHandler(BaseHTTPRequestHandler):
    server: StateServer

    def do_GET(self) -> None:
        self.server.paths.add(self.path.split("?")[0])
        self.server.logins.add(self.headers.get("Authorization", ""))
        body = self.server.state
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path.split("?")[0].endswith("/lock"):
            self.server.locks += 1
        else:
            self.server.state = body
            self.server.writes += 1
        self.empty_answer()

    def do_DELETE(self) -> None:
        if not self.path.split("?")[0].endswith("/lock"):
            self.server.state = None
        self.empty_answer()

    def empty_answer(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the test reads the job's output
        pass


@pytest.fixture
def state_server() -> Iterator[StateServer]:
    server = StateServer(("127.0.0.1", 0), StateHandler)
    server.paths, server.logins = set(), set()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def machine(directory: Path, tofu: Path) -> Path:
    """The runner's tools: ``python`` and ``nsb-delays`` from the test's interpreter, ``tofu`` from the mirror's
    build."""
    directory.mkdir()
    (directory / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (directory / "nsb-delays").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m nsb_delays.infra.cli "$@"\n')
    for name in ("python", "nsb-delays"):
        (directory / name).chmod(0o755)
    (directory / "tofu").symlink_to(tofu)
    return directory


def without_install(workflow: Path, copy: Path) -> Path:
    """The workflow without its install step (the machine has nsb-delays): every other step as init wrote it."""
    document = yaml.safe_load(workflow.read_text())
    for job in document["jobs"].values():
        steps = [step for step in job["steps"] if step.get("name") != INSTALL_STEP]
        assert len(steps) == len(job["steps"]) - 1, "the install step is gone from the workflow: update this test"
        job["steps"] = steps
    copy.write_text(yaml.safe_dump(document, sort_keys=False))
    return copy


def succeeded(run: JobRun) -> JobRun:
    assert run.failed is None, run.explain()
    return run


def step_output(run: JobRun, name: str) -> str:
    return next(step.output for step in run.steps if step.name == name)


def repository(tmp_path: Path, rabbitmq: LocalRabbitMq, broker_version: tuple[int, ...], vhost: str) -> Path:
    """What ``init --tool opentofu`` writes for the broker, committed on main."""
    checkout = tmp_path / "repository"
    result = CliRunner().invoke(
        cli,
        ["init", str(checkout), "--tool", "opentofu", "--broker-url", rabbitmq.management_url, "--broker-version",
         release(broker_version), "--vhost", vhost, "--endpoint", "Sales", "--endpoint", "Billing"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    git(checkout, "init", "--quiet", "--initial-branch", "main")
    git(checkout, "add", "--all")
    git(checkout, "commit", "--quiet", "--message", "nsb-delays init --tool opentofu")
    return checkout


def machine_env(tmp_path: Path, opentofu: OpenTofu) -> dict[str, str]:
    """The runner's environment: its tools first on PATH, OpenTofu's providers from the mirror."""
    return {
        "PATH": machine_path(machine(tmp_path / "machine", opentofu.binary)),
        "HOME": str(tmp_path),
        "PYTHONPATH": os.pathsep.join(str(Path(entry).absolute()) for entry in sys.path if entry),
        "TF_CLI_CONFIG_FILE": str(opentofu.cli_config),
        "CHECKPOINT_DISABLE": "1",
    }


def test_the_deploy_job_init_wrote_applies_the_module_verifies_and_preflights(
    opentofu: OpenTofu,
    rabbitmq: LocalRabbitMq,
    broker_version: tuple[int, ...],
    module_vhost: Any,
    state_server: StateServer,
    tmp_path: Path,
) -> None:
    vhost = module_vhost("init-tofu")
    checkout = repository(tmp_path, rabbitmq, broker_version, vhost)
    workflow = without_install(checkout / ".github" / "workflows" / "nsb-delays.yml", tmp_path / "workflow.yml")
    env = machine_env(tmp_path, opentofu)
    contexts = {
        "secrets.RABBITMQ_USERNAME": rabbitmq.username,
        "secrets.RABBITMQ_PASSWORD": rabbitmq.password,
        "vars.TF_HTTP_ADDRESS": f"http://127.0.0.1:{state_server.server_address[1]}/state/prod",
        "github.event.before": "0" * 40,  # the first push: the stack file is its own baseline
    }
    deploy = succeeded(run_github_job(workflow, "deploy", checkout, env, contexts))
    assert [step.name for step in deploy.steps][-5:] == [
        "module/ is the render of the stack file", "tofu init", "tofu apply", "nsb-delays verify",
        "nsb-delays preflight",
    ]  # fmt: skip
    assert "Apply complete!" in step_output(deploy, "tofu apply")
    assert state_server.state is not None and state_server.writes >= 1
    management = ManagementApi(rabbitmq.management_url, rabbitmq.username, rabbitmq.password)
    assert {"Sales", "Billing", "nsb.v2.delay-level-27"} <= {queue["name"] for queue in management.queues(vhost)}

    again = succeeded(run_github_job(workflow, "deploy", checkout, env, contexts))
    assert "0 added, 0 changed, 0 destroyed" in step_output(again, "tofu apply") or "No changes." in step_output(
        again, "tofu apply"
    ), step_output(again, "tofu apply")

    stack_file = checkout / "Pulumi.prod.yaml"
    stack_file.write_text(stack_file.read_text().replace('      - "Billing"\n', ""))
    git(checkout, "commit", "--quiet", "--all", "--message", "Billing retired, the module not rendered")
    stale = run_github_job(workflow, "deploy", checkout, env, contexts)
    assert stale.failed is not None and stale.failed.name == "module/ is the render of the stack file", stale.explain()
    assert "module/ is not the render of Pulumi.prod.yaml" in stale.failed.output
    git(checkout, "checkout", "--quiet", "--", "module")
    result = CliRunner().invoke(cli, ["render", "--stack", str(stack_file), "--format", "terraform", "-o",
                                      str(checkout / "module")])  # fmt: skip
    assert result.exit_code == 0, result.output
    git(checkout, "add", "--all", "module")
    git(checkout, "commit", "--quiet", "--message", "the module rendered")
    review = succeeded(
        run_github_job(workflow, "review", checkout, env, contexts | {"github.event.pull_request.number": "1"})
    )
    plan = re.sub(r"\x1b\[[0-9;]*m", "", step_output(review, "tofu plan"))
    assert "rabbitmq_queue.rabbitmq-Billing-Billing will be removed from the OpenTofu state but will not be" in plan
    assert "1 to forget." in plan, plan
    succeeded(run_github_job(workflow, "deploy", checkout, env, contexts))
    assert "Billing" in {queue["name"] for queue in management.queues(vhost)}


INSTALLS = ("python -m venv ", "venv/bin/pip ", "curl ", "sh /tmp/install-opentofu.sh ")


def without_installs(ci_file: Path, copy: Path) -> Path:
    """The GitLab file without the lines that install nsb-delays and tofu (the machine has them)."""
    document = yaml.safe_load(ci_file.read_text())
    before = document[".nsb-delays"]["before_script"]
    kept = [line for line in before if not line.startswith(INSTALLS)]
    assert len(before) - len(kept) == len(INSTALLS), "the install lines changed: update this test"
    document[".nsb-delays"]["before_script"] = kept
    copy.write_text(yaml.safe_dump(document, sort_keys=False))
    return copy


def test_the_gitlab_deploy_job_keeps_the_state_where_gitlab_keeps_it_locked(
    opentofu: OpenTofu,
    rabbitmq: LocalRabbitMq,
    broker_version: tuple[int, ...],
    module_vhost: Any,
    state_server: StateServer,
    tmp_path: Path,
) -> None:
    """The GitLab file's deploy job (its variables as written: the state at GitLab's API, locked and unlocked with
    its methods, as the job token), with the state server standing for GitLab's API."""
    checkout = repository(tmp_path, rabbitmq, broker_version, module_vhost("init-tofu-gitlab"))
    ci_file = without_installs(checkout / ".gitlab-ci.yml", tmp_path / "gitlab-ci.yml")
    env = machine_env(tmp_path, opentofu) | {
        "CI_API_V4_URL": f"http://127.0.0.1:{state_server.server_address[1]}/api/v4",
        "CI_PROJECT_ID": "7",
        "CI_JOB_TOKEN": "job-token",
        "CI_COMMIT_BEFORE_SHA": "0" * 40,
        "RABBITMQ_USERNAME": rabbitmq.username,
        "RABBITMQ_PASSWORD": rabbitmq.password,
    }
    deploy = run_gitlab_job(ci_file, "deploy", checkout, env)
    assert deploy.failed is None, deploy.explain()
    output = deploy.steps[0].output
    assert "Apply complete!" in output
    assert state_server.paths == {"/api/v4/projects/7/terraform/state/prod"}
    assert state_server.logins == {"Basic " + base64.b64encode(b"gitlab-ci-token:job-token").decode()}
    assert state_server.state is not None and state_server.locks >= 1
