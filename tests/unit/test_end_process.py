"""``end_process``: a console entry point ends with its command's exit code, even while a library's thread-pool
worker still sleeps in a retry (pyspark's ``ReleaseExecute`` threads), which CPython would join first
(``concurrent.futures.thread._python_exit``, run before ``atexit``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

# A command that leaves a pool worker asleep for an hour, as a release thread in back-off is; the test's
# subprocess timeout is only a guard against a hang, never the measure.
PROGRAM = """
import sys, time
from concurrent.futures import ThreadPoolExecutor
import click
from nsb_delays.brokers.background import leave_threads_at_exit
from nsb_delays.infra.commands.errors import Group, end_process

@click.group(cls=Group)
def cli() -> None:
    pass

@cli.command()
@click.argument("code", type=int)
def report(code: int) -> None:
    if sys.argv[1] == "leave":
        leave_threads_at_exit("a retrying library")
    ThreadPoolExecutor(1).submit(time.sleep, 3600)
    click.echo("the report")
    if code:
        raise click.ClickException("stopped")

end_process(cli, args=["report", sys.argv[2]], prog_name="demo")
"""


@pytest.mark.parametrize("code", [0, 1])
def test_the_process_ends_with_the_commands_code_and_output_while_a_pool_worker_sleeps(code: int) -> None:
    done = subprocess.run([sys.executable, "-c", PROGRAM, "leave", str(code)], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert (done.returncode, done.stdout) == (code, "the report\n"), done.stderr


def test_without_leaving_threads_the_process_waits_for_them_as_python_does() -> None:
    """The ordinary end still joins them: end_process changes nothing for a command that did not ask."""
    with pytest.raises(subprocess.TimeoutExpired):
        subprocess.run([sys.executable, "-c", PROGRAM, "keep", "0"], capture_output=True, timeout=1)
