"""``nsb-delays preflight --stack STACK``: would each endpoint start, and work, with installers off, as NServiceBus
judges it? One row per endpoint; exit 0 when every one would, 1 when one would not, 2 when it could not check.

It only reads. The management API login is ``verify``'s (flags, the provider's environment variables, the stack's
``rabbitmq:`` keys) and must be an administrator's (the permission records are theirs to read); each endpoint with a
stack user is judged as that user, its password the stack config value its ``passwordKey`` names (a Pulumi secret is
read with ``pulumi config --show-secrets``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from nsb_delays.brokers.endpoint_verdict import EndpointReport
from nsb_delays.brokers.management import ManagementApi, ManagementError
from nsb_delays.brokers.preflight import Login, RabbitMqPreflight, preflight_rabbitmq
from nsb_delays.brokers.preflight_sqs import preflight_sqs
from nsb_delays.stack.config import NAMESPACE, ConfigError, RabbitMqConfig, load_stack, read_stack_yaml

from .broker_options import StackDefaults, management_options, resolve_management
from .errors import EXIT_FAILED, EXIT_OK, CommandError
from .passwords import passwords_option, read_passwords
from .stack_option import stack_option
from .verify import sqs_client_of, sqs_problem

DEFAULT_WAIT_SECONDS = 30.0


def endpoint_logins(
    config: RabbitMqConfig, defaults: StackDefaults, given: Login, passwords: Mapping[str, str] | None = None
) -> dict[str, Login]:
    """Each endpoint's login: its stack user with its password from ``passwords`` (``--passwords``), else the stack
    config value its ``passwordKey`` names; an endpoint without a user, the given login. ``CommandError`` naming every
    password that cannot be read."""
    problems = []
    logins = {endpoint.endpoint: given for endpoint in config.endpoints}
    for planned in config.users:
        user, setting = planned.settings, f"{NAMESPACE}:{planned.password_key}"
        try:
            password = (passwords or {}).get(user.user) or defaults.provider(setting, "--passwords")
        except CommandError as error:
            problems += error.problems
            continue
        if not password:
            problems.append(
                f"{setting} is not set: endpoint {planned.endpoint!r} logs in as {user.user!r} with it "
                f"(pulumi config set --secret {setting} <password>, or give it in --passwords)"
            )
            continue
        logins[planned.endpoint] = Login(user.user, str(password))
    if problems:
        raise CommandError(problems)
    return logins


def verdict_table(reports: tuple[EndpointReport, ...], title: str) -> Table:
    table = Table("Endpoint", "Release", "Login", "Verdict", "Reason", "Fix", title=title)
    styles = {"starts": "green", "does not start": "red"}
    for report in reports:
        failed = report.failed
        reason = "; ".join(finding.detail for finding in failed) or "every check passed"
        fix = "; ".join(dict.fromkeys(finding.fix for finding in failed if finding.fix))
        style = styles.get(report.verdict, "yellow")
        table.add_row(
            report.endpoint, report.transport_version, report.login, f"[{style}]{report.verdict}[/]", reason, fix
        )
    return table


@click.command(name="preflight")
@stack_option
@management_options()
@click.option(
    "--wait",
    type=click.FloatRange(0, 600),
    default=DEFAULT_WAIT_SECONDS,
    show_default=True,
    help="Seconds to wait, at most, for the management API to show each queue's policy as the broker applies it "
    "(it lags the broker); 0: judge its first answers.",
)
@click.option("--sqs-endpoint-url", envvar="AWS_ENDPOINT_URL_SQS", help="SQS endpoint, e.g. an emulator.")
@click.option("--region", envvar="AWS_REGION", help="AWS region. Default: stack aws:region.")
@click.option("--skip-rabbitmq", is_flag=True, help="Do not check RabbitMQ even if the stack configures it.")
@click.option("--skip-sqs", is_flag=True, help="Do not check SQS even if the stack configures it.")
@passwords_option(
    "each endpoint with a stack user logs in with its password from this file instead of the stack's secret its "
    "passwordKey names."
)
@click.option("--json", "as_json", is_flag=True, help="Print the verdicts as JSON instead of a table.")
def preflight(
    stack: str,
    wait: float,
    sqs_endpoint_url: str | None,
    region: str | None,
    skip_rabbitmq: bool,
    skip_sqs: bool,
    passwords_file: Path | None,
    as_json: bool,
    **connection: Any,
) -> None:
    """Would each endpoint of STACK start, and work, with installers off? Checks what NServiceBus checks at start, as
    of each endpoint's transportVersion, as its own login, and what its work needs; reads only. Exit 0: every
    endpoint would; 1: one would not; 2: the check could not run."""
    passwords = read_passwords(passwords_file) if passwords_file is not None else None
    try:
        config = load_stack(stack, password_secrets=passwords is None)  # else they are --passwords'
        defaults = StackDefaults(read_stack_yaml(stack), config, stack)
    except ConfigError as error:
        raise CommandError(str(error)) from None
    rabbitmq = config.rabbitmq if not skip_rabbitmq else None
    sqs_endpoints = config.sqs.endpoints if config.sqs and not skip_sqs else ()
    if rabbitmq is None and not sqs_endpoints:
        raise CommandError(f"stack {stack!r} has nothing to check (no rabbitmq/sqs section, or both skipped)")
    progress = (lambda line: click.echo(line, err=True)) if not as_json else (lambda _: None)
    broker = _rabbitmq(rabbitmq, defaults, connection, wait, progress, passwords) if rabbitmq else None
    sqs_reports = _sqs(sqs_endpoints, sqs_endpoint_url, region, defaults) if sqs_endpoints else ()
    ready = (broker is None or broker.ready) and all(report.ready for report in sqs_reports)
    if as_json:
        document = {"ready": ready, "rabbitmq": broker.as_json() if broker else None}
        click.echo(json.dumps(document | {"sqs": [report.as_json() for report in sqs_reports]}, indent=2))
    else:
        print_report(broker, sqs_reports)
    raise SystemExit(EXIT_OK if ready else EXIT_FAILED)


def _rabbitmq(
    config: RabbitMqConfig,
    defaults: StackDefaults,
    connection: dict[str, Any],
    wait: float,
    progress: Any,
    passwords: Mapping[str, str] | None,
) -> RabbitMqPreflight:
    api: ManagementApi = resolve_management(connection, defaults=defaults)
    logins = endpoint_logins(config, defaults, Login(api.username, api.password), passwords)
    try:
        return preflight_rabbitmq(api, config, logins, wait=wait, progress=progress)
    except ManagementError as error:
        raise CommandError(_login_problem(error)) from None


def _login_problem(error: ManagementError) -> str:
    """The management API's refusal, with what the login lacks: an administrator's tag (``rabbit_mgmt_util``
    ``is_authorized_admin``: "Not administrator user"), or the login itself."""
    if error.status in (401, 403) and "administrator" in str(error).lower():
        return (
            f"{error}: preflight reads the vhost's definitions and permission records, which needs an "
            "administrator's login (--username)"
        )
    if error.status == 401:
        return f"{error}: check --username and --password (or the stack's rabbitmq:username/password)"
    return str(error)


def _sqs(
    endpoints: Any, endpoint_url: str | None, region: str | None, defaults: StackDefaults
) -> tuple[EndpointReport, ...]:
    problems: list[str] = []
    client = sqs_client_of(endpoint_url, region, defaults, problems)
    if client is None:
        raise CommandError(problems)
    try:
        return preflight_sqs(client, endpoints)
    except Exception as error:  # botocore: credentials, endpoint, access denied
        raise CommandError(sqs_problem(error)) from None


def print_report(broker: RabbitMqPreflight | None, sqs_reports: tuple[EndpointReport, ...]) -> None:
    console = Console(width=200)
    if broker is not None:
        statistics = "on" if broker.statistics else "off"
        console.print(
            f"RabbitMQ {broker.version} at {broker.url}, vhost {broker.vhost!r} (management statistics {statistics})",
            highlight=False,
        )
        for note in broker.notes:
            console.print(f"  note: {note}", highlight=False)
        console.print(verdict_table(broker.endpoints, f"{len(broker.endpoints)} RabbitMQ endpoint(s)"))
    if sqs_reports:
        console.print(verdict_table(sqs_reports, f"{len(sqs_reports)} SQS endpoint(s)"))
    reports = (*(broker.endpoints if broker else ()), *sqs_reports)
    failing = [report.endpoint for report in reports if not report.ready]
    summary = f"{len(reports) - len(failing)} of {len(reports)} endpoint(s) would start and work with installers off"
    console.print(summary + (f"; not: {', '.join(failing)}" if failing else ""), highlight=False)
