"""``--passwords FILE``: endpoint users' passwords given as a file instead of read from the stack's secrets, for a team
that keeps them elsewhere (``render`` puts them into a definitions file, ``preflight`` logs in with them)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from nsb_delays.stack.config import ConfigError, parse_yaml

from .errors import CommandError


def read_passwords(path: Path) -> dict[str, str]:
    """A YAML (or JSON) mapping of endpoint user name -> password."""
    try:
        raw = parse_yaml(path.read_text(), str(path))
    except (OSError, ConfigError) as error:
        raise CommandError(f"--passwords {path}: {getattr(error, 'strerror', None) or error}") from None
    if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, str) and v for k, v in raw.items()):
        raise CommandError(f"--passwords {path}: expected a mapping of user name -> non-empty password string")
    return raw


F = TypeVar("F", bound=Callable[..., Any])


def passwords_option(help_text: str) -> Callable[[F], F]:
    return click.option(
        "--passwords",
        "passwords_file",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help=f"YAML mapping of endpoint user -> password: {help_text}",
    )
