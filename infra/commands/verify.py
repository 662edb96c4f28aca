"""``nsb-delays verify --stack STACK``: check a live broker (and SQS) against the stack; exit 1 on drift.

Connection settings come from flags, then the pulumi-rabbitmq provider's environment variables,
then the stack file's provider config (``rabbitmq:endpoint``, ``rabbitmq:username``, …), so the same
settings ``pulumi up`` uses work here. Exit codes: 0 no drift, 1 drift, 2 could not check.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from nsb_delays.brokers.management import ManagementApi, ManagementError
from nsb_delays.brokers.retained import CountFailed, RetainedQueue
from nsb_delays.brokers.verify import Drift, verify_rabbitmq, verify_sqs
from nsb_delays.stack.config import ConfigError, RabbitMqConfig, StackConfig, load_stack, read_stack_yaml

from .broker_options import ResolvedBroker, StackDefaults, management_options, resolve_rabbitmq
from .errors import EXIT_FAILED, EXIT_OK, CommandError, is_aws_client_error
from .retained import find_retained, load_baseline, retained_table
from .stack_option import baseline_option, stack_option

NO_DRIFT_EXIT, DRIFT_EXIT = EXIT_OK, EXIT_FAILED


class CannotVerify(CommandError):
    """The check itself could not run (bad config, broker unreachable, credentials missing): exit 2."""


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


def sqs_problem(error: Exception) -> str:
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
            problems.append(sqs_problem(error))
        else:
            drifts += found
            checked.append(f"SQS {sqs.meta.endpoint_url}: {len(found)} drift(s)")
    return drifts, checked, problems


@click.command(name="verify")
@stack_option
@management_options()
@click.option("--sqs-endpoint-url", envvar="AWS_ENDPOINT_URL_SQS", help="SQS endpoint, e.g. an emulator.")
@click.option("--region", envvar="AWS_REGION", help="AWS region. Default: stack aws:region.")
@click.option("--skip-rabbitmq", is_flag=True, help="Do not check RabbitMQ even if the stack configures it.")
@click.option("--skip-sqs", is_flag=True, help="Do not check SQS even if the stack configures it.")
@click.option(
    "--amqp-url",
    help="AMQP URL for counting the messages of retained queues (with --baseline). Default: the management host "
    "on 5672 (amqps on 5671 for an https management URL), the same credentials.",
)
@baseline_option
@click.option("--json", "as_json", is_flag=True, help="Print {checked, drifts, retained} as JSON instead of a table.")
def verify(
    stack: str,
    sqs_endpoint_url: str | None,
    region: str | None,
    skip_rabbitmq: bool,
    skip_sqs: bool,
    baseline: str | None,
    as_json: bool,
    **connection: Any,
) -> None:
    """Check a live broker and SQS against STACK; print a drift table and exit 1 on any drift. With --baseline,
    also list the queues an earlier version of the stack kept on delete and the broker still holds (not drift)."""
    try:
        config = load_stack(stack, password_secrets=False)  # verify reads no endpoint user's password
        defaults = StackDefaults(read_stack_yaml(stack), config, stack)
    except ConfigError as error:
        raise CannotVerify(str(error)) from None
    previous = load_baseline(baseline) if baseline else None
    problems: list[str] = []  # every side's settings and reachability, reported together
    wants_rabbitmq = bool(config.rabbitmq or previous) and not skip_rabbitmq
    broker = rabbitmq_client({**connection, "stack": stack}, defaults, problems) if wants_rabbitmq else None
    api = broker.management if broker else None
    sqs = sqs_client_of(sqs_endpoint_url, region, defaults, problems) if config.sqs and not skip_sqs else None
    drifts, checked, unreachable = run_checks(config, api, sqs)
    retained = retained_of(broker, previous, config, unreachable) if broker and previous else []
    if problems or unreachable:
        raise CannotVerify(problems + unreachable)
    if not checked and previous is None:
        raise CannotVerify(f"stack {stack!r} has nothing to verify (no rabbitmq/sqs section, or both skipped)")
    if as_json:
        document = {"checked": checked, "drifts": [asdict(d) for d in drifts]}
        click.echo(json.dumps(document | {"retained": [r.as_json() for r in retained]}, indent=2))
        raise SystemExit(DRIFT_EXIT if drifts else NO_DRIFT_EXIT)
    print_report(checked, drifts, retained)


def rabbitmq_client(values: dict[str, Any], defaults: StackDefaults, problems: list[str]) -> ResolvedBroker | None:
    """The management client (and AMQP nodes) the options and the stack describe; None, with the problems, if
    unusable."""
    try:
        return resolve_rabbitmq(values, connection_name="nsb-delays verify", defaults=defaults)
    except CommandError as error:
        problems += error.problems
    except (ManagementError, ValueError) as error:
        problems.append(str(error))
    return None


def retained_of(
    broker: ResolvedBroker, previous: RabbitMqConfig, config: StackConfig, problems: list[str]
) -> list[RetainedQueue]:
    """``find_retained``, or the problem that stopped it (reported with every other side's)."""
    try:
        return find_retained(broker, previous, config.rabbitmq)
    except (ManagementError, CountFailed) as error:
        problems.append(f"retained queues: {error}")
    return []


def sqs_client_of(endpoint_url: str | None, region: str | None, defaults: StackDefaults, problems: list[str]) -> Any:
    """The SQS client (region: the option, else the stack's ``aws:region``); None, with the problems, if unusable."""
    try:
        return sqs_client(endpoint_url, region or defaults.provider("aws:region", "--region"))
    except CommandError as error:
        problems += error.problems
    except Exception as error:  # botocore: no region, a bad endpoint URL
        problems.append(sqs_problem(error))
    return None


def print_report(checked: list[str], drifts: list[Drift], retained: list[RetainedQueue]) -> None:
    """A line per side checked, the retained queues, then the drift table (exit 1) or ``no drift``."""
    console = Console(width=200)
    for line in checked:
        console.print(line)
    if retained:
        console.print(retained_table(retained))
        for queue in retained:
            console.print(f"  retained {queue.queue}: {queue.fix}", highlight=False)
    if drifts:
        print_drifts(console, drifts)
        raise SystemExit(DRIFT_EXIT)
    console.print("no drift")
