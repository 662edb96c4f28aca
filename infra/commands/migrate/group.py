"""The ``migrate`` group: ``preview``, ``run`` and ``abort``, each in its own module, over the PySpark job in
``pipeline/``. ``spark-submit`` runs it through ``infra/spark_job.py`` (the job file: ``python -m
nsb_delays.infra.spark_job --job-file`` prints its path). Needs the ``[spark]`` extra.

Options name the source (a JDBC table or an export), the target (RabbitMQ or SQS), the cutoff,
an endpoint, the batch size and the Spark master; see ``--help`` of each command.
"""

from __future__ import annotations

import click

from nsb_delays.infra.commands.errors import Group

from .abort import abort
from .preview import preview
from .run import run


@click.group(cls=Group)
def migrate() -> None:
    """Move stored timeouts (timeout manager / delayed stores) into native RabbitMQ or SQS delays.

    Every command checks what it needs first and refuses (exit 2, nothing changed) with every problem
    it found; 1: a run that started and stopped; 130: interrupted.
    """


migrate.add_command(preview)
migrate.add_command(run)
migrate.add_command(abort)
