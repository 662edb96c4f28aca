"""How every ``nsb-delays`` command fails: the exit codes, one short message, details in a log file.

Exit codes: 0 success; 1 drift, policy violations or a run that stopped; 2 bad input or an
unreachable service (nothing was changed); 130 interrupted (Ctrl-C or SIGTERM). An expected failure
prints a few lines that name the input and the rule it broke, never a traceback; the long detail of
a failure (a Spark/JVM stack trace, an unexpected error's traceback) goes to a log file whose path
the message gives.
"""

from __future__ import annotations

import datetime
import logging
import os
import signal
import sys
import threading
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import click

from nsb_delays.brokers.background import threads_left_at_exit

EXIT_OK = 0
EXIT_FAILED = 1  # drift, mandatory policy violations, a migration run that stopped
EXIT_BAD_INPUT = 2  # bad input or an unreachable service: refused before anything changed
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report Ctrl-C
LOG_DIR_VARIABLE = "NSB_DELAYS_LOG_DIR"
TRACEBACK_VARIABLE = "NSB_DELAYS_TRACEBACK"  # set to 1 to let unexpected errors raise (debugging)


class CommandError(click.ClickException):
    """An expected failure: one message (or a list of problems, all reported at once); exit 2 by default."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, problems: str | Sequence[str], *, exit_code: int | None = None, footer: str = "") -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        if len(self.problems) == 1:
            message = self.problems[0] + (f"; {footer}" if footer else "")
        else:
            message = f"{len(self.problems)} problems:\n" + "\n".join(f"  - {p}" for p in self.problems)
            message += f"\n{footer}" if footer else ""
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code  # type: ignore[misc]  # click 8.5 declares exit_code a ClassVar; this one is per error
        context = click.get_current_context(silent=True)
        self.command_path = context.command_path if context is not None else "nsb-delays"

    def show(self, file: Any = None) -> None:
        click.echo(f"{self.command_path}: {self.format_message()}", file=file or sys.stderr)


class RunStopped(CommandError):
    """A migration run that started and then stopped (exit 1): the message says how to resume or restore."""

    exit_code = EXIT_FAILED


class Interrupted(CommandError):
    """Ctrl-C or SIGTERM: what was done so far and how to go on (exit 130)."""

    exit_code = EXIT_INTERRUPTED


def first_line(error: BaseException | str) -> str:
    """The first non-empty line of an error's text (drivers and HTTP clients append long detail)."""
    text = str(error).strip()
    return next((line.strip() for line in text.splitlines() if line.strip()), type(error).__name__)


def unreachable(service: str, address: str, user: str | None, reason: BaseException | str) -> CommandError:
    """``cannot reach RabbitMQ AMQP at 127.0.0.1:5673 as 'guest': [Errno 111] Connection refused`` (exit 2)."""
    who = f" as {user!r}" if user else ""
    return CommandError(f"cannot reach {service} at {address}{who}: {first_line(reason)}")


def is_aws_client_error(error: BaseException) -> bool:
    """What boto3/botocore raise for credentials, an endpoint or a refused call: an expected failure that the
    commands report as ``SQS: <reason>`` (exit 2), unlike a bug of ours, which keeps its traceback."""
    return type(error).__module__.startswith(("botocore", "boto3"))


def log_dir() -> Path:
    """``$NSB_DELAYS_LOG_DIR``, else ``$XDG_STATE_HOME/nsb-delays/logs`` (``~/.local/state/…``)."""
    if os.environ.get(LOG_DIR_VARIABLE):
        return Path(os.environ[LOG_DIR_VARIABLE])
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "nsb-delays" / "logs"


def new_log_path(label: str) -> Path:
    """A fresh log file path (not created): ``<log dir>/<label>-<UTC time>-<pid>.log``."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S")
    return log_dir() / f"{label}-{stamp}-{os.getpid()}.log"


def write_log(text: str, label: str = "nsb-delays", path: Path | None = None) -> Path:
    """Append ``text`` to ``path`` (a new log file by default) and return where it went."""
    path = path or new_log_path(label)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as log:
        log.write(text if text.endswith("\n") else text + "\n")
    return path


def exception_log(error: BaseException, label: str = "nsb-delays", path: Path | None = None) -> Path:
    """The full traceback (and a JVM's stack trace, which is in the text of a Py4J error) in a log file."""
    return write_log("".join(traceback.format_exception(error)), label, path)


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM unwinds like Ctrl-C (KeyboardInterrupt), so clean-up and the interrupted report run for both.

    Both are recorded as well: Python runs a signal handler between any two bytecodes of the main thread, a garbage
    collector's finalizer included, and an exception raised inside one is printed and dropped (``Exception ignored
    in: <finalize object …>``; seen with urllib3's connection-pool finalizer). An interrupt that was dropped so is
    raised again when the block ends, and the command still ends as interrupted."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def interrupt(signum: int, _frame: Any) -> None:
        received.append(signum)
        raise KeyboardInterrupt

    previous = {signum: signal.signal(signum, interrupt) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if received:  # reached only when no KeyboardInterrupt came out of the block: one was dropped on the way
        raise KeyboardInterrupt


def _fail(code: int) -> NoReturn:
    sys.exit(code)


class Group(click.Group):
    """A click group whose ``main`` applies the error style to every command under it.

    ``ClickException`` (``CommandError`` and click's usage errors) prints its message and exits
    with its code; Ctrl-C or SIGTERM that a command did not handle exits 130 with one line; any
    other exception is a bug: one line naming the log file that holds its traceback, exit 1.
    """

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            with sigterm_as_interrupt():
                result = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.ClickException as error:
            error.show()
            _fail(error.exit_code)
        except (click.Abort, KeyboardInterrupt):
            click.echo(f"{prog_name or self.name}: interrupted; nothing more was done", err=True)
            _fail(EXIT_INTERRUPTED)
        except Exception as error:
            if os.environ.get(TRACEBACK_VARIABLE):
                raise
            log = exception_log(error, label=self.name or "nsb-delays")
            click.echo(
                f"{prog_name or self.name}: unexpected error {type(error).__name__}: {first_line(error)} "
                f"(a bug; the traceback is in {log})",
                err=True,
            )
            _fail(EXIT_FAILED)
        _fail(result if isinstance(result, int) else EXIT_OK)


def end_process(command: click.Command, **main_arguments: Any) -> NoReturn:
    """A console entry point's run of ``command``: its exit code, and nothing after it.

    A Spark Connect client (``--remote``) leaves pyspark's ``ReleaseExecute`` threads behind (``reattach.py``
    ``_release_all``, a ``ThreadPoolExecutor``), which retry for up to about ten minutes (``retries.py``
    ``DefaultPolicy``) and which CPython joins before the process can end. When a command said so
    (``leave_threads_at_exit``), the process ends right after the command's own output, with the command's exit
    code. Only entry points call this, never a test's ``CliRunner`` (whose process must go on)."""
    code: int | str | None = EXIT_OK
    try:
        command.main(**main_arguments)
    except SystemExit as done:
        code = done.code
    if not threads_left_at_exit():
        sys.exit(code)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code if isinstance(code, int) else EXIT_OK if code is None else EXIT_FAILED)
