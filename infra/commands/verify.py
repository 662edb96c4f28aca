"""``nsb-delays verify --stack STACK``: check a live broker (and SQS) against the stack; exit 1 on drift.

Connection settings come from flags, then the pulumi-rabbitmq provider's environment variables,
then the stack file's provider config (``rabbitmq:endpoint``, ``rabbitmq:username``, …), so the same
settings ``pulumi up`` uses work here. Exit codes: 0 no drift, 1 drift, 2 could not check.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

import click
import urllib3
from rich.console import Console
from rich.table import Table

from nsb_delays.brokers.management import ManagementApi, ManagementError
from nsb_delays.brokers.verify import Drift, verify_rabbitmq, verify_sqs
from nsb_delays.stack.config import ConfigError, StackConfig, load_stack, read_stack_yaml
from nsb_delays.stack.errors import EXIT_FAILED, EXIT_OK, CommandError, is_aws_client_error

from .render import STACK_HELP

NO_DRIFT_EXIT, DRIFT_EXIT = EXIT_OK, EXIT_FAILED


class CannotVerify(CommandError):
    """The check itself could not run (bad config, broker unreachable, credentials missing): exit 2."""


def provider_setting(raw: Mapping[str, Any], key: str, flag: str) -> Any:
    """A ``rabbitmq:``/``aws:`` provider key from the stack file; Pulumi secrets cannot be read here."""
    value = raw.get(key)
    if isinstance(value, Mapping) and "secure" in value:
        raise CannotVerify(f"stack config {key} is a Pulumi secret (encrypted); pass {flag} or its env variable")
    return value


def drift_table(drifts: list[Drift]) -> Table:
    table = Table("Drift", "Object", "Field", "Expected", "Actual", title=f"{len(drifts)} drift(s)")
    styles = {"missing": "red", "unexpected": "yellow", "different": "magenta"}
    for drift in drifts:
        table.add_row(
            f"[{styles[drift.kind]}]{drift.kind}[/]", drift.subject, drift.field, drift.expected, drift.actual
        )
    return table


def fix_lines(drifts: list[Drift]) -> list[str]:
    """One line per drift that says what to do about it (``Drift.fix``), under the table."""
    return [f"{drift.subject} {drift.field}".strip() + f": {drift.fix}" for drift in drifts if drift.fix]


def print_drifts(console: Console, drifts: list[Drift]) -> None:
    console.print(drift_table(drifts))
    for line in fix_lines(drifts):
        console.print(f"  fix {line}", highlight=False)


def sqs_client(endpoint_url: str | None, region: str | None) -> Any:
    import boto3

    return boto3.client("sqs", endpoint_url=endpoint_url, region_name=region)


def _sqs_problem(error: Exception) -> str:
    """``SQS: <reason>`` for what boto3/botocore raise (credentials, endpoint, access denied); others re-raise."""
    if isinstance(error, ValueError) or is_aws_client_error(error):
        return f"SQS: {error}"
    raise error


def run_checks(
    stack: StackConfig, api: ManagementApi | None, sqs: Any | None
) -> tuple[list[Drift], list[str], list[str]]:
    """Drifts of every configured section that has a client, a line per section checked, and the problems
    that stopped a side (unreachable, refused login): every side is tried, so all of them are reported."""
    drifts: list[Drift] = []
    checked = []
    problems = []
    if stack.rabbitmq and api is not None:
        try:
            found = verify_rabbitmq(api, stack.rabbitmq)
        except (ManagementError, ValueError) as error:
            problems.append(str(error))
        else:
            drifts += found
            checked.append(
                f"RabbitMQ {api.url} vhost {stack.rabbitmq.vhost!r} ({stack.rabbitmq.generation}): "
                f"{len(found)} drift(s)"
            )
    if stack.sqs and sqs is not None:
        try:
            found = verify_sqs(sqs, stack.sqs)
        except Exception as error:  # botocore: credentials, endpoint, access denied
            problems.append(_sqs_problem(error))
        else:
            drifts += found
            checked.append(f"SQS {sqs.meta.endpoint_url}: {len(found)} drift(s)")
    return drifts, checked, problems


def register(cli: click.Group) -> None:
    @cli.command(name="verify")
    @click.option("--stack", required=True, help=STACK_HELP)
    @click.option("--management-url", envvar="RABBITMQ_ENDPOINT", help="Default: stack rabbitmq:endpoint.")
    @click.option("--username", envvar="RABBITMQ_USERNAME", help="Default: stack rabbitmq:username.")
    @click.option("--password", envvar="RABBITMQ_PASSWORD", help="Default: stack rabbitmq:password.")
    @click.option(
        "--ca-cert",
        envvar="RABBITMQ_CACERT",
        type=click.Path(exists=True, dir_okay=False),
        help="CA bundle for an https management URL. Default: stack rabbitmq:cacertFile.",
    )
    @click.option(
        "--client-cert",
        type=click.Path(exists=True, dir_okay=False),
        help="Client certificate (PEM). Default: stack rabbitmq:clientcertFile.",
    )
    @click.option(
        "--client-key",
        type=click.Path(exists=True, dir_okay=False),
        help="Client key (PEM). Default: stack rabbitmq:clientkeyFile.",
    )
    @click.option(
        "--insecure", is_flag=True, default=None, help="Skip TLS certificate checks (stack rabbitmq:insecure)."
    )
    @click.option("--sqs-endpoint-url", envvar="AWS_ENDPOINT_URL_SQS", help="SQS endpoint, e.g. an emulator.")
    @click.option("--region", envvar="AWS_REGION", help="AWS region. Default: stack aws:region.")
    @click.option("--skip-rabbitmq", is_flag=True, help="Do not check RabbitMQ even if the stack configures it.")
    @click.option("--skip-sqs", is_flag=True, help="Do not check SQS even if the stack configures it.")
    @click.option("--json", "as_json", is_flag=True, help="Print {checked, drifts} as JSON instead of a table.")
    def verify(
        stack: str,
        management_url: str | None,
        username: str | None,
        password: str | None,
        ca_cert: str | None,
        client_cert: str | None,
        client_key: str | None,
        insecure: bool | None,
        sqs_endpoint_url: str | None,
        region: str | None,
        skip_rabbitmq: bool,
        skip_sqs: bool,
        as_json: bool,
    ) -> None:
        """Check a live broker and SQS against STACK; print a drift table and exit 1 on any drift."""
        try:
            config = load_stack(stack)
            raw = read_stack_yaml(stack)
        except ConfigError as error:
            raise CannotVerify(str(error)) from None
        problems: list[str] = []  # every side's settings and reachability, reported together
        api = None
        if config.rabbitmq and not skip_rabbitmq:
            try:
                url = management_url or provider_setting(raw, "rabbitmq:endpoint", "--management-url")
                user = username or provider_setting(raw, "rabbitmq:username", "--username")
                secret = password or provider_setting(raw, "rabbitmq:password", "--password")
                unset = [
                    flag
                    for flag, value in (("--management-url", url), ("--username", user), ("--password", secret))
                    if not value
                ]
                if unset:
                    raise CannotVerify(
                        f"{', '.join(unset)} not given (flags, RABBITMQ_ENDPOINT/USERNAME/PASSWORD, "
                        "or rabbitmq:endpoint/username/password in the stack file)"
                    )
                if insecure is None:
                    insecure = bool(provider_setting(raw, "rabbitmq:insecure", "--insecure"))
                ca = ca_cert or provider_setting(raw, "rabbitmq:cacertFile", "--ca-cert")
                cert = client_cert or provider_setting(raw, "rabbitmq:clientcertFile", "--client-cert")
                key = client_key or provider_setting(raw, "rabbitmq:clientkeyFile", "--client-key")
                verify_tls: bool | str = False if insecure else (ca or True)
                if insecure:  # asked for explicitly: one note instead of a warning per request
                    urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
                    click.echo("note: TLS certificate checks are off (--insecure / rabbitmq:insecure)", err=True)
                api = ManagementApi(str(url), str(user), str(secret), verify_tls, (cert, key) if cert and key else cert)
            except CannotVerify as error:
                problems += error.problems
            except (ManagementError, ValueError) as error:
                problems.append(str(error))
        sqs = None
        if config.sqs and not skip_sqs:
            try:
                sqs = sqs_client(sqs_endpoint_url, region or provider_setting(raw, "aws:region", "--region"))
            except CannotVerify as error:
                problems += error.problems
            except Exception as error:  # botocore: no region, a bad endpoint URL
                problems.append(_sqs_problem(error))
        drifts, checked, unreachable = run_checks(config, api, sqs)
        if problems or unreachable:
            raise CannotVerify(problems + unreachable)
        if not checked:
            raise CannotVerify(f"stack {stack!r} has nothing to verify (no rabbitmq/sqs section, or both skipped)")
        if as_json:
            click.echo(json.dumps({"checked": checked, "drifts": [asdict(d) for d in drifts]}, indent=2))
            raise SystemExit(DRIFT_EXIT if drifts else NO_DRIFT_EXIT)
        console = Console(width=200)
        for line in checked:
            console.print(line)
        if drifts:
            print_drifts(console, drifts)
            raise SystemExit(DRIFT_EXIT)
        console.print("no drift")
