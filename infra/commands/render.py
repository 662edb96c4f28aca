"""``nsb-delays render --stack STACK --format FORMAT [-o FILE]``: files for teams without Pulumi or installers."""

from __future__ import annotations

import os
from pathlib import Path

import click

from nsb_delays.infra.render import FORMATS, PASSWORDS_FORMAT, RenderError, render
from nsb_delays.infra.render.terraform import (
    TerraformRenderError,
    adopted_before,
    directory_problem,
    terraform_module,
    write_module,
)
from nsb_delays.infra.render.topology_operator import (
    OPERATOR_VERSION,
    ClusterReference,
    TopologyOperatorRenderError,
    credential_secrets,
    dump_topology,
    topology_documents,
)
from nsb_delays.stack.config import NAMESPACE, ConfigError, StackConfig, load_stack
from nsb_delays.stack.config import TOPOLOGY_OPERATOR as TOPOLOGY_OPERATOR_SECTION

from .errors import CommandError
from .passwords import passwords_option, read_passwords
from .stack_option import stack_option


def output_problem(output: Path) -> str | None:
    """Why ``-o`` cannot be written (checked before rendering, so a refusal writes nothing)."""
    if output.is_dir():
        return f"-o {output}: is a directory; give a file path"
    parent = output.parent if str(output.parent) else Path(".")
    if not parent.is_dir():
        return f"-o {output}: directory {parent} does not exist"
    if not os.access(parent, os.W_OK) or (output.exists() and not os.access(output, os.W_OK)):
        return f"-o {output}: not writable"
    return None


TERRAFORM = "terraform"
"""The format that is a directory: an OpenTofu/Terraform module (``infra/render/terraform.py``)."""

DIRECTORY_FORMATS = {
    TERRAFORM: "an OpenTofu/Terraform module (a directory: -o DIR) of the cyrilgdn/rabbitmq and hashicorp/aws "
    "providers' resources, each as the Pulumi program declares it"
}

TOPOLOGY_OPERATOR = "topology-operator"
"""The format that needs a cluster reference: ``infra/render/topology_operator.py``."""

CLUSTER_FORMATS = {
    TOPOLOGY_OPERATOR: f"RabbitMQ Messaging Topology Operator {OPERATOR_VERSION} custom resources (multi-document "
    "YAML) of the stack's RabbitMQ objects, in the RabbitmqCluster --cluster names"
}

FORMATS_HELP = "; ".join(
    [
        *(f"{name}: {spec.description}" for name, spec in FORMATS.items()),
        *(f"{n}: {d}" for n, d in DIRECTORY_FORMATS.items()),
        *(f"{n}: {d}" for n, d in CLUSTER_FORMATS.items()),
    ]
)


@click.command(name="render", help=f"Render a stack as a file. Formats — {FORMATS_HELP}.")
@stack_option
@click.option(
    "--format",
    "format_name",
    type=click.Choice([*FORMATS, *DIRECTORY_FORMATS, *CLUSTER_FORMATS]),
    required=True,
    help="What to render (each format is described above).",
)
@click.option(
    "-o", "--output", type=click.Path(path_type=Path), help="Write here (default: stdout; a directory for terraform)."
)
@click.option(
    "--cluster",
    help=f"--format {TOPOLOGY_OPERATOR}: the RabbitmqCluster (its metadata.name) every resource is declared in. "
    "Default: the stack's nsb-delays:topologyOperator.cluster.",
)
@click.option(
    "--namespace",
    help=f"--format {TOPOLOGY_OPERATOR}: the RabbitmqCluster's namespace. Default: the stack's "
    "nsb-delays:topologyOperator.namespace, else each resource's own.",
)
@passwords_option(
    f"{PASSWORDS_FORMAT} then carries the users (password hashes as RabbitMQ computes them). Without it the file "
    "has their permissions but not the users."
)
def render_command(
    stack: str,
    format_name: str,
    output: Path | None,
    cluster: str | None,
    namespace: str | None,
    passwords_file: Path | None,
) -> None:
    if format_name in CLUSTER_FORMATS:
        render_topology(stack, output, ClusterReference(cluster or "", namespace), passwords_file)
        return
    if cluster is not None or namespace is not None:
        raise CommandError(f"--cluster and --namespace apply only to --format {TOPOLOGY_OPERATOR}")
    if format_name in DIRECTORY_FORMATS:
        render_module(stack, output, passwords_file)
        return
    passwords = read_passwords(passwords_file) if passwords_file is not None else None
    config = load_for_output(stack, output)
    try:
        text = render(config, format_name, stack, passwords)
    except RenderError as error:
        raise CommandError(str(error)) from None
    if format_name == PASSWORDS_FORMAT and passwords is None:
        note_users_left_out(config)
    write_or_echo(text, output, format_name, stack)


def write_or_echo(text: str, output: Path | None, format_name: str, stack: str) -> None:
    """A file format's text to ``-o FILE`` (and a line on stderr saying so), or to stdout without ``-o``."""
    if output is None:
        click.echo(text, nl=False)
        return
    try:
        output.write_text(text)
    except OSError as error:
        raise CommandError(f"-o {output}: {error.strerror or error}") from None
    click.echo(f"wrote {format_name} for stack {stack!r} to {output}", err=True)


