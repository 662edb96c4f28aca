"""The ``nsb-delays`` commands: one module (or package) per command, each a module-level click command that
``infra.cli`` imports only when that command runs.

``explain``, ``render``, ``check``, ``verify``, ``status``, ``pulumi_plugin``; ``demo`` (``demo/``: its command,
startup, provisioning, measurement and private servers); the ``delays`` group (``delays/``: ``migrate``,
``transfer``, ``parked``) and the ``migrate`` group (``migrate/``: ``preview``, ``run``, ``abort``). Shared:
``errors`` (exit codes and the error style), ``broker_options`` (the connection options) and ``stack_option``
(``--stack``).
"""
