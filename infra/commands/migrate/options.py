"""The options of ``migrate preview|run|abort``: the source, the target and the ledger, and which belong to which."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click
from click.core import ParameterSource

from nsb_delays.components.model.rabbitmq.names import DEFAULT_GENERATION, GENERATIONS
from nsb_delays.infra.commands.broker_options import (
    DEPRECATED,
    broker_options,
    deprecated_options,
    sqs_options,
)
from nsb_delays.pipeline.dispatch import TARGETS
from nsb_delays.pipeline.layouts import SOURCE_KINDS
from nsb_delays.pipeline.sources import EXPORT_FORMATS

JDBC_ONLY = ("source_kind", "dialect", "schema", "table")
EXPORT_ONLY = ("source_format", "ledger_jdbc_url", "abort_output")
RABBITMQ_ONLY = ("amqp_url", "management_url", "username", "password", "vhost", "ca_cert", "client_cert", "client_key",
                 "insecure", "generation", "rabbitmq_url", "rabbitmq_management_url")  # fmt: skip
SQS_ONLY = ("sqs_endpoint_url", "region", "sqs_prefix", "sqs_s3_bucket", "sqs_s3_key_prefix", "sqs_region")
CUTOFF_FORMATS = ["%Y-%m-%d", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S"]


def source_options(command: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option(
            "--source-jdbc",
            metavar="URL",
            help="JDBC URL of the timeout store: jdbc:postgresql://…, jdbc:mysql:// or jdbc:mariadb://…, "
            "jdbc:sqlserver://…;databaseName=…, jdbc:oracle:thin:@//host:port/service.",
        ),
        click.option("--source-path", metavar="PATH", help="An export (e.g. RavenDB TimeoutData) to read instead."),
        click.option(
            "--source-format",
            type=click.Choice(EXPORT_FORMATS),
            default="parquet",
            show_default=True,
            help="The format of the --source-path export.",
        ),
        click.option(
            "--source-kind",
            type=click.Choice([kind for kind in SOURCE_KINDS if kind != "export"]),
            default="sqlp",
            show_default=True,
            help="sqlp: SQL persistence <prefix>TimeoutData; nhibernate: TimeoutEntity; msmq: <endpoint>.timeouts.",
        ),
        click.option("--dialect", help="SQL dialect (default: from the JDBC URL)."),
        click.option("--endpoint", help="The endpoint whose timeouts to migrate (names the table / filters rows)."),
        click.option("--schema", help="Schema of the table (default: public / dbo)."),
        click.option("--table", help="Quoted table name, when it differs from the store's convention."),
        click.option("--jdbc-user", envvar="NSB_JDBC_USER", help="Database user (wins over the JDBC URL's)."),
        click.option(
            "--jdbc-password", envvar="NSB_JDBC_PASSWORD", help="Database password (wins over the JDBC URL's)."
        ),
        click.option("--master", help="Spark master (default local[*]; spark-submit's --master wins)."),
        click.option(
            "--remote",
            metavar="sc://HOST:PORT",
            help="A Spark Connect server to run on instead of a master (the server's jars and executors are used).",
        ),
    ]
    return functools.reduce(lambda f, option: option(f), reversed(options), command)


def target_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The target: the same connection options as every other command (``broker_options``), several AMQP URLs
    for a cluster's nodes, and the old spellings (``--rabbitmq-url`` …) with a deprecation note."""
    options: list[Callable[..., Any]] = [
        click.option(
            "--target",
            type=click.Choice(TARGETS),
            default="rabbitmq",
            show_default=True,
            help="Where the timeouts become native delays: RabbitMQ's delay graph or SQS.",
        ),
        broker_options(what="the target broker", nodes=True),
        deprecated_options(*DEPRECATED, nodes=True),
        click.option(
            "--generation",
            type=click.Choice(GENERATIONS),
            default=DEFAULT_GENERATION.value,
            show_default=True,
            help="The target broker's delay graph (v1: nsb.delay-level-NN, v2: nsb.v2.delay-level-NN).",
        ),
        sqs_options,
        click.option("--cutoff", type=click.DateTime(CUTOFF_FORMATS), help="Only timeouts due at or after it (UTC)."),
    ]
    return functools.reduce(lambda f, option: option(f), reversed(options), command)


def ledger_option(command: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--ledger-jdbc-url",
        metavar="URL",
        envvar="NSB_LEDGER_JDBC_URL",
        help="With --source-path: PostgreSQL database (jdbc:postgresql://…) for the run's ledger and migration table.",
    )(command)


def option_flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def given(name: str) -> bool:
    """The user typed this option (a default or an environment variable does not count)."""
    context = click.get_current_context()
    return context.get_parameter_source(name) == ParameterSource.COMMANDLINE


def misplaced(names: tuple[str, ...], only: str) -> list[str]:
    """The options of ``names`` the user typed, which apply ``only`` to another source or target."""
    flags = [option_flag(name) for name in names if given(name)]
    return [f"{', '.join(flags)} {'applies' if len(flags) == 1 else 'apply'} only {only}"] if flags else []
