"""The wheel installed with ``[spark]`` (not editable, not dev) into a fresh virtualenv, used from a user's
project that has its own ``components/``, ``pipeline/``, ``infra/`` and ``policies/`` packages first on
sys.path: the CLI, the components in the user's Pulumi program under mocks, the policy rules, and the
migration job through ``spark-submit`` — nothing shadowed either way, every package-data file present.
"""

from __future__ import annotations

import json
import zipfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from nsb_delays.components.model.rabbitmq.names import Generation, delay_level_name
from nsb_delays.components.model.rabbitmq.routing import routing_key
from nsb_delays.infra.render import FORMATS, render
from nsb_delays.infra.render.terraform import terraform_module
from nsb_delays.stack.config import load_stack
from tests.packaging.conftest import PROJECT, Built, Venv, in_user_project, run

VERSION_LINE = "nsb-delays, version 0.1.0"


def site_packages(environment: Venv) -> Path:
    (path,) = (environment.path / "lib").glob("python3.*/site-packages")
    return path


def cli(environment: Venv, project: Path, *args: str | Path, check: bool = True):
    return run(
        [environment.bin("nsb-delays"), *args], cwd=project, env=in_user_project(environment, project), check=check
    )


def test_cli_version_and_explain(spark_venv: Venv, user_project: Path) -> None:
    assert cli(spark_venv, user_project, "--version").stdout.strip() == VERSION_LINE
    path = json.loads(cli(spark_venv, user_project, "explain", "10", "Sales", "--json").stdout)
    assert path["routing_key"] == routing_key(10, "Sales")
    assert path["first_exchange"] == "nsb.v2.delay-level-03"


@pytest.mark.parametrize("format_name", list(FORMATS))
@pytest.mark.parametrize("stack", ["dev", "every-option"])
def test_render_every_format_as_the_checkout_does(spark_venv: Venv, user_project: Path, format_name, stack) -> None:
    """The installed templates render byte for byte what the checkout renders."""
    stack_file = user_project / f"Pulumi.{stack}.yaml"
    output = cli(spark_venv, user_project, "render", "--stack", stack_file, "--format", format_name).stdout
    assert output == render(load_stack(str(stack_file)), format_name, str(stack_file))


@pytest.mark.parametrize("stack", ["dev", "every-option"])
def test_render_the_terraform_module_as_the_checkout_does(spark_venv: Venv, user_project: Path, stack: str) -> None:
    """A directory format: every file the installed package writes is the checkout's."""
    stack_file = user_project / f"Pulumi.{stack}.yaml"
    module = user_project / f"module-{stack}"
    cli(spark_venv, user_project, "render", "--stack", stack_file, "--format", "terraform", "-o", module)
    expected = terraform_module(load_stack(str(stack_file)), str(stack_file)).files
    assert {name: (module / name).read_text(encoding="utf-8") for name in expected} == expected


def test_check_runs_the_policy_pack_offline(spark_venv: Venv, user_project: Path) -> None:
    passing = cli(spark_venv, user_project, "check", "--stack", user_project / "Pulumi.dev.yaml", "--format", "json")
    report = json.loads(passing.stdout)
    assert report["violations"] == [] and report["resources"] > 100
    failing = cli(spark_venv, user_project, "check", "--stack", user_project / "Pulumi.every-option.yaml", check=False)
    assert failing.returncode == 1, failing.stdout + failing.stderr
    assert "sqs-queue-encrypted" in failing.stdout and "Traceback" not in failing.stderr


