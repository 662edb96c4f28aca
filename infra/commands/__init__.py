"""The ``nsb-delays`` commands: one module (or package) per command, each a module-level click command that
``infra.cli`` imports only when that command runs (its ``COMMANDS``: name -> ``module:object``).

Every command and subcommand with the module that defines it, then every other file of this folder
(``tests/unit/test_command_index.py`` fails while one is not named here):

- ``explain``: ``explain.py``
- ``render``: ``render.py``
- ``check``: ``check.py``, with ``check.md.j2``, its report as a pull-request comment (``--format markdown``)
- ``verify``: ``verify.py``
- ``preflight``: ``preflight.py``
- ``discover``: ``discover.py``
- ``status``: ``status.py``
- ``pulumi-plugin``: ``pulumi_plugin.py``
- ``init``: ``init.py``, with the pipelines it writes: ``init-github-workflow.yml.j2``, ``init-gitlab-ci.yml.j2``;
  with ``--tool opentofu`` ``init_opentofu.py`` and its pipelines ``init-opentofu-github-workflow.yml.j2``,
  ``init-opentofu-gitlab-ci.yml.j2``; the steps both tools' pipelines share are ``init-ci-steps.j2``
- ``demo``: ``demo/command.py`` (the options and the run); ``demo/__init__.py`` re-exports its names and those of
  ``demo/startup.py`` (a given broker, or the private servers started), ``demo/provisioning.py`` (checked,
  provisioned, verified), ``demo/measurement.py`` (the delayed messages and their table) and ``demo/servers.py``
  (the private RabbitMQ and moto launchers, on which the tests' servers build)
- ``delays`` (a group): ``delays/__init__.py``
- ``delays migrate``: ``delays/migrate.py``
- ``delays transfer``: ``delays/transfer.py``
- ``delays parked``: ``delays/parked.py``; the three share ``delays/options.py`` (their options), the two moves
  ``delays/moves.py`` (plan, dry run, move, report)
- ``migrate`` (a group): ``migrate/group.py``, or without the ``[spark]`` extra the stand-in of ``migrate/__init__.py``
- ``migrate preview``: ``migrate/preview.py``
- ``migrate run``: ``migrate/run.py``
- ``migrate abort``: ``migrate/abort.py``; the three share ``migrate/options.py`` (the source, target and ledger
  options), ``migrate/checks.py`` (what is checked before anything changes) and ``migrate/resume.py`` (how a
  stopped or interrupted run goes on)

Shared by several commands:

- ``errors.py``: the exit codes and the error style (``CommandError``, ``RunStopped``, the ``Group`` every command
  runs under, ``end_process``)
- ``broker_options.py``: the broker and SQS connection options, and their defaults from the stack file
- ``stack_option.py``: ``--stack`` and the help of ``--baseline``
- ``passwords.py``: ``--passwords FILE`` (``render``, ``preflight``)
- ``retained.py``: ``--baseline`` of ``verify`` and ``status``: the queues an earlier stack left on the broker
"""
