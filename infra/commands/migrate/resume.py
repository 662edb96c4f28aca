"""How a run that stopped or was interrupted goes on: where it stands, and the commands that resume or restore it
(the options the user gave, the new spellings of deprecated ones, passwords masked)."""

from __future__ import annotations

import shlex

import click
from click.core import ParameterSource

from nsb_delays.infra.commands.broker_options import DEPRECATED
from nsb_delays.infra.commands.errors import CommandError, Interrupted, RunStopped
from nsb_delays.pipeline.migration import RunTracker
from nsb_delays.stack.redaction import without_password

from .options import option_flag

SECRET_OPTIONS = ("jdbc_password", "password")
NEW_SPELLING = {param: new for param, new, _ in DEPRECATED.values()}  # the resume advice writes the new spellings


def command_line(context: click.Context, command: str, names: tuple[str, ...] | None = None, **more: str) -> str:
    """``nsb-delays migrate <command>`` with the options the user gave (passwords masked), for the advice."""
    words = ["nsb-delays", "migrate", command]
    for parameter in context.command.params:
        name = parameter.name or ""
        typed = context.get_parameter_source(name) == ParameterSource.COMMANDLINE
        if typed and name not in more and (names is None or name in names):
            words += _option_words(name, context.params.get(name))
    for name, value in more.items():
        words += [option_flag(name), value]
    return shlex.join(words)


def _option_words(name: str, value: object) -> list[str]:
    """One typed option as words of a command line, in its new spelling."""
    flag = NEW_SPELLING.get(name, option_flag(name))
    if isinstance(value, bool):
        return [flag if value else "--no-" + flag[2:]]
    if isinstance(value, tuple):  # a repeatable option (--rabbitmq-url)
        return [word for item in value for word in (flag, without_password(str(item)))]
    if value is None:
        return []
    return [flag, "***" if name in SECRET_OPTIONS else without_password(str(value))]


ABORT_OPTIONS = ("source_jdbc", "source_path", "source_format", "source_kind", "dialect", "endpoint", "schema",
                 "table", "jdbc_user", "jdbc_password", "master", "remote", "ledger_jdbc_url")  # fmt: skip


def where_the_run_stands(tracker: RunTracker, *, look_up: bool = False) -> str | None:
    """``run <id>: 1,200 hidden, 300 dispatched, 0 quarantined, 900 pending``; None when this command neither
    resumed nor started a run. ``look_up``: also a run the ledger holds that the command had not noted yet
    (an interrupt right after the hiding transaction committed)."""
    ledger, run = tracker.ledger, tracker.run
    if ledger is None or (run is None and not look_up):
        return None
    try:
        run = run or ledger.active_run()
        if run is None:
            return None
        progress = ledger.progress(run)
    except Exception:  # the database is what failed: say what is known
        return f"run {run.run_id}" if run is not None else None
    pending = progress.total - progress.settled
    return (
        f"run {run.run_id}: {progress.total:,} hidden, {progress.dispatched:,} dispatched, "
        f"{progress.quarantined:,} quarantined, {pending:,} pending"
    )


def how_to_go_on(context: click.Context, run_id: str) -> str:
    return (
        f"resume:  {command_line(context, 'run')}\n"
        f"restore: {command_line(context, 'abort', ABORT_OPTIONS, run_id=run_id)}"
    )


def stopped(context: click.Context, tracker: RunTracker, reason: str) -> CommandError:
    """Before a run exists nothing moved: exit 2 with the reason. After: exit 1, where it stands, how to go on."""
    stands = where_the_run_stands(tracker)
    if stands is None:
        return CommandError(reason if "nothing was" in reason else f"{reason}; nothing was changed")
    run_id = stands.split(":")[0].removeprefix("run ")
    return RunStopped(
        f"the run stopped: {reason}\n{stands}; every confirmed batch is recorded in the ledger.\n"
        f"{how_to_go_on(context, run_id)}"
    )


def interrupted(context: click.Context, tracker: RunTracker) -> Interrupted:
    stands = where_the_run_stands(tracker, look_up=True)
    if stands is None:
        return Interrupted("interrupted before any timeout was hidden; nothing was changed")
    run_id = stands.split(":")[0].removeprefix("run ")
    return Interrupted(f"interrupted. {stands}.\n{how_to_go_on(context, run_id)}")
