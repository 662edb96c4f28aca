"""What the demo runs on: a RabbitMQ given with ``--amqp-url`` and ``--management-url`` (left running), or the private
RabbitMQ of a version the suite proves and moto (``servers``), started with their clean-up registered first.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit

from rich.console import Console

from nsb_delays.infra.commands.errors import CommandError

from .servers import (
    RABBITMQ_4_3,
    DemoChrootRabbitMq,
    DemoMoto,
    DemoRabbitMq,
    ServiceUnavailable,
)

# The private broker: the newest RabbitMQ the tests prove by default (Debian forky's 4.3 from its chroot root, which
# needs root), Debian 12's rabbitmq-server package on request.
PRIVATE_BROKERS = {RABBITMQ_4_3.version: RABBITMQ_4_3, "3.10": None}
NEWEST_PRIVATE_BROKER = RABBITMQ_4_3.version


class DemoRefused(CommandError):
    """Bad input or a broker the demo must not provision: exit 2, nothing changed."""


@dataclass(frozen=True)
class ExistingRabbitMq:
    """A running RabbitMQ given on the command line; the demo provisions into it and leaves it running."""

    management_url: str
    amqp_url: str  # without a vhost: the stack names the vhost
    username: str
    password: str


def existing_rabbitmq(amqp_url: str | None, management_url: str | None) -> ExistingRabbitMq | None:
    """``--amqp-url amqp://user:pass@host:port`` and ``--management-url http://host:port``, checked;
    every problem of both URLs at once."""
    if amqp_url is None and management_url is None:
        return None
    problems = []
    if amqp_url is None or management_url is None:
        missing = "--amqp-url" if amqp_url is None else "--management-url"
        problems.append(f"{missing} is missing: --amqp-url and --management-url go together")
    amqp = urlsplit(amqp_url or "")
    if amqp_url is not None and (amqp.scheme not in ("amqp", "amqps") or not amqp.hostname):
        problems.append(f"--amqp-url {amqp_url!r} is not an AMQP URL: expected amqp://user:password@host:port")
    elif amqp_url is not None and amqp.path not in ("", "/"):
        problems.append(
            f"--amqp-url {amqp_url!r} names vhost {amqp.path[1:]!r}: leave it out, the demo provisions the "
            "stack's vhost (nsb-delays:rabbitmq.vhost)"
        )
    management = urlsplit(management_url or "")
    if management_url is not None and (management.scheme not in ("http", "https") or not management.hostname):
        problems.append(f"--management-url {management_url!r} is not an http(s) URL: expected http://host:15672")
    if problems or amqp_url is None or management_url is None:
        raise DemoRefused(problems)
    username, password = amqp.username or "guest", amqp.password or "guest"
    return ExistingRabbitMq(management_url.rstrip("/"), amqp_url.rstrip("/"), username, password)


RabbitMqBroker = DemoRabbitMq | ExistingRabbitMq


def private_broker(version: str) -> DemoRabbitMq:
    """The private broker of ``version`` (a key of PRIVATE_BROKERS); unavailable: the message names
    ``--rabbitmq-version 3.10`` as the other way."""
    release = PRIVATE_BROKERS[version]
    if release is None:
        return DemoRabbitMq()
    broker = DemoChrootRabbitMq(release=release)
    try:
        broker.check_installed()
    except ServiceUnavailable as error:
        broker.__exit__(None, None, None)  # the empty state folder its constructor made
        other = "or run the demo on Debian's RabbitMQ 3.10: --rabbitmq-version 3.10"
        raise ServiceUnavailable(f"{error}; {other}") from None
    return broker


@contextmanager
def private_servers(
    rabbitmq: bool,
    moto: bool,
    console: Console,
    existing: ExistingRabbitMq | None = None,
    version: str = NEWEST_PRIVATE_BROKER,
) -> Iterator[tuple[RabbitMqBroker | None, DemoMoto | None]]:
    """Start the servers with their clean-up registered *before* start, so an interrupt mid-start cleans up too."""
    with ExitStack() as cleanup:
        broker: RabbitMqBroker | None = None
        sqs = None
        if rabbitmq and existing:
            broker = existing
            console.print(f"RabbitMQ {existing.management_url} (given; the demo leaves it running)")
        elif rabbitmq:
            broker = private_broker(version)
            cleanup.callback(broker.__exit__, None, None, None)  # stops server and epmd, removes the state
            console.print(
                f"starting RabbitMQ {version}: management {broker.management_url}, AMQP {broker.amqp_port}, "
                f"state in {broker.state_dir}"
            )
            broker.start()
        if moto:
            sqs = DemoMoto()
            cleanup.callback(sqs.stop)
            sqs.start()
            console.print(f"moto (SQS, CloudFormation) {sqs.endpoint_url}")
        yield broker, sqs
