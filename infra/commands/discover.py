"""``nsb-delays discover``: read what NServiceBus endpoints created on a broker and write the stack that adopts it.

One read of the broker (``brokers.discovery.read_broker``), classified without I/O (``stack.discovery.discover``),
then the stack file (``--stack``) and the ``pulumi import --file`` document of the ids the components compute
(``--import-file``, from the program recorded with ``adoptExisting``: ``components.recording.import_file``) of the
objects the broker holds in the shape the stack declares (``adoption``); or, with ``--format terraform -o DIR``, the
stack's OpenTofu/Terraform module (``infra.render.terraform``, as ``render --format terraform`` writes it) with
``imports.tf.json``: an ``import`` block for each of those objects at the address the module gives the same recorded
resource (``terraform_module``'s ``adopted``). Every check runs before anything is read or written, and an existing
file is never overwritten without ``--force`` (a directory: only an earlier render's); the review list (what it cannot
classify, event exchanges no subscription explains, what the broker lacks or holds otherwise) goes to stderr.
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import yaml

from nsb_delays.brokers.discovery import read_broker
from nsb_delays.brokers.management import ManagementError
from nsb_delays.brokers.verify import Drift, declared_policy_drifts, declared_subject, topology_drifts
from nsb_delays.components.encoding import binding_import_id, import_id
from nsb_delays.components.model.rabbitmq.objects import BindingSpec, ExchangeSpec, PolicySpec, QueueSpec
from nsb_delays.components.resource_types import RABBITMQ_BINDING, RABBITMQ_EXCHANGE, RABBITMQ_POLICY, RABBITMQ_QUEUE
from nsb_delays.infra.render.terraform import (
    IMPORTS_FILE,
    TerraformModule,
    TerraformRenderError,
    directory_problem,
    terraform_module,
    variable_name,
    write_module,
)
from nsb_delays.stack.config import NAMESPACE, ConfigError, RabbitMqConfig, StackConfig, stack_name
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


Spec = ExchangeSpec | QueueSpec | BindingSpec | PolicySpec
RESOURCE_TYPES = {ExchangeSpec: RABBITMQ_EXCHANGE, QueueSpec: RABBITMQ_QUEUE, BindingSpec: RABBITMQ_BINDING,
                  PolicySpec: RABBITMQ_POLICY}  # fmt: skip


@dataclass(frozen=True)
class Adoption:
    """How the broker meets each object of the stack NServiceBus declares (what adopting imports): held in the shape
    the stack declares (``present``: the import file lists it), not held (``missing``: the ``pulumi up`` after the
    import creates it), or held in another shape (``conflicts``: review lines)."""

    present: frozenset[tuple[str, str]] = frozenset()  # (resource type, import id), as the program declares it
    missing: tuple[str, ...] = ()  # "exchange audit", "binding audit -> queue audit"
    conflicts: tuple[str, ...] = ()

    def review(self, import_file: str | None, module: Path | None = None) -> list[str]:
        """The conflicts, what the broker lacks, and then the one adoption path that takes the broker as it is; with
        ``module`` (``--format terraform``), what the module's first apply does instead: it imports and creates."""
        lines = list(self.conflicts)
        if self.missing and module is not None:
            lines.append(
                f"not on the broker, created by the first apply of the module in {module} (its {IMPORTS_FILE} "
                f"imports the rest): {', '.join(self.missing)}"
            )
        elif self.missing:
            lines.append(f"not on the broker, created by the pulumi up after the import: {', '.join(self.missing)}")
        if (self.missing or self.conflicts) and module is None:
            how = (
                f"pulumi import --file {import_file}, then pulumi up"
                if import_file
                else "discover again with --import-file, then pulumi import --file and pulumi up"
            )
            lines.append(
                f"with objects missing or held in another shape, adopt with the import file ({how}), not with "
                "adoptExisting: an up with adoptExisting imports every object NServiceBus declares, and fails on one "
                "the broker lacks or holds in another shape"
            )
        return lines


def import_key(spec: Spec, vhost: str) -> tuple[str, str]:
    """The resource type and the ``pulumi import`` id the program gives ``spec`` (``components.rabbitmq.Declared``)."""
    found = binding_import_id(spec, vhost) if isinstance(spec, BindingSpec) else import_id(spec.name, vhost)
    return RESOURCE_TYPES[type(spec)], found


def review_name(spec: Spec) -> str:
    """``exchange audit``, ``binding audit -> queue audit``, ``binding nsb.v2.delay-delivery -> exchange Sales
    (#.Sales)``."""
    if isinstance(spec, BindingSpec):
        key = f" ({spec.routing_key})" if spec.routing_key else ""
        return f"binding {spec.source} -> {spec.destination_type} {spec.destination}{key}"
    return declared_subject(spec)


