"""``nsb-delays discover``: read what NServiceBus endpoints created on a broker and write the stack that adopts it.

One read of the broker (``brokers.discovery.read_broker``), classified without I/O (``stack.discovery.discover``),
then the stack file (``--stack``) and the ``pulumi import --file`` document of the ids the components compute
(``--import-file``, from the program recorded with ``adoptExisting``: ``components.recording.import_file``). Every
check runs before anything is written, and an existing file is never overwritten without ``--force``; the review
list (what it cannot classify, event exchanges no subscription explains) goes to stderr.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import yaml

from nsb_delays.brokers.discovery import read_broker
from nsb_delays.brokers.management import ManagementError
from nsb_delays.brokers.verify import topology_drifts
from nsb_delays.stack.config import NAMESPACE, ConfigError, RabbitMqConfig, stack_name
from nsb_delays.stack.discovery import CannotDiscover, Discovery, NothingToDiscover, discover

from .broker_options import StackDefaults, management_options, resolve_management
from .errors import CommandError

HEADER = "# Written by `nsb-delays discover` from {url} vhost {vhost!r}: review it before `pulumi up`.\n"


def stack_path(stack: str) -> Path:
    """``--stack``: a YAML path as given; a stack name (``prod``, or ``org/project/prod`` as Pulumi names it) writes
    ``Pulumi.<name>.yaml`` here, the name's last part as Pulumi names the stack's config file."""
    if stack.endswith((".yaml", ".yml")):
        return Path(stack)
    return Path(f"Pulumi.{stack.rsplit('/', 1)[-1]}.yaml")


def output_problems(paths: list[Path], force: bool) -> list[str]:
    """An existing file without ``--force``, or a folder that does not exist: each named, before anything is read."""
    problems = []
    for path in paths:
        if path.is_dir():
            problems.append(f"{path} is a directory: give a file path")
        elif path.exists() and not force:
            problems.append(f"{path} exists: pass --force to overwrite it")
        elif not path.parent.is_dir():
            problems.append(f"{path}: the folder {path.parent} does not exist")
    return problems


def stack_document(discovery: Discovery, management_url: str, vhost: str, review: list[str]) -> str:
    """The stack file: a header naming where it came from, the review list as comments, then ``config:``."""
    lines = [HEADER.format(url=management_url, vhost=vhost)]
    lines += [f"# review: {line}\n" for line in review]
    body = yaml.safe_dump({"config": discovery.stack_file_config(management_url)}, sort_keys=False)
    return "".join(lines) + body


def adoption_conflicts(config: RabbitMqConfig, definitions: dict[str, Any]) -> list[str]:
    """The objects on the broker the stack declares with another shape (type, durable, auto_delete, an argument):
    adopting imports each, then its diff asks for a replacement, which Pulumi refuses for a resource that still
    names its import ID (pulumi/pulumi ``pkg/resource/deploy/step_generator.go`` ``continueStepsFromDiff``:
    "previously-imported resources that still specify an ID may not be replaced"), so that ``pulumi up`` fails
    there. Objects the broker lacks are not conflicts: ``pulumi up`` creates them."""
    exchanges, queues, bindings = (list(definitions.get(kind) or []) for kind in ("exchanges", "queues", "bindings"))
    drifts = topology_drifts(config.topology, config.generation, exchanges, queues, bindings)
    return [
        f"cannot adopt {d.subject} as it is: the broker has {d.field} {d.actual}, the stack declares {d.expected} "
        "(pulumi up would have to replace it: delete and re-declare it, or leave the object out of the stack)"
        for d in drifts
        if d.field
    ]


def review_lines(discovery: Discovery, conflicts: list[str]) -> list[str]:
    lines = [*conflicts, *discovery.notes]
    if discovery.unexplained_exchanges:
        lines.append(
            "event exchanges no subscription explains (someone publishes them: add each to the publisher's "
            f"user.publishes): {', '.join(discovery.unexplained_exchanges)}"
        )
    lines += [f"not classified: {item.line()}" for item in discovery.unclassified]
    return lines


def import_document(discovery: Discovery, stack: str) -> str:
    """The ``pulumi import --file`` JSON of every object the stack adopts (the program recorded with
    ``adoptExisting``)."""
    from nsb_delays.components.recording import import_file
    from nsb_delays.infra.program import record_stack

    config = discovery.stack_config(stack).with_values("rabbitmq", adoptExisting=True)
    return json.dumps(import_file(record_stack(config, stack=stack)), indent=2) + "\n"


@click.command(name="discover")
@management_options(from_stack=False)
@click.option("--vhost", default="/", show_default=True, help="The virtual host the endpoints use.")
@click.option(
    "--stack",
    help="Write the stack config to Pulumi.<STACK>.yaml (a stack name) or to this .yaml path; without it, print it.",
)
@click.option("--import-file", type=click.Path(dir_okay=False), help="Write the `pulumi import --file` document here.")
@click.option(
    "--users/--no-users",
    default=True,
    show_default=True,
    help="Give each endpoint a least-privilege user (its subscriptions as grants); each needs a password secret.",
)
@click.option("--force", is_flag=True, help="Overwrite the files given if they exist.")
def discover_command(
    vhost: str, stack: str | None, import_file: str | None, users: bool, force: bool, **connection: Any
) -> None:
    """Read a broker whose topology NServiceBus endpoints created (installers on) and write the stack config that
    adopts it, and with --import-file the `pulumi import` file of its objects. It lists what it cannot classify
    and never guesses; nothing is written on any refusal."""
    targets = [path for path in (stack_path(stack) if stack else None, Path(import_file) if import_file else None)]
    refused = output_problems([path for path in targets if path is not None], force)
    if refused:
        raise CommandError(refused)
    api = resolve_management(connection, defaults=StackDefaults({}, None))
    try:
        read = read_broker(api, vhost, users=users)
    except ManagementError as error:
        raise CommandError(str(error)) from None
    try:
        discovery = discover(
            read.definitions, vhost=vhost, broker_version=read.broker_version, existing_users=read.users, users=users
        )
        name = stack_name(stack) if stack else "discovered"
        config = discovery.stack_config(name)
        document = import_document(discovery, name) if import_file else None
    except NothingToDiscover as error:
        raise CommandError(str(error)) from None
    except CannotDiscover as error:
        raise CommandError(error.problems, footer="nothing was written") from None
    except ConfigError as error:
        raise CommandError(error.problems, footer="the discovered config is refused; nothing was written") from None
    assert config.rabbitmq is not None
    review = review_lines(discovery, adoption_conflicts(config.rabbitmq, read.definitions))
    text = stack_document(discovery, api.url, vhost, review)
    if stack:
        stack_path(stack).write_text(text, encoding="utf-8")
    else:
        click.echo(text, nl=False)
    if import_file and document is not None:
        Path(import_file).write_text(document, encoding="utf-8")
    report(discovery, config.rabbitmq.endpoints, stack, import_file, review)


def report(discovery: Discovery, endpoints: Any, stack: str | None, import_file: str | None, review: list[str]) -> None:
    """What was found and written, the review list, and the commands that come next (stderr)."""
    section = discovery.section
    echo = click.echo
    echo(
        f"discovered {len(endpoints)} endpoint(s), {section['generation']} graph, {section['routingTopology']} "
        f"topology, {section['queueType']} queues, RabbitMQ {section['brokerVersion']}",
        err=True,
    )
    for path in (stack_path(stack) if stack else None, import_file):
        if path is not None:
            echo(f"wrote {path}", err=True)
    for line in review:
        echo(f"review: {line}", err=True)
    option = f" --stack {stack}" if stack and not stack.endswith((".yaml", ".yml")) else ""
    for key in discovery.password_keys:
        echo(f"next: pulumi config set --secret {NAMESPACE}:{key} <password>{option}", err=True)
