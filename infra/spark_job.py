"""The migration job's file for ``spark-submit`` (and ``python -m nsb_delays.infra.spark_job``).

spark-submit takes a Python *file*; from an installed package this is it. It runs the CLI's ``migrate``
command, so it is an entry point of the top layer, like the CLI itself. A cluster's executors also need the
package itself and a few libraries (see ``nsb_delays.pipeline.shipping``):

    python -m nsb_delays.infra.spark_job --py-files nsb_delays.zip     # the package, zipped for --py-files
    python -m nsb_delays.infra.spark_job --executor-requirements       # what the executors' Python needs
    python -m nsb_delays.infra.spark_job --connect-requirements        # a Spark Connect client's Python (--remote)
    spark-submit --master spark://host:7077 --jars /usr/share/java/postgresql.jar --py-files nsb_delays.zip \\
        "$(python -m nsb_delays.infra.spark_job --job-file)" run --source-jdbc jdbc:postgresql://db/app --endpoint Sales

Run as a file, this directory is first on ``sys.path``; every import here and in the package is
``nsb_delays.``-qualified or relative, so none of the package's module names can shadow anything.
"""

import sys
from pathlib import Path

import click

from nsb_delays.infra.commands.errors import end_process
from nsb_delays.infra.commands.migrate.group import migrate

# The packaging helpers, each alone on the command line: one list for the usage line and --help.
HELPERS = (
    ("--job-file", "print this file's path: the job file for spark-submit"),
    ("--py-files ZIP", "write this package as a zip for spark-submit --py-files"),
    ("--executor-requirements", "print what the executors' Python needs (pip install -r)"),
    ("--connect-requirements", "print what a Spark Connect client's Python needs (--remote)"),
)
RUN_AS = "python -m nsb_delays.infra.spark_job"
USAGE = f"usage: {RUN_AS} {' | '.join(flag for flag, _ in HELPERS)} | preview|run|abort [OPTIONS]"


def help_text() -> str:
    """``migrate``'s own help, then the packaging helpers (click knows only the migrate group)."""
    width = max(len(flag) for flag, _ in HELPERS) + 2
    helpers = "\n".join(f"  {flag.ljust(width)}{text}" for flag, text in HELPERS)
    own = migrate.get_help(click.Context(migrate, info_name="migrate"))
    return f"{own}\n\nPackaging helpers (each alone: {RUN_AS} --job-file):\n{helpers}"


def _helper(arguments: list[str]) -> int | None:
    """The packaging helpers; None when ``arguments`` are a ``migrate`` command line."""
    if arguments == ["--help"]:
        print(help_text())
        return 0
    if arguments == ["--job-file"]:
        print(__file__)
        return 0
    if arguments == ["--executor-requirements"]:
        from nsb_delays.pipeline.shipping import executor_requirements

        print("\n".join(executor_requirements()))
        return 0
    if arguments == ["--connect-requirements"]:
        from nsb_delays.pipeline.shipping import connect_client_requirements

        print("\n".join(connect_client_requirements()))
        return 0
    if arguments[:1] == ["--py-files"]:
        if len(arguments) != 2 or not arguments[1].endswith(".zip"):
            print(f"--py-files needs one path ending in .zip (a zip Spark can import from)\n{USAGE}", file=sys.stderr)
            return 2
        from nsb_delays.pipeline.environment_checks import writable_file_problems
        from nsb_delays.pipeline.shipping import write_package_zip

        problems = writable_file_problems("--py-files", arguments[1])
        if problems:
            print("\n".join(problems), file=sys.stderr)
            return 2
        print(write_package_zip(Path(arguments[1])))
        return 0
    if arguments[:1] and arguments[0].startswith("--"):
        print(f"unknown option {arguments[0]}\n{USAGE}", file=sys.stderr)
        return 2
    return None


if __name__ == "__main__":
    code = _helper(sys.argv[1:])
    if code is not None:
        sys.exit(code)
    end_process(migrate, prog_name="migrate")
