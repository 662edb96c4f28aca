"""``nsb-delays render --stack STACK --format FORMAT [-o FILE]``: files for teams without Pulumi or installers."""

from __future__ import annotations

from pathlib import Path

import click

from nsb_delays.infra.config import ConfigError, load_stack
from nsb_delays.infra.render import FORMATS, RenderError, render


def register(cli: click.Group) -> None:
    formats_help = "; ".join(f"{name}: {spec.description}" for name, spec in FORMATS.items())

    @cli.command(name="render", help=f"Render a stack as a file. Formats — {formats_help}.")
    @click.option("--stack", required=True, help="Stack name (reads Pulumi.<stack>.yaml) or a path to a stack YAML.")
    @click.option("--format", "format_name", type=click.Choice(list(FORMATS)), required=True)
    @click.option(
        "-o",
        "--output",
        type=click.Path(dir_okay=False, writable=True, path_type=Path),
        help="Write here (default: stdout).",
    )
    def render_command(stack: str, format_name: str, output: Path | None) -> None:
        try:
            text = render(load_stack(stack), format_name, stack)
        except (ConfigError, RenderError) as error:
            raise click.ClickException(str(error)) from None
        if output is None:
            click.echo(text, nl=False)
        else:
            output.write_text(text)
            click.echo(f"wrote {format_name} for stack {stack!r} to {output}", err=True)