def conflict_line(spec: Spec, drift: Drift, module: Path | None = None) -> str:
    """An object the broker holds in another shape: importing it fails (Pulumi diffs the read against the program's
    inputs, and refuses to replace a resource that still names its import ID: pulumi/pulumi
    ``pkg/resource/deploy/step_generator.go`` ``continueStepsFromDiff``), so the import file leaves it out; then the
    ``pulumi up`` declares it: a policy's PUT writes over the broker's, an exchange or queue is refused. With
    ``module`` (``--format terraform``) the same holds of the module's import blocks and its apply (the provider's
    create is the same declaration: a policy's PUT, an exchange's or queue's declare)."""
    left_out = f"{module / IMPORTS_FILE}" if module is not None else "the import file"
    up, up_after = ("the apply", "the apply") if module is not None else ("pulumi up", "the pulumi up after the import")
    head = (
        f"cannot adopt {drift.subject} as it is: the broker has {drift.field} {drift.actual}, the stack declares "
        f"{drift.expected} (left out of {left_out}"
    )
    if isinstance(spec, PolicySpec):
        return f"{head}: {up_after} writes the stack's policy over it)"
    return (
        f"{head}; {up} can neither import it nor declare it over the broker's: delete it and let {up} "
        "declare it, or leave the object out of the stack)"
    )


def adoption(config: RabbitMqConfig, definitions: dict[str, Any], module: Path | None = None) -> Adoption:
    """Each object of the stack NServiceBus declares against the vhost's definitions, as ``verify`` compares them
    (``topology_drifts``: type, durable, auto_delete, arguments; ``declared_policy_drifts``). The objects only the
    stack declares (parking, combined policies, users) are the up's to create, and not looked at. ``module``: the
    review lines are the module's (``conflict_line``)."""
    exchanges, queues, bindings, policies = (
        list(definitions.get(kind) or []) for kind in ("exchanges", "queues", "bindings", "policies")
    )
    topology = config.topology
    drifts: defaultdict[str, list[Drift]] = defaultdict(list)
    for drift in topology_drifts(topology, config.generation, exchanges, queues, bindings):
        drifts[drift.subject].append(drift)
    for drift in declared_policy_drifts(topology, policies):
        drifts[drift.subject].append(drift)
    present: set[tuple[str, str]] = set()
    missing: list[str] = []
    conflicts: list[str] = []
    specs: list[Spec] = [*topology.exchanges, *topology.queues, *topology.bindings, *topology.policies]
    for spec in (spec for spec in specs if spec.nservicebus_declares):
        found = drifts.get(declared_subject(spec), [])
        if not found:
            present.add(import_key(spec, config.vhost))
        elif any(drift.kind == "missing" for drift in found):
            missing.append(review_name(spec))
        else:
            conflicts += [conflict_line(spec, drift, module) for drift in found]
    return Adoption(frozenset(present), tuple(missing), tuple(conflicts))


def review_lines(
    discovery: Discovery, adopted: Adoption, import_file: str | None = None, module: Path | None = None
) -> list[str]:
    lines = [*adopted.review(import_file, module), *discovery.notes]
    if discovery.unexplained_exchanges:
        lines.append(
            "event exchanges no subscription explains (someone publishes them: add each to the publisher's "
            f"user.publishes): {', '.join(discovery.unexplained_exchanges)}"
        )
    lines += [f"not classified: {item.line()}" for item in discovery.unclassified]
    return lines


def import_document(config: StackConfig, stack: str, adopted: Adoption) -> str:
    """The ``pulumi import --file`` JSON of every object the stack adopts that the broker holds in the declared shape:
    the program recorded with ``adoptExisting``, the import dropped from every other object (the up creates it)."""
    from nsb_delays.components.recording import import_file
    from nsb_delays.infra.program import record_stack

    recorded = [
        r if r.import_id is None or (r.type, r.import_id) in adopted.present else dataclasses.replace(r, import_id=None)
        for r in record_stack(config.with_values("rabbitmq", adoptExisting=True), stack=stack)
    ]
    return json.dumps(import_file(recorded), indent=2) + "\n"


PULUMI, TERRAFORM = "pulumi", "terraform"
FORMAT_HELP = (
    f"What adopts the broker besides the stack file. {PULUMI}: with --import-file, the `pulumi import --file` "
    f"document. {TERRAFORM}: the stack's OpenTofu/Terraform module into -o DIR (as `nsb-delays render --format "
    f"terraform` writes it) with {IMPORTS_FILE}, an import block for each object the broker holds as the stack "
    "declares it, so that the first `tofu plan` imports and creates, and replaces nothing; --import-file is "
    f"--format {PULUMI}'s."
)


def format_problems(format_name: str, output: Path | None, import_file: str | None) -> list[str]:
    """``--format`` with ``-o`` and ``--import-file``: each rule broken, named, before anything is read."""
    if format_name != TERRAFORM:
        return [f"-o applies only to --format {TERRAFORM} (the module's directory)"] if output is not None else []
    problems = [] if output is not None else [f"--format {TERRAFORM} writes a directory: give -o DIR"]
    if import_file:
        problems.append(
            f"--import-file is --format {PULUMI}'s `pulumi import` document: --format {TERRAFORM} writes its import "
            f"blocks into -o DIR ({IMPORTS_FILE})"
        )
    problem = directory_problem(output) if output is not None else None
    return [*problems, *([problem] if problem else [])]