def test_user_program_under_pulumi_mocks_resolves_each_import_to_its_owner(spark_venv: Venv, user_project: Path):
    result = run([spark_venv.python, "program.py"], cwd=user_project, env=in_user_project(spark_venv, user_project))
    report = json.loads(result.stdout)
    installed = site_packages(spark_venv) / "nsb_delays"
    files = {name: Path(path) for name, path in report["files"].items()}
    assert files["components"] == user_project / "components" / "__init__.py"
    assert files["pipeline"] == user_project / "pipeline" / "__init__.py"
    assert files["nsb_delays.components"] == installed / "components" / "__init__.py"
    assert files["nsb_delays.pipeline"] == installed / "pipeline" / "__init__.py"
    assert files["RabbitMqEndpoint"] == installed / "components" / "rabbitmq.py"
    assert report["user_owner"] == ["user project", "user project", "mine"]
    assert [Path(path) for path in report["namespace_path"]] == [installed], "no checkout on the namespace path"
    registered = {(resource["type"], resource["name"]) for resource in report["registered"]}
    assert ("nsb-delays:index:RabbitMqEndpoint", "sales") in registered
    assert ("nsb-delays:index:SqsEndpoint", "sales-sqs") in registered
    level_queues = [r for r in report["registered"] if r["type"] == "rabbitmq:index/queue:Queue"]
    assert {r["inputs"]["name"] for r in level_queues} >= {
        delay_level_name(level, Generation.V2) for level in range(28)
    }
    assert report["violations"] == ["sqs-queue-encrypted"], "the pack's rules ran, and caught the unencrypted queue"


def test_every_package_data_file_of_the_wheel_is_installed(spark_venv: Venv, built: Built) -> None:
    with zipfile.ZipFile(built.wheel) as archive:
        data = [name for name in archive.namelist() if name.startswith("nsb_delays/") and not name.endswith(".py")]
    assert data, "the wheel lists package data"
    missing = [name for name in data if not (site_packages(spark_venv) / name).is_file()]
    assert missing == []


def write_export(path: Path, now: datetime) -> None:
    """Five RavenDB ``TimeoutData`` documents for ``Sales``: 3 due later, 1 past due, 1 without destination."""
    due = [now + timedelta(seconds=s) for s in (30, 3600, 86400 * 10, -60, 30)]
    pq.write_table(
        pa.table(
            {
                "Id": [f"TimeoutDatas/{i}" for i in range(5)],
                "Destination": ["Sales", "Sales", "Billing", "Sales", None],
                "State": pa.array([b"{}"] * 5, pa.binary()),
                "Time": pa.array([d.replace(tzinfo=None) for d in due], pa.timestamp("us")),
                "Headers": [json.dumps({"NServiceBus.MessageId": f"m{i}"}) for i in range(5)],
                "OwningTimeoutManager": ["Sales"] * 5,
            }
        ),
        path,
    )


def test_spark_submit_runs_the_installed_job(spark_venv: Venv, user_project: Path, tmp_path: Path) -> None:
    """``spark-submit "$(python -m nsb_delays.infra.spark_job --job-file)" preview`` in local mode, from the user's
    project (its ``pipeline`` package first on the driver's and the workers' sys.path): [spark] alone runs it."""
    env = in_user_project(spark_venv, user_project, PYSPARK_PYTHON=str(spark_venv.python))
    job_file = run([spark_venv.python, "-m", "nsb_delays.infra.spark_job", "--job-file"], cwd=user_project, env=env)
    job = Path(job_file.stdout.strip())
    assert job == site_packages(spark_venv) / "nsb_delays" / "infra" / "spark_job.py"
    export = tmp_path / "timeouts.parquet"
    write_export(export, datetime.now(UTC))
    report_dir = tmp_path / "report"
    result = run(
        [
            spark_venv.bin("spark-submit"), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
            "--conf", "spark.sql.shuffle.partitions=2",  # five rows: not Spark's default 200 shuffle tasks
            job,
            "preview", "--source-path", export, "--endpoint", "Sales", "--report-dir", report_dir,
        ],
        cwd=user_project,
        env=env,
    )  # fmt: skip
    assert "5 timeouts, nothing migrated" in result.stdout, result.stdout
    assert f"report: {report_dir / 'preview.html'}" in result.stdout
    html = (report_dir / "preview.html").read_text()
    assert "timeouts.parquet" in html
    assert {path.name for path in report_dir.glob("*.png")} == {
        "delay-histogram.png",
        "first-levels.png",
        "destinations.png",
    }
    assert PROJECT not in job.parents