def render_module(stack: str, output: Path | None, passwords_file: Path | None) -> None:
    """``--format terraform -o DIR``: the module into DIR, new or rendered before; nothing is written on a refusal.
    A module ``discover --format terraform`` wrote keeps its import blocks for the objects the stack still declares
    with the same import id (a review's edits of the stack file are rendered without losing the adoption)."""
    problems = [
        *(["--format terraform writes a directory: give -o DIR"] if output is None else []),
        *([f"--passwords applies only to --format {PASSWORDS_FORMAT}: a module takes each password as a sensitive "
           "variable"] if passwords_file is not None else []),
        *([problem] if output is not None and (problem := directory_problem(output)) else []),
    ]  # fmt: skip
    try:
        config = load_stack(stack, password_secrets=False)  # each password a variable or a Secret
    except ConfigError as error:
        raise CommandError([str(error), *problems]) from None
    if problems or output is None:
        raise CommandError(problems)
    try:  # after `discover --format terraform`, the objects it imports that the stack still declares the same
        module = terraform_module(config, stack, adopted_before(output))
    except TerraformRenderError as error:
        raise CommandError(f"format terraform: {error}") from None
    try:
        dropped = write_module(output, module)
    except OSError as error:
        raise CommandError(f"-o {output}: {error.strerror or error}") from None
    click.echo(
        f"wrote the terraform module of stack {stack!r} to {output} ({', '.join(sorted(module.files))})", err=True
    )
    if dropped:
        click.echo(
            f"kept on the broker, out of the module: {', '.join(dropped)} (removed blocks, destroy = false)", err=True
        )


def render_topology(stack: str, output: Path | None, given: ClusterReference, passwords_file: Path | None) -> None:
    """``--format topology-operator [--cluster NAME] [-o FILE]``: the cluster from the options, else from the stack's
    ``nsb-delays:topologyOperator``; refused before anything is written without one."""
    problems = [
        *([f"--passwords applies only to --format {PASSWORDS_FORMAT}: a User imports its password from a "
           "Kubernetes Secret"] if passwords_file is not None else []),
        *([problem] if output is not None and (problem := output_problem(output)) else []),
    ]  # fmt: skip
    try:
        config = load_stack(stack, password_secrets=False)  # each password a variable or a Secret
    except ConfigError as error:
        raise CommandError([str(error), *problems]) from None
    cluster = cluster_reference(config, given)
    if not cluster.name:
        problems.insert(
            0,
            f"--format {TOPOLOGY_OPERATOR} needs the RabbitmqCluster its resources are declared in: give --cluster "
            f"NAME, or set {NAMESPACE}:{TOPOLOGY_OPERATOR_SECTION}.cluster in the stack",
        )
    if problems:
        raise CommandError(problems)
    try:
        documents = topology_documents(config, stack, cluster)
    except TopologyOperatorRenderError as error:
        raise CommandError(f"format {TOPOLOGY_OPERATOR}: {error}") from None
    note_sqs_left_out(config)
    write_or_echo(dump_topology(documents, stack), output, TOPOLOGY_OPERATOR, stack)
    for secret, user, password_key in credential_secrets(documents):
        password = f"the stack's {password_key}" if password_key else "its password"
        click.echo(f"create first: Secret {secret} (username {user}, password {password})", err=True)


def cluster_reference(config: StackConfig, given: ClusterReference) -> ClusterReference:
    """``--cluster``/``--namespace`` over the stack's ``nsb-delays:topologyOperator`` (each option over its key)."""
    section = config.topology_operator
    return ClusterReference(
        given.name or (section.cluster if section else None) or "",
        given.namespace or (section.namespace if section else None),
    )


def note_sqs_left_out(config: StackConfig) -> None:
    """A stack with an SQS section too: its queues are not the operator's, say so."""
    if config.sqs is not None:
        click.echo(
            f"note: the nsb-delays:sqs section is not in the {TOPOLOGY_OPERATOR} file (the operator declares RabbitMQ "
            "objects only): render it with --format cloudformation or terraform",
            err=True,
        )


def load_for_output(stack: str, output: Path | None) -> StackConfig:
    """The stack, refused together with an ``-o`` that cannot be written (before anything is rendered)."""
    problem = output_problem(output) if output is not None else None
    try:
        config = load_stack(stack)
    except ConfigError as error:
        raise CommandError([str(error), *([problem] if problem else [])]) from None
    if problem:
        raise CommandError(problem)
    return config


def note_users_left_out(config: StackConfig) -> None:
    """Definitions without ``--passwords`` carry the endpoint users' permissions, not the users: say so."""
    users = [user.settings.user for user in config.rabbitmq.users] if config.rabbitmq else []
    if users:
        click.echo(
            f"note: endpoint users ({', '.join(users)}) are not in the file, only their permissions: create them "
            "first, or give --passwords FILE (an imported user without a password loses the one it had)",
            err=True,
        )