@dataclass(frozen=True)
class Written:
    """What discover writes besides the stack file: the import file's text or the module."""

    import_document: str | None = None
    module: TerraformModule | None = None


def adoption_outputs(
    config: StackConfig, name: str, adopted: Adoption, import_file: str | None, output: Path | None
) -> Written:
    """The import file (``--import-file``) or the module with its import blocks (``-o DIR``)."""
    if output is not None:
        try:
            return Written(module=terraform_module(config, name, adopted.present))
        except TerraformRenderError as error:
            raise CommandError(f"format terraform: {error}") from None
    return Written(import_document=import_document(config, name, adopted) if import_file else None)


@click.command(name="discover")
@management_options(from_stack=False)
@click.option("--vhost", default="/", show_default=True, help="The virtual host the endpoints use.")
@click.option(
    "--stack",
    help="Write the stack config to Pulumi.<STACK>.yaml (a stack name) or to this .yaml path; without it, print it.",
)
@click.option(
    "--import-file",
    type=click.Path(dir_okay=False),
    help="Write the `pulumi import --file` document here (--format pulumi).",
)
@click.option(
    "--format", "format_name", type=click.Choice([PULUMI, TERRAFORM]), default=PULUMI, show_default=True,
    help=FORMAT_HELP,
)  # fmt: skip
@click.option(
    "-o", "--output", type=click.Path(path_type=Path), help=f"--format {TERRAFORM}: the module's directory (new, "
    "empty, or an earlier render's)."
)  # fmt: skip
@click.option(
    "--users/--no-users",
    default=True,
    show_default=True,
    help="Give each endpoint a least-privilege user (its subscriptions as grants); each needs a password secret.",
)
@click.option("--force", is_flag=True, help="Overwrite the files given if they exist.")
def discover_command(
    vhost: str,
    stack: str | None,
    import_file: str | None,
    format_name: str,
    output: Path | None,
    users: bool,
    force: bool,
    **connection: Any,
) -> None:
    """Read a broker whose topology NServiceBus endpoints created (installers on) and write the stack config that
    adopts it, and with --import-file the `pulumi import` file of its objects, or with --format terraform -o DIR the
    stack's OpenTofu/Terraform module that imports them. It lists what it cannot classify and never guesses;
    nothing is written on any refusal."""
    targets = [path for path in (stack_path(stack) if stack else None, Path(import_file) if import_file else None)]
    refused = output_problems([path for path in targets if path is not None], force)
    refused += format_problems(format_name, output, import_file)
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
        assert config.rabbitmq is not None
        adopted = adoption(config.rabbitmq, read.definitions, output)
        written = adoption_outputs(config, name, adopted, import_file, output)
    except NothingToDiscover as error:
        raise CommandError(str(error)) from None
    except CannotDiscover as error:
        raise CommandError(error.problems, footer="nothing was written") from None
    except ConfigError as error:
        raise CommandError(error.problems, footer="the discovered config is refused; nothing was written") from None
    assert config.rabbitmq is not None
    review = review_lines(discovery, adopted, import_file, output)
    text = stack_document(discovery, api.url, vhost, review)
    if stack:
        stack_path(stack).write_text(text, encoding="utf-8")
    else:
        click.echo(text, nl=False)
    if import_file and written.import_document is not None:
        Path(import_file).write_text(written.import_document, encoding="utf-8")
    if output is not None and written.module is not None:
        write_discovered_module(output, written.module)
    report(discovery, config.rabbitmq.endpoints, stack, import_file, review, output)


def write_discovered_module(output: Path, module: TerraformModule) -> None:
    try:
        write_module(output, module)
    except OSError as error:
        raise CommandError(f"-o {output}: {error.strerror or error}") from None


def report(
    discovery: Discovery,
    endpoints: Any,
    stack: str | None,
    import_file: str | None,
    review: list[str],
    module: Path | None = None,
) -> None:
    """What was found and written, the review list, and the commands that come next (stderr)."""
    section = discovery.section
    echo = click.echo
    echo(
        f"discovered {len(endpoints)} endpoint(s), {section['generation']} graph, {section['routingTopology']} "
        f"topology, {section['queueType']} queues, RabbitMQ {section['brokerVersion']}",
        err=True,
    )
    for path in (stack_path(stack) if stack else None, import_file, module):
        if path is not None:
            echo(f"wrote {path}", err=True)
    for line in review:
        echo(f"review: {line}", err=True)
    if module is not None:
        passwords = "".join(f" -var {variable_name(key)}=<password>" for key in discovery.password_keys)
        echo(f"next: tofu -chdir={module} init, then tofu -chdir={module} plan{passwords} (imports and creates)",
             err=True)  # fmt: skip
        return
    option = f" --stack {stack}" if stack and not stack.endswith((".yaml", ".yml")) else ""
    for key in discovery.password_keys:
        echo(f"next: pulumi config set --secret {NAMESPACE}:{key} <password>{option}", err=True)
